"""``--env.type`` / ``--env.task`` / ``--env.<field>``: LeRobot's env types as fasteval envs (docs/lerobot.md).

* :data:`ENV_TYPES`: fasteval's table (``pusht``, ``aloha``, ``metaworld`` without LeRobot, and three of
  fasteval's own), each a gymnasium id plus LeRobot's env kwargs and step limit;
* :func:`lerobot_env_type`: every other type LeRobot registers, built by LeRobot's own env config and
  factory (:mod:`fasteval.robot.lerobot.envs`), each ``--env.<field>`` given to that config;
* :func:`resolve_env_type`: ``(type, task)`` -> ``(env id, env kwargs, entry)``;
* :func:`env_field_args`: the native options of the ``--env.<field>`` options, once the type is known.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Mapping

from fasteval.doors.lerobot_options import TABLE_TYPE_NO_EFFECT
from fasteval.robot.fast_envs import pusht_env_id

ENV_KWARG_FIELDS = ("obs_type", "render_mode", "visualization_width", "visualization_height")
"""LeRobot env fields fasteval's table passes to the env as keyword arguments (``--env.obs_type=pixels``)."""
STEP_LIMIT_FIELD = "episode_length"
"""The LeRobot env field of the step limit: ``--max-steps`` for the table's types."""


@dataclass(frozen=True)
class EnvType:
    """One ``--env.type``: how ``--env.task`` becomes a gymnasium id and env kwargs."""

    id: str
    """Gymnasium id; ``{task}`` is replaced by the task."""
    tasks: tuple[str, ...] = ()
    """Allowed tasks; empty: any."""
    default_task: str | None = None
    """Task when ``--env.task`` is not given; ``None``: ``--env.task`` is required."""
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    """Env kwargs, as LeRobot passes them (a later ``--env-kwarg`` / ``--env.<field>`` wins)."""
    task_kwarg: str | None = None
    """Env kwarg that receives the task (Meta-World's ``env_name``) instead of ``{task}`` in the id."""
    max_steps: int | None = None
    """LeRobot's default ``episode_length`` for this type (``--env.episode_length`` wins)."""
    lerobot_observations: bool = False
    """The policy receives LeRobot observation keys (``--obs-format lerobot``)."""
    strip_prefix: str = ""
    """A prefix LeRobot puts on task names, removed (``metaworld-push-v3`` -> ``push-v3``)."""
    example_task: str = ""
    """Shown in the error when a required task is missing."""
    choose_id: Callable[[str], str] | None = None
    """``task -> env id`` that replaces ``id``: picks fasteval's faster, bit-identical env where the
    installed package is a version its identity test checked (``pusht``), else the original id;
    ``--no-fast-env`` keeps the original id."""
    lerobot_config: bool = False
    """Built by LeRobot's env config and factory: every ``--env.<field>`` goes to that config."""
    lerobot_fields: tuple[str, ...] = ()
    """The fields of LeRobot's config for this type (table types: what ``--env.<field>`` may name)."""

    @property
    def renders(self) -> bool:
        """Its envs render ``rgb_array`` frames: LeRobot's types (``lerobot-eval`` renders every one), and the
        table's types made with ``render_mode="rgb_array"``. LeRobot's default 10 videos apply to these."""
        return self.lerobot_config or self.kwargs.get("render_mode") == "rgb_array"


ENV_TYPES: dict[str, EnvType] = {
    "pusht": EnvType(
        id="gym_pusht/{task}", tasks=("PushT-v0",), default_task="PushT-v0", max_steps=300, lerobot_observations=True,
        kwargs={"obs_type": "pixels_agent_pos", "render_mode": "rgb_array",
                "visualization_width": 384, "visualization_height": 384},
        choose_id=pusht_env_id, lerobot_fields=(*ENV_KWARG_FIELDS, STEP_LIMIT_FIELD, *TABLE_TYPE_NO_EFFECT),
    ),
    "aloha": EnvType(
        id="gym_aloha/{task}", tasks=("AlohaInsertion-v0", "AlohaTransferCube-v0"), default_task="AlohaInsertion-v0",
        max_steps=400, lerobot_observations=True, kwargs={"obs_type": "pixels", "render_mode": "rgb_array"},
        lerobot_fields=("obs_type", "render_mode", STEP_LIMIT_FIELD, *TABLE_TYPE_NO_EFFECT),
    ),
    # fasteval's MetaWorld env, not MetaWorld's own "Meta-World/MT1": there the reset seed does not pick the task
    # variant (a wrapper draws it from its own generator) and info has "success", not "is_success".
    "metaworld": EnvType(id="fasteval.robot.metaworld:make_metaworld_env", task_kwarg="task", strip_prefix="metaworld-",
                         example_task="push-v3"),
    "mujoco": EnvType(id="{task}", example_task="HalfCheetah-v5"),
    "gymnasium": EnvType(id="{task}", example_task="CartPole-v1"),
    "known_answer": EnvType(id="fasteval/{task}", tasks=("KnownAnswer-v0",), default_task="KnownAnswer-v0"),
}
"""``--env.type`` -> gymnasium id and kwargs (documented in ``docs/lerobot.md``)."""

LEROBOT_FIRST = frozenset({"metaworld"})
"""Types of :data:`ENV_TYPES` that LeRobot's own env wins when the ``lerobot`` extra is importable: its
Meta-World renders a camera (``pixels`` + ``agent_pos``, what LeRobot policies are trained on), the table's
is state-only. Without LeRobot the table's entry stands (docs/lerobot.md)."""

REFUSED_TYPES = {
    "gym_manipulator": "a real robot with a teleoperator (LeRobot's HIL-SERL env), not a simulated evaluation",
}
"""LeRobot env types fasteval does not build, and why (hub env types are refused as well: see below)."""


def resolve_env_type(env_type: str, task: str | None, fast: bool = True) -> tuple[str, dict[str, Any], EnvType]:
    """``(type, task)`` -> ``(gymnasium id, env kwargs, table entry)``. Raises ``ValueError`` with the fix.

    For a type whose task is an env kwarg (``metaworld``), ``task`` may list several tasks
    (``push-v3,reach-v3``, as LeRobot accepts): the kwarg is then the list of task names, which the
    CLI runs as a suite (:func:`fasteval.doors.suites.suite_from_spec`), one task after the other.
    ``fast=False`` (``--no-fast-env``): the env package's own env, never fasteval's faster subclass.
    """
    entry = _entry(env_type)
    tasks = _tasks(env_type, entry, task)
    kwargs = dict(entry.kwargs)
    if entry.task_kwarg is not None:
        kwargs[entry.task_kwarg] = tasks[0] if len(tasks) == 1 else tasks
        env_id = entry.id
    elif entry.choose_id is not None and fast:
        env_id = entry.choose_id(tasks[0])
    else:
        env_id = entry.id.format(task=tasks[0])
    return env_id, kwargs, entry


def _entry(env_type: str) -> EnvType:
    lerobot_first = lerobot_env_type(env_type) if env_type in LEROBOT_FIRST else None
    if lerobot_first is not None:  # the table's task rules (LeRobot's default Meta-World task is a v2 task it lacks)
        table = ENV_TYPES[env_type]
        lerobot_first = replace(lerobot_first, default_task=table.default_task, example_task=table.example_task)
    entry = lerobot_first or ENV_TYPES.get(env_type) or lerobot_env_type(env_type)
    if entry is None:
        raise ValueError(f"unknown --env.type {env_type!r}; expected one of {', '.join(sorted(ENV_TYPES))} "
                         f"(or, with the lerobot extra installed, any LeRobot env type)."
                         + did_you_mean(env_type, ENV_TYPES))
    return entry


def _tasks(env_type: str, entry: EnvType, task: str | None) -> list[str]:
    """The task names of ``--env.task`` (a comma-separated list is a suite), checked against the entry."""
    if task is None:
        task = entry.default_task
    if task is None:
        raise ValueError(f"--env.type={env_type} needs --env.task (e.g. --env.task={entry.example_task}).")
    tasks = [t.strip() for t in task.split(",")]
    tasks = [t[len(entry.strip_prefix):] if entry.strip_prefix and t.startswith(entry.strip_prefix) else t for t in tasks]
    if not all(tasks):
        raise ValueError(f"--env.task={task!r}: expected a task name or a comma-separated list of task names "
                         f"(e.g. --env.task={entry.example_task or entry.default_task}).")
    if len(tasks) > 1 and entry.task_kwarg is None:
        raise ValueError(f"--env.task={task!r}: --env.type={env_type} evaluates one task per run; run one command "
                         f"per task, or list them as envs in a `fasteval sweep` file.")
    if len(set(tasks)) != len(tasks):
        raise ValueError(f"--env.task={task!r}: a task is listed twice.")
    for name in tasks:
        if entry.tasks and name not in entry.tasks:
            raise ValueError(f"--env.type={env_type}: unknown --env.task {name!r}; expected one of "
                             f"{', '.join(entry.tasks)}." + did_you_mean(name, entry.tasks))
    return tasks


def lerobot_env_type(env_type: str) -> EnvType | None:
    """A LeRobot env type not in :data:`ENV_TYPES` (or in :data:`LEROBOT_FIRST`), built by LeRobot's own env
    config and factory (:func:`fasteval.robot.lerobot.envs.make_env`, one task per env; comma-separated tasks
    run as a suite); ``None`` when LeRobot is not importable or does not know the type. Raises ``ValueError``
    for the types fasteval refuses (a real robot; an env whose code LeRobot downloads from the hub)."""
    try:
        from lerobot.envs.configs import EnvConfig, HubEnvConfig
    except Exception:  # not installed (or Python < 3.12): the caller reports the unknown type
        return None
    choices = EnvConfig.get_known_choices()
    if env_type not in choices:
        return None
    cls = choices[env_type]
    if env_type in REFUSED_TYPES or issubclass(cls, HubEnvConfig):
        why = REFUSED_TYPES[env_type] if env_type in REFUSED_TYPES else (
            f"LeRobot downloads this env's code from the hub ({cls.hub_path}) and runs it; fasteval runs no hub code")
        raise ValueError(f"--env.type={env_type} is not supported: {why}.")
    import dataclasses

    default = cls.task  # EnvConfig's field: every env type has a default (or None)
    from fasteval.robot.lerobot.envs import ENV_REF

    return EnvType(id=ENV_REF, task_kwarg="task", kwargs={"type": env_type},
                   default_task=default if isinstance(default, str) else None, example_task=str(default or ""),
                   lerobot_config=True, lerobot_fields=tuple(f.name for f in dataclasses.fields(cls)))


def env_field_args(entry: EnvType | None, env_type: str | None, fields: Mapping[str, str],
                   note: Callable[[str], None]) -> list[str]:
    """Native options for ``--env.<field>=value`` (``fields``), given the type's entry (``None``: ``--env``).

    LeRobot's types: every field goes to LeRobot's env config (an env kwarg of its factory), which checks it.
    The table's types: ``episode_length`` is ``--max-steps``, the gym kwargs are env kwargs, the fields
    ``lerobot-eval`` does not pass to the env have no effect (a note); any other field is an error."""
    out: list[str] = []
    for name, value in fields.items():
        if entry is not None and entry.lerobot_config:
            if name == STEP_LIMIT_FIELD and env_type == "metaworld":
                note("fasteval: --env.episode_length has no effect on LeRobot's Meta-World (its env always runs "
                     "500 steps), as in lerobot-eval; --max-steps N cuts episodes.")
            out.append(f"--env-kwarg={name}={value}")
            continue
        known = entry.lerobot_fields if entry is not None and entry.lerobot_fields else (STEP_LIMIT_FIELD,
                                                                                        *ENV_KWARG_FIELDS)
        if name not in known:
            where = f"--env.type={env_type}" if env_type else "--env"
            raise ValueError(f"unknown option --env.{name} for {where}; its --env.<field> options are "
                             f"{', '.join(sorted(known))}." + did_you_mean(name, known))
        if name == STEP_LIMIT_FIELD:
            out.append(f"--max-steps={value}")
        elif name in TABLE_TYPE_NO_EFFECT:
            note(f"fasteval: --env.{name} has no effect ({TABLE_TYPE_NO_EFFECT[name]}).")
        else:
            out.append(f"--env-kwarg={name}={value}")
    return out


def env_type_front(env_id: str, kwargs: Mapping[str, Any], entry: EnvType, observation_option: str | None) -> list[str]:
    """The native options an ``--env.type`` stands for, put before the user's (a later option wins)."""
    front = [f"--env={env_id}", *(f"--env-kwarg={k}={json.dumps(v)}" for k, v in kwargs.items())]
    if entry.max_steps is not None:
        front.append(f"--max-steps={entry.max_steps}")
    if entry.lerobot_observations and observation_option is not None:
        front.append(f"{observation_option}=lerobot")
    return front


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=3, cutoff=0.6)
    return f" Did you mean {' or '.join(close)}?" if close else ""
