"""What a run ranks policies by (``--rank-by``), and the bounds of a per-episode metric that some envs declare.

**Metrics** (:data:`RANK_METRICS`): ``success`` (the success rate: needs the env's success signal),
``return`` (the mean episode return, ``sum_reward``) and ``max_reward`` (the mean over episodes of each
episode's largest step reward: PushT's coverage, LeRobot's ``avg_max_reward``). ``None`` is the default:
success where the env reports a success signal, else the return, and the run says so
(:func:`default_metric_note`).

**Bounds.** An anytime-valid interval of a mean (a race on ``return:best`` or ``max_reward:best``, a
``return:`` stop rule) needs the smallest and largest value one episode can give. Where the env's code
fixes them, :func:`declared_bounds` gives them with where they come from; else the user gives them
(``--return-bounds LO,HI``: the bounds of the metric raced or stopped on). A value outside the bounds
stops the run with an error (the intervals would not be valid), so a wrong bound cannot pass silently.

The table is short on purpose: a bound is declared only where the env's source fixes it.

* ``gym_pusht/PushT-v0`` (and fasteval's bit-identical fast PushT): each step's reward is
  ``clip(coverage / success_threshold, 0, 1)`` (gym-pusht ``envs/pusht.py``), so ``max_reward`` lies in
  [0, 1]; the return lies in [0, steps], with steps the registered ``max_episode_steps=300`` (or
  ``--max-steps``).
* ``CartPole-v1`` / ``CartPole-v0``: a reward of 1 (or 0) per step (gymnasium ``classic_control/cartpole.py``),
  registered with ``max_episode_steps`` 500 / 200: the return lies in [0, steps] and ``max_reward`` in [0, 1].

Pure data, no I/O.
"""

from __future__ import annotations

from typing import Any, Mapping

SUCCESS, RETURN, MAX_REWARD = "success", "return", "max_reward"
RANK_METRICS = (SUCCESS, RETURN, MAX_REWARD)
FIELDS = {SUCCESS: "success", RETURN: "sum_reward", MAX_REWARD: "max_reward"}
"""The episode record's field each metric averages."""
WORDS = {SUCCESS: "success rate", RETURN: "mean return", MAX_REWARD: "mean max reward"}

_FAST_PUSHT = "fasteval.robot.fast_envs.pusht:make_pusht"
_DECLARED: dict[str, dict[str, Any]] = {
    "gym_pusht/PushT-v0": {"step_reward": (0.0, 1.0), "steps": 300,
                           "source": "gym-pusht: reward = clip(coverage / success_threshold, 0, 1) per step"},
    _FAST_PUSHT: {"step_reward": (0.0, 1.0), "steps": None,
                  "source": "gym-pusht: reward = clip(coverage / success_threshold, 0, 1) per step"},
    "CartPole-v1": {"step_reward": (0.0, 1.0), "steps": 500, "source": "gymnasium CartPole: reward 1 (or 0) per step"},
    "CartPole-v0": {"step_reward": (0.0, 1.0), "steps": 200, "source": "gymnasium CartPole: reward 1 (or 0) per step"},
}


def check_rank_by(value: Any) -> str | None:
    """``value`` as a metric name, or a ValueError that lists them."""
    if value is None or value in RANK_METRICS:
        return value
    raise ValueError(f"--rank-by: expected one of {', '.join(RANK_METRICS)}, got {value!r}.")


def declared_bounds(env: Any, metric: str, max_steps: int | None = None,
                    env_kwargs: Mapping[str, Any] | None = None) -> tuple[tuple[float, float], str] | None:
    """``((LO, HI), source)`` of ``metric`` per episode where ``env`` declares them (see the module docstring),
    else None. A return's bound needs a known step cap: ``max_steps``, else the registered limit (not when
    ``env_kwargs`` sets its own ``max_episode_steps``)."""
    entry = _DECLARED.get(env) if isinstance(env, str) else None
    if entry is None or metric == SUCCESS:
        return None
    lo, hi = entry["step_reward"]
    if metric == MAX_REWARD:
        return (lo, hi), f"declared by the env ({entry['source']}, so max_reward lies in [{lo:g}, {hi:g}])"
    steps, where = max_steps, "--max-steps"
    if steps is None and not (env_kwargs or {}).get("max_episode_steps") and entry["steps"] is not None:
        steps, where = entry["steps"], f"its registered max_episode_steps={entry['steps']}"
    if steps is None:
        return None
    return ((min(0.0, lo * steps), hi * steps),
            f"declared by the env ({entry['source']}, at most {steps} steps: {where}; so the return lies in "
            f"[{min(0.0, lo * steps):g}, {hi * steps:g}])")


def resolve_bounds(metric: str, user_bounds: tuple[float, float] | None, env: Any, max_steps: int | None = None,
                   env_kwargs: Mapping[str, Any] | None = None) -> tuple[tuple[float, float] | None, str | None]:
    """The bounds an interval of ``metric`` uses and where they come from: ``--return-bounds`` when given, else
    the env's declared ones, else ``(None, None)``. Success needs none: ``(None, None)``."""
    if metric == SUCCESS:
        return None, None
    if user_bounds is not None:
        return tuple(user_bounds), "--return-bounds"
    declared = declared_bounds(env, metric, max_steps, env_kwargs)
    return declared if declared is not None else (None, None)


def default_metric_note(has_signal: bool) -> str:
    """Why the default metric is what it is (a run without ``--rank-by``)."""
    return ("ranked by success rate (the env reports a success signal; --rank-by return or max_reward ranks by "
            "those)" if has_signal else
            "ranked by mean return: the env reports no success signal (no info['is_success']), so a success rate "
            "would be 0% for every policy; --rank-by max_reward ranks by the mean max reward")
