"""fasteval: fast, exact evaluation of PyTorch policies on gymnasium environments."""

from fasteval.version import __version__

import gymnasium as _gym

if "fasteval/KnownAnswer-v0" not in _gym.registry:
    _gym.register(id="fasteval/KnownAnswer-v0", entry_point="fasteval.testing.envs:KnownAnswerEnv", max_episode_steps=64)

from fasteval.errors import FastevalError  # noqa: E402
from fasteval.spec import EvalSpec  # noqa: E402


def __getattr__(name: str):
    # The API pulls in torch; keep `import fasteval` light for the CLI's --help.
    if name in ("evaluate", "Evaluator"):
        from fasteval import api

        return getattr(api, name)
    if name == "EvalResult":
        from fasteval.results import EvalResult

        return EvalResult
    raise AttributeError(f"module 'fasteval' has no attribute {name!r}")


__all__ = ["EvalResult", "EvalSpec", "Evaluator", "FastevalError", "evaluate", "__version__"]
