"""How long an env reset may take before it counts as hung: scaled from the run's first resets.

``--step-timeout`` (seconds per env call) fits a step. A reset can be far slower, and the first one slowest: a
LIBERO env builds its MuJoCo model, compiles it and makes its render context on its first reset, then rebuilds
the model on every hard reset; on a loaded machine the first one has taken more than the 300 s default. So:

* **the first reset of the envs** (the engine's first wave: the run's dry run of its envs, before the policy's)
  may take :data:`FIRST_RESET_FACTOR` x ``step_timeout`` per env;
* **every later reset** may take ``max(step_timeout, MEASURED_FACTOR x the first wave's slowest reset per env)``
  per env: a slow machine that built its envs slowly gets a long limit, a fast one keeps ``step_timeout``.

Resets done in turn (a sync batch, a pool worker's block) get the per-env limit once per env. ``step_timeout``
``None``: no deadline. The words of a timeout message (:meth:`ResetDeadline.what`) say which rule applied and
which option to raise.
"""

from __future__ import annotations

FIRST_RESET_FACTOR = 4.0
"""The first reset of an env (it builds its model) may take this many ``--step-timeout`` s."""
MEASURED_FACTOR = 10.0
"""Later resets may take this many times the first wave's slowest measured reset per env (at least
``--step-timeout``)."""


class ResetDeadline:
    """The reset limit of one set of slot envs (see the module docstring)."""

    def __init__(self, step_timeout: float | None):
        self.step_timeout = step_timeout
        self.measured_s: float | None = None
        """The first wave's slowest reset per env (seconds), once measured; ``None`` before."""

    def per_env(self) -> float | None:
        """Seconds one env reset may take now; ``None``: no deadline."""
        if self.step_timeout is None:
            return None
        if self.measured_s is None:
            return FIRST_RESET_FACTOR * self.step_timeout
        return max(self.step_timeout, MEASURED_FACTOR * self.measured_s)

    def limit(self, n: int) -> float | None:
        """Seconds ``n`` env resets done in turn may take."""
        each = self.per_env()
        return None if each is None else each * max(1, int(n))

    def note(self, waves: list[tuple[float, int]]) -> None:
        """The first wave's measured resets: ``(seconds, envs reset in turn)`` per process that reset some. Only the
        first call counts (the dry run of the envs); later resets do not move the limit."""
        if self.measured_s is None and waves:
            self.measured_s = max(seconds / max(1, n) for seconds, n in waves)

    def what(self, n: int) -> str:
        """What was waited for and why this long, for a timeout message (the option is named by its caller)."""
        each = self.per_env()
        if self.measured_s is None:
            rule = (f"{FIRST_RESET_FACTOR:g} x --step-timeout {self.step_timeout:g} s = {each:g} s each: a first reset "
                    f"builds the env")
            return f"the first reset of {n} env(s) in turn ({rule})"
        rule = (f"{each:g} s each: the larger of --step-timeout {self.step_timeout:g} s and {MEASURED_FACTOR:g} x the "
                f"slowest first reset, {self.measured_s:.3g} s")
        return f"{n} env reset(s) in turn ({rule})"
