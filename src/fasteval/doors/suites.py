"""Multi-task suites: ``{task_group: {task_id: env}}`` evaluated task by task, one engine per task.

A suite maps task groups to tasks::

    suite = {
        "MT10": {0: Task("fasteval.robot.metaworld:make_metaworld_env", {"task": "reach-v3"}, name="reach-v3"),
                 1: Task("fasteval.robot.metaworld:make_metaworld_env", {"task": "push-v3"}, name="push-v3")},
        "toy": {0: "CartPole-v1"},
    }
    result = run_suite(suite, policy="path/to/checkpoint", n_episodes=50, seed=1000, concurrency=2)

A task is a gymnasium id or ``module:callable`` string, an :class:`~fasteval.core.envs.EnvFactory`,
a :class:`Task` (env + kwargs + display name + step cap), or a zero-argument callable returning an
env (in-process only: async workers started with ``spawn`` cannot see it; use a ``module:callable``
string there).

* **Seeds**: every task has its own seed ledger: episode ``i`` of *every* task uses ``seed + i``,
  whatever the batch size, the concurrency or the order the tasks run in.
* **Results**: one :class:`~fasteval.types.results.EvalResult` whose per-episode records carry
  ``task_group``, ``task_id`` and ``task``, so ``per_task()``, ``per_group()`` and ``overall()``
  give the classic layout. ``meta["tasks"]`` lists the tasks; ``video_paths`` holds every task's
  videos (``<videos_dir>/<group>_<task_id>/<task>/ep<episode>_seed<seed>_<outcome>.mp4``); with
  ``return_episode_data=True``, ``result.episode_data`` maps ``"<group>/<task_id>"`` to each
  task's TensorDict.
* **Videos**: ``max_episodes_rendered=K`` with ``video_select="first"`` renders the first K episodes
  of the suite, task by task (:func:`video_budgets`); ``per-task`` the first K of every task;
  ``failures`` / ``successes`` choose within each task (see :mod:`fasteval.robot.recording`).
* **From the command line**: ``--env.type=metaworld --env.task=push-v3,reach-v3`` (an env kwarg
  ``task`` or ``env_name`` that is a list) is a suite (:func:`suite_from_spec`); each task is a
  durable run in ``OUTPUT_DIR/tasks/<group>_<task_id>/`` (:func:`run_suite_durable`).
* **Concurrency**: ``concurrency=N`` runs up to N tasks at once, each with its own engine in its
  own thread (env stepping in C, async env workers and torch ops release the GIL). Concurrent
  tasks never share a policy object: a stateful policy shared by two engines would mix their
  per-slot state (the classic bug where success silently drops to 0%). Each task gets
  ``policy_factory()`` if given, else its own load of a policy reference, else a
  ``copy.deepcopy`` of a live policy object. Sequential runs (``concurrency=1``) reuse a live
  policy object (the engine resets it per slot at every episode start).
  torch's global RNG is process-wide: a policy that *draws random numbers* gets the same numbers
  as a sequential run only with ``concurrency=1``; deterministic policies give identical results
  at any concurrency.

MetaWorld (``./scripts/install.sh metaworld``): :func:`metaworld_suite` builds MT10 / MT50 (or any
list of tasks) as a suite of :func:`fasteval.robot.metaworld.make_metaworld_env` tasks.
"""

from __future__ import annotations

import copy
import itertools
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from time import perf_counter
from typing import Any, Callable, Mapping, Sequence

import gymnasium as gym

from fasteval.core.envs import EnvFactory
from fasteval.types.errors import UserInputError
from fasteval.robot.lerobot.envs import ENV_REF as LEROBOT_ENV_REF
from fasteval.robot.metaworld import (  # noqa: F401  (re-exported: "fasteval.doors.suites:make_metaworld_env" keeps working)
    METAWORLD_BENCHMARKS, METAWORLD_ENV_REF, METAWORLD_ENV_REFS, MetaWorldEnv, import_metaworld, make_metaworld_env,
    metaworld_task_description)
from fasteval.types.eval_result import task_folder
from fasteval.types.results import EvalResult
from fasteval.types.spec import EvalSpec


@dataclass(frozen=True)
class Task:
    """One task of a suite: an env (id, ``module:callable`` or a callable), its kwargs, a display name."""

    env: Any
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    name: str | None = None
    """Shown as ``task`` in the records (default: the env id)."""
    max_steps: int | None = None
    """Step cap for this task (default: the suite's ``max_steps``)."""


# -- callables as env references ----------------------------------------------------------------
_CALLABLES: dict[str, Callable[..., gym.Env]] = {}
_LOCK = threading.Lock()
_COUNTER = itertools.count()


def registered_env(_key: str, **kwargs: Any) -> gym.Env:
    """``module:callable`` target for env callables handed to :func:`run_suite` (see the module docstring)."""
    fn = _CALLABLES.get(_key)
    if fn is None:
        raise UserInputError(
            f"suite env {_key!r} was given as a Python callable, which exists only in the process that called "
            f"run_suite (async workers started with 'spawn' cannot see it). Give the task as a 'module:callable' string."
        )
    return fn(**kwargs)


def _register(fn: Callable[..., gym.Env]) -> str:
    with _LOCK:
        for key, known in _CALLABLES.items():
            if known is fn:
                return key
        key = f"{getattr(fn, '__qualname__', type(fn).__name__)}#{next(_COUNTER)}"
        _CALLABLES[key] = fn
        return key


def as_task(entry: Any) -> Task:
    """Normalize one suite entry (str, EnvFactory, Task, callable) into a :class:`Task`."""
    if isinstance(entry, Task):
        task = entry
    elif isinstance(entry, str):
        task = Task(entry)
    elif isinstance(entry, EnvFactory):
        task = Task(entry.env, dict(entry.kwargs))
    elif callable(entry):
        task = Task(entry)
    else:
        raise UserInputError(f"suite task {entry!r}: expected an env id or module:callable string, an EnvFactory, "
                             f"a fasteval.doors.suites.Task, or a callable returning a gymnasium.Env.")
    if callable(task.env) and not isinstance(task.env, str):
        name = task.name or getattr(task.env, "__name__", type(task.env).__name__)
        kwargs = {"_key": _register(task.env), **dict(task.env_kwargs)}
        return Task(f"{__name__}:registered_env", kwargs, name, task.max_steps)
    if not isinstance(task.env, str) or not task.env:
        raise UserInputError(f"suite task {entry!r}: env must be an env id, a module:callable string or a callable.")
    return task


def flatten_suite(suite: Mapping[str, Mapping[Any, Any]]) -> list[tuple[str, Any, Task]]:
    """``[(group, task_id, Task), ...]`` in the suite's order. Raises on an empty or malformed suite."""
    if not isinstance(suite, Mapping) or not suite:
        raise UserInputError(f"suite: expected a non-empty mapping {{task_group: {{task_id: env}}}}, got {suite!r}.")
    out = []
    for group, tasks in suite.items():
        if not isinstance(tasks, Mapping) or not tasks:
            raise UserInputError(f"suite group {group!r}: expected a non-empty mapping {{task_id: env}}, got {tasks!r}.")
        for task_id, entry in tasks.items():
            out.append((str(group), task_id, as_task(entry)))
    return out


# -- running -------------------------------------------------------------------------------------
def _policy_for(policy: Any, policy_factory: Callable[[], Any] | None, concurrent: bool) -> Any:
    if policy_factory is not None:
        return policy_factory()
    if isinstance(policy, str) or not concurrent:
        return policy
    try:
        return copy.deepcopy(policy)
    except Exception as exc:
        raise UserInputError(
            f"concurrent suite tasks need their own policy instances, and the policy {type(policy).__name__} "
            f"could not be deep-copied ({type(exc).__name__}: {exc}). Pass policy_factory=<callable returning a "
            f"fresh policy>, a policy reference string, or concurrency=1."
        ) from None


def task_fields(task: Task, video_budget: int, videos_dir: Path) -> dict[str, Any]:
    """The :class:`~fasteval.types.spec.EvalSpec` fields one task of a suite sets: its env and kwargs, its step
    cap (when it has one), its share of the videos and its video folder. Both suite runners use it."""
    fields: dict[str, Any] = {"env": task.env, "env_kwargs": dict(task.env_kwargs),
                              "max_episodes_rendered": video_budget, "videos_dir": str(videos_dir)}
    if task.max_steps is not None:
        fields["max_steps"] = task.max_steps
    return fields


def run_suite(
    suite: Mapping[str, Mapping[Any, Any]],
    policy: Any = "zero",
    *,
    policy_factory: Callable[[], Any] | None = None,
    n_episodes: int = 10,
    seed: int = 0,
    concurrency: int = 1,
    videos_dir: str | None = None,
    **spec_fields: Any,
) -> EvalResult:
    """Evaluate ``policy`` on every task of ``suite``; ``n_episodes`` per task, seeds ``seed + i``.

    ``spec_fields`` are :class:`~fasteval.types.spec.EvalSpec` fields applied to every task (``batch_size``,
    ``vectorization``, ``observation_format``, ``max_episodes_rendered``, ...). See the module docstring.
    """
    if not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1:
        raise UserInputError(f"concurrency: expected an integer >= 1, got {concurrency!r}.")
    for name in ("env", "env_kwargs", "policy", "n_episodes", "seed", "videos_dir"):
        if name in spec_fields:
            raise UserInputError(f"run_suite: {name!r} is set per task or by run_suite's own argument; do not pass it in spec_fields.")
    tasks = flatten_suite(suite)
    concurrent = concurrency > 1 and len(tasks) > 1
    root = videos_dir or "videos"
    specs = []
    budgets = video_budgets(spec_fields.get("max_episodes_rendered", 0), spec_fields.get("video_select", "first"),
                            [n_episodes] * len(tasks))
    for (group, task_id, task), budget in zip(tasks, budgets):
        fields = {**spec_fields, **task_fields(task, budget, Path(root) / task_folder(group, task_id))}
        specs.append(EvalSpec(policy="zero", n_episodes=n_episodes, seed=seed, **fields))

    def run_one(index: int) -> EvalResult:
        from fasteval.run.api import policy_eval_mode
        from fasteval.run.engine import Engine

        group, task_id, task = tasks[index]
        spec = specs[index].replace(policy=_policy_for(policy, policy_factory, concurrent))
        with Engine(spec) as engine, policy_eval_mode(engine.policy):
            return engine.run(task=(group, task_id, task.name or task.env))

    start = perf_counter()
    if concurrent:
        with ThreadPoolExecutor(max_workers=min(concurrency, len(tasks)), thread_name_prefix="fasteval-suite") as pool:
            results = list(pool.map(run_one, range(len(tasks))))
    else:
        results = [run_one(i) for i in range(len(tasks))]
    return _merge(tasks, results, perf_counter() - start, concurrency)


def video_budgets(k: int, select: str, n_episodes: Sequence[int]) -> list[int]:
    """Videos per task for ``k`` videos with ``video_select=select`` (tasks in suite order).

    ``first``: the first K episodes of the whole suite, task by task (task ``j`` gets what the tasks
    before it left of K); ``per-task``, ``failures``, ``successes``: K for every task (the matching
    episodes are chosen within each task, see :mod:`fasteval.robot.recording`).
    """
    if select != "first":
        return [k] * len(n_episodes)
    out, left = [], k
    for n in n_episodes:
        out.append(min(left, n))
        left -= out[-1]
    return out


def _merge(tasks: list[tuple[str, Any, Task]], results: list[EvalResult], eval_s: float, concurrency: int,
           env: str | None = None) -> EvalResult:
    """The suite's record: its tasks' records, merged by :func:`fasteval.run.record.merge_records`."""
    from fasteval.run.record import merge_records

    labels = [{"task_group": group, "task_id": task_id, "task": task.name or task.env, "env": task.env,
               "env_kwargs": {k: v for k, v in dict(task.env_kwargs).items() if k != "_key"},
               **({"protocol": result.meta["protocol"]} if "protocol" in result.meta else {})}  # LIBERO's, per task
              for (group, task_id, task), result in zip(tasks, results)]
    return merge_records(labels, results, eval_s, concurrency, env=env)


# -- several tasks from one command line --------------------------------------------------------------
def suite_group(env: str) -> str:
    """The task group of a command-line suite: ``metaworld`` for MetaWorld envs, else the env id."""
    if env in (*METAWORLD_ENV_REFS, "Meta-World/MT1"):
        return "metaworld"
    return env


def suite_from_spec(spec: EvalSpec) -> dict[str, dict[int, Task]] | None:
    """The suite a spec stands for when an env kwarg that names the task (``task``, ``env_name``) is a
    **list** of task names (``--env.type=metaworld --env.task=push-v3,reach-v3``, or the same list
    in a config file); ``None`` for a one-task spec. Task ``i`` is the ``i``-th name, labelled with it.
    LeRobot env types (:data:`LEROBOT_ENV_REF`) expand as LeRobot's factory does, with its groups and task
    ids (:func:`fasteval.robot.lerobot.envs.suite_tasks`: ``--env.task=easy``, ``libero_spatial``, ``a,b``)."""
    from fasteval.robot.recording import TASK_KWARGS

    if spec.env == LEROBOT_ENV_REF:  # LeRobot's env types: LeRobot's own groups and task ids
        from fasteval.robot.lerobot.envs import suite_tasks

        kwargs = dict(spec.env_kwargs)
        if not isinstance(kwargs.get("type"), str):
            raise UserInputError(f"--env {LEROBOT_ENV_REF} builds one of LeRobot's env types: give it with --env-kwarg "
                                 f"type=<type> (pusht, libero, metaworld...), or use --env.type=<type>.")
        tasks = suite_tasks(**kwargs)
        if tasks is None:
            return None
        suite: dict[str, dict[int, Task]] = {}
        for group, task_id, kwargs, name in tasks:
            suite.setdefault(group, {})[task_id] = Task(spec.env, kwargs, name=name)
        return suite
    for key in TASK_KWARGS:
        names = spec.env_kwargs.get(key)
        if not isinstance(names, (list, tuple)):
            continue
        if not names or not all(isinstance(n, str) and n for n in names) or len(set(names)) != len(names):
            raise UserInputError(f"env kwarg {key}={list(names)!r}: expected a non-empty list of distinct task names.")
        return {suite_group(spec.env): {i: Task(spec.env, {**spec.env_kwargs, key: name}, name=name)
                                        for i, name in enumerate(names)}}
    return None


def suite_resume(out_dir: str | Path) -> str:
    """How a suite that stopped is finished: the same command into the same folder (each task's run resumes)."""
    return f"the same command with --output-dir {out_dir}"


@dataclass(frozen=True)
class SuiteOutcome:
    """A command-line suite: the merged record (its ``meta["status"]`` is the suite's end state: the first
    task's that did not complete), and each task's run folder."""

    result: EvalResult
    folders: list[Path]
    error: BaseException | None = None
    signal_number: int | None = None
    resumed_episodes: int = 0
    """Episodes recorded by earlier segments (a suite is not resumed as one run: 0), as a durable run's outcome says."""
    wrote: tuple[str, ...] = ("eval_info.json",)
    """The suite's own end files that were written (its merged ``eval_info.json``)."""
    logged: int | None = None
    """None: each task's run folder logs its own records (a durable run's outcome counts them)."""

    @property
    def status(self) -> str:
        return self.result.meta["status"]


def run_suite_durable(spec: EvalSpec, suite: Mapping[str, Mapping[Any, Any]], out_dir: str | Path,
                      announce: Callable[[str], None] = print,
                      progress: Callable[[Any], Any] | None = None) -> SuiteOutcome:
    """Run ``suite`` with ``spec``'s settings as durable runs, one per task, one after the other.

    Task ``<group>_<task_id>`` runs into ``OUTPUT_DIR/tasks/<group>_<task_id>/`` (its own manifest,
    ``episodes.jsonl`` and ``eval_info.json``), with ``spec``'s seeds and episode count; videos go to
    ``<videos_dir>/<group>_<task_id>/<task>/``. ``OUTPUT_DIR/eval_info.json`` holds the merged result
    (``per_task``, ``per_group``, ``overall``). A task that stops (an error, a signal) stops the suite;
    the merged file then holds the tasks run so far. Running the same suite into the same folder
    again resumes it: a task folder that holds a run is resumed (its missing episodes run, a
    complete one is reused), and settings that differ from its manifest are refused.
    Raises :class:`UserInputError` for bad input.
    """
    from fasteval.run.durable import STATUS_COMPLETE, run_durable
    from fasteval.run.engine import Engine
    from fasteval.run.rundir import RunDirectory

    out_dir = Path(out_dir)
    tasks = flatten_suite(suite)
    budgets = video_budgets(spec.max_episodes_rendered, spec.video_select, [spec.n_episodes] * len(tasks))
    videos_root = Path(spec.videos_dir or out_dir / "videos")
    results, folders, error, signal_number = [], [], None, None
    start = perf_counter()
    for (group, task_id, task), budget in zip(tasks, budgets):
        label = task_folder(group, task_id)
        task_spec = spec.replace(**task_fields(task, budget, videos_root / label))
        folder = out_dir / "tasks" / label
        run_dir = RunDirectory(folder)
        run_dir.resume_hint = suite_resume(out_dir)  # a suite resumes each task's folder
        resume = run_dir.has_manifest()  # the same command again: finish (or reuse) the task's run
        announce(f"task {group}/{task_id} ({task.name or task.env}) -> {folder}" + (" (resuming)" if resume else ""))
        with Engine(task_spec) as engine:
            if budget:
                from fasteval.robot.recording import check_renderable

                check_renderable(engine)
            watcher = progress(engine) if progress is not None else None  # the CLI's bar or lines, one per task
            try:
                outcome = run_durable(engine, run_dir, resume=resume, announce=announce,
                                      task=(group, task_id, task.name or task.env),
                                      **({"on_finished": watcher} if watcher is not None else {}))
            finally:
                if watcher is not None:
                    watcher.close()
        results.append(outcome.result)
        folders.append(folder)
        if outcome.status != STATUS_COMPLETE:
            error, signal_number = outcome.error, outcome.signal_number
            break
    merged = _merge(tasks[: len(results)], results, perf_counter() - start, 1,
                    env=", ".join(f"{group}/{task.name or task.env}" for group, _, task in tasks))
    wrote: tuple[str, ...] = ("eval_info.json",)
    try:
        merged.to_json(out_dir / "eval_info.json")
    except OSError as exc:  # a full disk: the tasks' folders hold their records; say only what was written
        from fasteval.run.record_file import write_error

        error, wrote = error or write_error(out_dir / "eval_info.json", exc, out_dir,
                                              f"run {suite_resume(out_dir)}"), ()
    return SuiteOutcome(merged, folders, error, signal_number, wrote)


# -- MetaWorld suites -------------------------------------------------------------------------------
def metaworld_suite(tasks: str | Sequence[str] = "MT10", group: str | None = None, **env_kwargs: Any) -> dict[str, dict[int, Task]]:
    """A MetaWorld suite: ``"MT10"`` / ``"MT25"`` / ``"MT50"`` (group named after it) or a list of task names
    (group ``"metaworld"`` unless ``group`` is given); task ids are positions in the list.
    ``env_kwargs`` go to every :class:`MetaWorldEnv` (``render_mode``, ``camera_name`` ...)."""
    env_dict = import_metaworld()
    if isinstance(tasks, str):
        if tasks not in METAWORLD_BENCHMARKS:
            raise UserInputError(f"metaworld_suite: {tasks!r} is not one of {METAWORLD_BENCHMARKS}; pass a benchmark "
                                 f"name or a list of task names.")
        names = list(getattr(env_dict, f"{tasks}_V3"))
        group = group or tasks
    else:
        names = list(tasks)
        unknown = [n for n in names if n not in env_dict.ALL_V3_ENVIRONMENTS]
        if not names or unknown:
            raise UserInputError(f"metaworld_suite: unknown tasks {unknown or names}; expected names like 'reach-v3'.")
        group = group or "metaworld"
    return {group: {i: Task(METAWORLD_ENV_REF, {"task": name, **env_kwargs}, name=name)
                    for i, name in enumerate(names)}}
