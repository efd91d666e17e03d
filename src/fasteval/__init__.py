"""fasteval: fast, exact evaluation of PyTorch policies on gymnasium environments."""

from fasteval.version import __version__
from fasteval.types.errors import FastevalError
from fasteval.types.spec import EvalSpec


def __getattr__(name: str):
    # The API pulls in torch; keep `import fasteval` light for the CLI's --help.
    if name in ("evaluate", "Evaluator"):
        from fasteval.run import api

        return getattr(api, name)
    if name == "EvalResult":
        from fasteval.types.results import EvalResult

        return EvalResult
    raise AttributeError(f"module 'fasteval' has no attribute {name!r}")


__all__ = ["EvalResult", "EvalSpec", "Evaluator", "FastevalError", "evaluate", "__version__"]
