"""fasteval's exceptions: one base class, specific subclasses.

Every message says what was expected, what was received, and what to do.
The CLI maps :class:`UserInputError` (and its subclasses) to exit code 2.
"""

from __future__ import annotations


class FastevalError(Exception):
    """Base class of every error fasteval raises on purpose."""


class UserInputError(FastevalError, ValueError):
    """Bad input from the user (options, env ids, policy references). CLI exit code 2."""


class EnvNotFoundError(UserInputError):
    """The env id or ``module:callable`` could not be resolved."""


class PolicyLoadError(UserInputError):
    """The policy reference could not be loaded (missing file, bad checkpoint, key mismatch)."""


class ActionSpaceMismatchError(UserInputError):
    """The policy's actions do not fit the env's action space (caught on the dry run)."""


class PolicyDryRunError(UserInputError):
    """The policy raised on its first call, before any episode counted (CLI exit code 2)."""


class PolicyError(FastevalError, RuntimeError):
    """The policy raised or returned invalid actions while the evaluation ran."""


class EnvStepError(FastevalError, RuntimeError):
    """An env raised, hung or died while stepping or resetting."""


class EnvBuildError(UserInputError, EnvStepError):
    """An env could not be built before the run started: its constructor raised, or an env worker raised or
    died while building its envs. Nothing ran; CLI exit code 2 (one line). Also an :class:`EnvStepError`."""


def one_line(exc: BaseException) -> str:
    """``Type: message`` of ``exc`` on one line (a multi-line message's lines joined with `` | ``)."""
    text = " | ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class EvaluationAborted(FastevalError, RuntimeError):
    """The run stopped early (the policy raised, a non-finite action, a second interrupt).

    ``partial`` holds the :class:`~fasteval.types.results.EvalResult` of every episode that finished
    before the stop: nothing already computed is lost. ``__cause__`` is the original error.
    """

    def __init__(self, message: str, partial):
        super().__init__(message)
        self.partial = partial
