"""``fasteval-lerobot-train``: ``lerobot-train`` with its periodic evaluation run by fasteval.

::

    fasteval-lerobot-train --dataset.repo_id=lerobot/pusht --policy.type=act --env.type=pusht \\
        --env_eval_freq=20000 --eval.n_episodes=50 --eval.batch_size=10 ...   # lerobot-train's own arguments

(or ``python -m fasteval.integrations.lerobot_train ...``). It is LeRobot's ``lerobot-train``, unchanged but for
two names in its module, replaced before it starts (:func:`install`):

* ``lerobot.scripts.lerobot_train.eval_policy_all``, the function every evaluation step calls (LeRobot 0.6's
  ``lerobot_eval.eval_policy_all``, with its signature): here :func:`eval_policy_all`, which evaluates the
  policy being trained through fasteval and returns LeRobot's own dictionary (``per_task``, ``per_group``,
  ``overall`` with ``avg_sum_reward``, ``avg_max_reward``, ``pc_success``, ``n_episodes``, ``eval_s``,
  ``eval_ep_s``, ``video_paths``), computed as LeRobot computes it from the per-episode lists, so
  ``lerobot-train`` logs and sends to W&B what it always does;
* ``lerobot.scripts.lerobot_train._make_eval_envs``, the context manager that builds LeRobot's vector envs
  for each evaluation and closes them after: here :func:`make_eval_envs`, which builds nothing and hands the
  training config to :func:`eval_policy_all`. fasteval builds its envs once, on the first evaluation, and
  reuses them (and its buffers) at every later one.

This is the least fragile patch point LeRobot has: one public function and one context manager, looked up by
name at every evaluation, whose signatures are checked when the wrapper starts (a LeRobot whose script has
neither name, or a different ``eval_policy_all`` signature, stops the wrapper at once with a message, before
any training). Nothing of LeRobot's training loop is copied. ``lerobot-train`` itself, run without the wrapper,
is untouched.

**Numbers.** Each evaluation runs ``--eval.n_episodes`` episodes of every task of ``--env`` (one engine per task),
episode ``i`` reset with seed ``--seed + i`` (LeRobot's ``start_seed``), with the env LeRobot's factory builds
for the same config (``fasteval.robot.lerobot.envs:make_env``), the live policy and the four processors
``lerobot-train`` built (:func:`fasteval.robot.lerobot.loader.wrap_lerobot_policy`): for a deterministic policy
(ACT) these are ``lerobot-eval``'s numbers for the checkpoint of that step, seed for seed
(``tests/lerobot/test_lerobot_train.py``). A stochastic policy (Diffusion) draws per-episode noise
(batch-invariant), where LeRobot's evaluation inside training draws from the training process's global RNG.

**Files.** The videos go where ``lerobot-train`` puts them (the first ``max_episodes_rendered`` episodes,
``<output_dir>/eval/videos_step_<step>/<group>_<task_id>/eval_episode_<i>.mp4``), and each evaluation also
writes fasteval's record of it beside them: ``<output_dir>/eval/eval_info_step_<step>.json`` (one document per
task, with every episode's seed, return and length, in a suite).

``--eval.batch_size`` is fasteval's number of env slots (0: LeRobot's automatic rule), ``--eval.use_async_envs``
picks fasteval's worker pool.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import json
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from fasteval.types.errors import UserInputError

PATCH_POINTS = ("eval_policy_all", "_make_eval_envs")
"""The two names of ``lerobot.scripts.lerobot_train`` the wrapper replaces (module docstring)."""
EVAL_ARGS = ("envs", "policy", "env_preprocessor", "env_postprocessor", "preprocessor", "postprocessor", "n_episodes",
             "max_episodes_rendered", "videos_dir", "start_seed")
"""The arguments of LeRobot's ``eval_policy_all`` that ``lerobot-train`` passes (checked at start)."""
ENV_REF = "fasteval.robot.lerobot.envs:make_env"


@dataclasses.dataclass
class TrainEnvs:
    """What :func:`make_eval_envs` yields in place of LeRobot's vector envs: the training config."""

    cfg: Any


@contextlib.contextmanager
def make_eval_envs(cfg: Any) -> Iterator[TrainEnvs]:
    """``lerobot_train._make_eval_envs`` under the wrapper: no env is built here (fasteval's are built once)."""
    yield TrainEnvs(cfg)


def install(module: Any = None) -> Any:
    """Replace the patch points of ``lerobot.scripts.lerobot_train`` (or ``module``); returns the module.

    Raises :class:`UserInputError` if the module lacks them or ``eval_policy_all`` takes other arguments."""
    if module is None:
        from lerobot.scripts import lerobot_train as module
    version = _lerobot_version()
    missing = [name for name in PATCH_POINTS if not hasattr(module, name)]
    if missing:
        raise UserInputError(f"fasteval-lerobot-train: LeRobot {version}'s lerobot_train has no {', '.join(missing)}; "
                             f"the wrapper replaces {' and '.join(PATCH_POINTS)} (LeRobot 0.6). Run lerobot-train "
                             f"itself, or a LeRobot the wrapper knows.")
    params = set(inspect.signature(module.eval_policy_all).parameters)
    if getattr(module.eval_policy_all, "__module__", "") != __name__ and not set(EVAL_ARGS) <= params:
        raise UserInputError(f"fasteval-lerobot-train: LeRobot {version}'s eval_policy_all takes {sorted(params)}; the "
                             f"wrapper expects {list(EVAL_ARGS)} (LeRobot 0.6).")
    module.eval_policy_all = eval_policy_all
    module._make_eval_envs = make_eval_envs
    return module


def _lerobot_version() -> str:
    try:
        from importlib.metadata import version

        return version("lerobot")
    except Exception:
        return "(unknown version)"


# -- one engine per task, built on the first evaluation -----------------------------------------------
_SESSIONS: dict[tuple, list[tuple[str, int, Any]]] = {}
"""Per (policy, processors, config): ``[(task_group, task_id, Evaluator)]``, kept for the whole training run."""


DERIVED_FIELDS = ("features", "features_map")
"""Fields of LeRobot's env configs that ``__post_init__`` derives from the others (``obs_type``, the image size,
``camera_name_mapping``): the rebuilt config derives them again, so they are not options (and their
``PolicyFeature`` values are not JSON)."""


def env_options(env_cfg: Any) -> dict[str, Any]:
    """The fields of LeRobot's env config that differ from its defaults (``episode_length=20``...): the options
    ``fasteval.robot.lerobot.envs:make_env`` rebuilds the same config from. Plain JSON values only: they go into
    the run's record (``eval_info_step_<step>.json``).

    The derived fields (:data:`DERIVED_FIELDS`) are left out; where they differ from what the other options
    derive (set by hand), or another option is not JSON, raises :class:`UserInputError`."""
    default = type(env_cfg)()
    out = {}
    for f in dataclasses.fields(env_cfg):
        if not f.init or f.name == "task" or f.name in DERIVED_FIELDS:
            continue
        value = getattr(env_cfg, f.name)
        if value != getattr(default, f.name):
            out[f.name] = value
    try:
        out = json.loads(json.dumps(out))  # tuples become lists, as the record stores them
    except (TypeError, ValueError) as exc:
        raise UserInputError(f"fasteval-lerobot-train: --env.type={env_cfg.type}: the env settings {sorted(out)} "
                             f"must be plain values (numbers, strings, lists, dicts) to be recorded: {exc}. Run "
                             f"lerobot-train itself for this env config.") from None
    _check_derived(env_cfg, out)
    return out


def _check_derived(env_cfg: Any, options: dict[str, Any]) -> None:
    """Raise :class:`UserInputError` where ``env_cfg``'s derived fields are not what ``options`` derive."""
    task = {"task": env_cfg.task} if env_cfg.task is not None else {}
    rebuilt = type(env_cfg)(**task, **options)
    differ = [name for name in DERIVED_FIELDS if getattr(rebuilt, name, None) != getattr(env_cfg, name, None)]
    if differ:
        raise UserInputError(f"fasteval-lerobot-train: --env.type={env_cfg.type}: {' and '.join(differ)} differ from "
                             f"what LeRobot derives from the other env settings (set by hand?); fasteval rebuilds the "
                             f"eval env from those settings. Leave {' and '.join(differ)} unset, or run lerobot-train "
                             f"itself.")


def _tasks(env_cfg: Any) -> list[tuple[str, int, dict[str, Any]]]:
    """``[(task_group, task_id, make_env kwargs)]`` of LeRobot's env config, in LeRobot's order."""
    from fasteval.robot.lerobot.envs import suite_tasks

    options = env_options(env_cfg)
    task = env_cfg.task  # EnvConfig's field: every env type has one (or None)
    suite = suite_tasks(env_cfg.type, task, **options)
    if suite is not None:
        return [(group, task_id, kwargs) for group, task_id, kwargs, _name in suite]
    from fasteval.robot.env_names import task_label

    kwargs = {"type": env_cfg.type, **options}
    if task is not None and task != type(env_cfg)().task:
        kwargs["task"] = task
    group, task_id, _name = task_label(ENV_REF, kwargs)  # LeRobot's labels: libero_spatial 3, push-v3 0, pusht 0
    return [(group, task_id, kwargs)]


def _session(cfg: Any, policy: Any, processors: tuple[Any, Any, Any, Any], n_episodes: int,
             max_rendered: int) -> list[tuple[str, int, Any]]:
    key = (id(cfg), id(policy), *map(id, processors), n_episodes, max_rendered)
    if key not in _SESSIONS:
        from fasteval.doors.lerobot_options import auto_batch_size
        from fasteval.robot.lerobot.loader import wrap_lerobot_policy
        from fasteval.robot.lerobot.policy import _Pipelines
        from fasteval.run.api import Evaluator

        device = next(policy.parameters()).device
        pre, post, env_pre, env_post = processors
        batch = int(cfg.eval.batch_size) or auto_batch_size(n_episodes)
        n_slots = min(batch, n_episodes)
        engines = []
        for group, task_id, kwargs in _tasks(cfg.env):
            pipelines = _Pipelines(lambda _device: (pre, post, env_pre, env_post), device)
            wrapped = wrap_lerobot_policy(policy, pipelines, n_slots)
            engines.append((group, task_id, Evaluator(
                env=ENV_REF, env_kwargs=kwargs, policy=wrapped, n_episodes=n_episodes, batch_size=n_slots,
                seed=int(cfg.seed or 0), device=str(device), max_episodes_rendered=max_rendered,
                video_layout="lerobot", vectorization="async" if cfg.eval.use_async_envs else "sync")))
        _SESSIONS[key] = engines
    return _SESSIONS[key]


def eval_policy_all(envs: Any, policy: Any, env_preprocessor: Any, env_postprocessor: Any, preprocessor: Any,
                    postprocessor: Any, n_episodes: int, *, max_episodes_rendered: int = 0,
                    videos_dir: Path | None = None, start_seed: int | None = None, max_parallel_tasks: int = 1,
                    **unused: Any) -> dict:
    """LeRobot's ``eval_policy_all``, evaluated by fasteval (module docstring). ``envs`` is what
    :func:`make_eval_envs` yielded; the tasks run one after the other (``max_parallel_tasks`` is not used)."""
    if not isinstance(envs, TrainEnvs):
        raise UserInputError("fasteval's eval_policy_all builds its own envs from the training config: it runs inside "
                             "fasteval-lerobot-train (whose _make_eval_envs hands it the config), not on LeRobot's envs.")
    start = time.time()
    cfg = envs.cfg
    engines = _session(cfg, policy, (preprocessor, postprocessor, env_preprocessor, env_postprocessor),
                       int(n_episodes), int(max_episodes_rendered))
    seed = int(start_seed) if start_seed is not None else int(cfg.seed or 0)
    per_task, results = [], []
    for group, task_id, evaluator in engines:
        folder = Path(videos_dir) / f"{group}_{task_id}" if videos_dir is not None else None
        _videos_into(evaluator, folder)
        result = evaluator.evaluate(n_episodes=int(n_episodes), seed=seed)
        results.append(result)
        metrics = {"sum_rewards": [float(x) for x in result.column("sum_reward")],
                   "max_rewards": [float(x) for x in result.column("max_reward")],
                   "successes": [bool(x) for x in result.column("success")],
                   "video_paths": [str(p) for p in (result.video_paths or [])], "predicted_video_paths": []}
        per_task.append({"task_group": group, "task_id": task_id, "metrics": metrics})
    if videos_dir is not None:
        _write_records(Path(videos_dir), engines, results)
    return lerobot_summary(per_task, time.time() - start)


def _videos_into(evaluator: Any, folder: Path | None) -> None:
    """Point the next run's videos at ``folder`` (LeRobot's per-step video folder): the one field of the spec that
    changes between evaluations (where files go; nothing evaluated changes)."""
    if folder is None:
        return
    folder.mkdir(parents=True, exist_ok=True)
    evaluator.spec = evaluator.spec.replace(videos_dir=str(folder))
    evaluator.engine.spec = evaluator.engine.spec.replace(videos_dir=str(folder))


def _write_records(videos_dir: Path, engines: list, results: list) -> None:
    """fasteval's record of this evaluation beside LeRobot's videos: ``eval/eval_info_<step>.json``."""
    step = videos_dir.name.removeprefix("videos_")
    path = videos_dir.parent / f"eval_info_{step}.json"
    if len(results) == 1:
        results[0].to_json(path)
        return
    docs = {f"{group}_{task_id}": r.to_eval_info() for (group, task_id, _e), r in zip(engines, results)}
    path.write_text(json.dumps(docs, default=str))


def lerobot_summary(per_task: list[dict], eval_s: float) -> dict:
    """LeRobot's ``eval_policy_all`` dictionary from the per-task metrics, aggregated as LeRobot aggregates them
    (``nanmean`` over episodes; ``pc_success`` in percent, NaN without episodes)."""
    def mean(xs: list) -> float:
        return float(np.nanmean(np.array(xs, dtype=float))) if xs else float("nan")

    groups: dict[str, dict[str, list]] = {}
    every: dict[str, list] = {"sum_rewards": [], "max_rewards": [], "successes": [], "video_paths": []}
    for task in per_task:
        acc = groups.setdefault(task["task_group"], {k: [] for k in every})
        for key in every:
            acc[key].extend(task["metrics"][key])
            every[key].extend(task["metrics"][key])

    def aggregate(acc: dict[str, list]) -> dict[str, Any]:
        return {"avg_sum_reward": mean(acc["sum_rewards"]), "avg_max_reward": mean(acc["max_rewards"]),
                "pc_success": mean(acc["successes"]) * 100 if acc["successes"] else float("nan"),
                "n_episodes": len(acc["sum_rewards"]), "video_paths": list(acc["video_paths"]),
                "predicted_video_paths": []}

    overall = aggregate(every)
    overall.update(eval_s=eval_s, eval_ep_s=eval_s / max(1, len(every["sum_rewards"])))
    return {"per_task": per_task, "per_group": {g: aggregate(acc) for g, acc in groups.items()}, "overall": overall}


def close() -> None:
    """Close every engine built so far (at the end of training)."""
    for engines in _SESSIONS.values():
        for _g, _t, evaluator in engines:
            evaluator.close()
    _SESSIONS.clear()


def main(argv: list[str] | None = None) -> None:
    """``fasteval-lerobot-train ARGS...``: ``lerobot-train ARGS...`` with fasteval's evaluation (module docstring)."""
    try:
        module = install()
    except ImportError as exc:
        sys.exit(f"fasteval-lerobot-train needs LeRobot with its training extra (pip install 'lerobot[training]'), "
                 f"Python >= 3.12: {exc}")
    except UserInputError as exc:
        sys.exit(f"Error: {exc}")
    if argv is not None:
        sys.argv = [sys.argv[0], *argv]
    try:
        module.main()
    finally:
        close()


if __name__ == "__main__":
    main()
