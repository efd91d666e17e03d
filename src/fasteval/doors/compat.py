"""LeRobot-style command lines, accepted as they are: one alias table, rewritten once before click parses.

``fasteval --policy.path=DIR --env.type=pusht --eval.n_episodes=50 --eval.batch_size=10
--policy.device=cpu --seed=1000 --output_dir=DIR`` runs the same evaluation as the native flags.
Nothing here is a second parser: :func:`rewrite_args` turns every alias into the native option it
stands for (``--eval.batch_size=10`` -> ``--batch-size=10``) and click parses the result, with its
own types and checks. The tables (see ``docs/lerobot.md``):

* :data:`ALIASES`: dotted (LeRobot) names -> native options, with a value map for the booleans
  that select a native choice (``--eval.use_async_envs=true`` -> ``--vectorization=async``);
* any native option spelled with underscores (``--n_episodes``, ``--trust_remote_code=true``);
* :data:`ENV_TYPES`: ``--env.type`` / ``--env.task`` -> a gymnasium id plus env kwargs;
* ``--env.<kwarg>=V`` for the LeRobot env fields that are env kwargs (:data:`ENV_KWARG_FIELDS`);
* ``key=value`` tokens after the options (``eval.batch_size=8``, ``seed=3``): the same names
  without the leading dashes.

Rewriting stops at the first positional token that is not ``key=value`` (a subcommand name such
as ``bench``, ``sweep`` or ``report``) and at ``--``: what follows is passed through untouched.
Unknown dotted names and unknown keys are usage errors (exit code 2) with a suggestion.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Mapping

import click

from fasteval.robot.fast_envs import pusht_env_id

TRUE_WORDS = ("true", "1", "yes", "on")
FALSE_WORDS = ("false", "0", "no", "off")


@dataclass(frozen=True)
class Alias:
    """One alias: ``target`` is the native long option; ``values`` maps the alias's values to it."""

    target: str
    """Native long option (``--batch-size``)."""
    values: Mapping[str, str] | None = None
    """For boolean aliases: ``{"true": native value, "false": native value}``; other values pass through
    when ``passthrough`` is set, else they are an error."""
    passthrough: bool = False
    """Values not in ``values`` are given to the target as they are (``--policy.use_amp=bf16``)."""
    expand: Callable[[str], list[tuple[str, str]]] | None = None
    """Turns one value into several ``(option, value)`` pairs (``--rename_map`` JSON -> ``--rename k=v``)."""


def _rename_pairs(raw: str) -> list[tuple[str, str]]:
    try:
        mapping = json.loads(raw)
    except ValueError:
        mapping = None
    if not isinstance(mapping, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in mapping.items()):
        raise ValueError(f"expected a JSON object of key renames such as '{{\"observation.images.top\": "
                         f"\"observation.image\"}}', got {raw!r}")
    return [("--rename", f"{k}={v}") for k, v in mapping.items()]


ALIASES: dict[str, Alias] = {
    "--policy.path": Alias("--policy"),
    "--policy.device": Alias("--device"),
    # LeRobot's use_amp is torch.autocast(device_type) with the device's default dtype: fasteval's "auto".
    "--policy.use_amp": Alias("--amp", {"true": "auto", "false": "none"}, passthrough=True),
    "--eval.n_episodes": Alias("--n-episodes"),
    "--eval.batch_size": Alias("--batch-size"),
    "--eval.use_async_envs": Alias("--vectorization", {"true": "async", "false": "sync"}),
    "--env.episode_length": Alias("--max-steps"),
    "--output_dir": Alias("--output-dir"),
    "--config_path": Alias("--config"),
    "--rename_map": Alias("--rename", expand=_rename_pairs),
}
"""LeRobot names -> native options. Native options spelled with underscores need no entry."""

IGNORED: dict[str, str] = {
    "--policy.push_to_hub": "a training option; an evaluation pushes nothing",
    "--job_name": "fasteval names a run by its --output-dir",
}
"""LeRobot options that change nothing in an evaluation: accepted with a note on stderr."""

ENV_TYPE_OPTION, ENV_TASK_OPTION = "--env.type", "--env.task"
ENV_KWARG_FIELDS = ("obs_type", "render_mode", "visualization_width", "visualization_height")
"""LeRobot env fields passed to the env as keyword arguments (``--env.obs_type=pixels``)."""
OBSERVATION_FORMAT_PARAM = "observation_format"
"""The CLI parameter that selects what the policy receives (``--obs-format``)."""


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
    installed package is a version its identity test checked (``pusht``), else the original id."""


ENV_TYPES: dict[str, EnvType] = {
    "pusht": EnvType(
        id="gym_pusht/{task}", tasks=("PushT-v0",), default_task="PushT-v0", max_steps=300, lerobot_observations=True,
        kwargs={"obs_type": "pixels_agent_pos", "render_mode": "rgb_array",
                "visualization_width": 384, "visualization_height": 384},
        choose_id=pusht_env_id,
    ),
    "aloha": EnvType(
        id="gym_aloha/{task}", tasks=("AlohaInsertion-v0", "AlohaTransferCube-v0"), default_task="AlohaInsertion-v0",
        max_steps=400, lerobot_observations=True, kwargs={"obs_type": "pixels", "render_mode": "rgb_array"},
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

_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*=")


def resolve_env_type(env_type: str, task: str | None) -> tuple[str, dict[str, Any], EnvType]:
    """``(type, task)`` -> ``(gymnasium id, env kwargs, table entry)``. Raises ``ValueError`` with the fix.

    For a type whose task is an env kwarg (``metaworld``), ``task`` may list several tasks
    (``push-v3,reach-v3``, as LeRobot accepts): the kwarg is then the list of task names, which the
    CLI runs as a suite (:func:`fasteval.doors.suites.suite_from_spec`), one task after the other.
    """
    lerobot_first = lerobot_env_type(env_type) if env_type in LEROBOT_FIRST else None
    if lerobot_first is not None:  # the table's task rules (LeRobot's default Meta-World task is a v2 task it lacks)
        table = ENV_TYPES[env_type]
        lerobot_first = replace(lerobot_first, default_task=table.default_task,
                                example_task=table.example_task)
    entry = lerobot_first or ENV_TYPES.get(env_type) or lerobot_env_type(env_type)
    if entry is None:
        raise ValueError(f"unknown --env.type {env_type!r}; expected one of {', '.join(sorted(ENV_TYPES))} "
                         f"(or, with the lerobot extra installed, any LeRobot env type)."
                         + _did_you_mean(env_type, ENV_TYPES))
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
                             f"{', '.join(entry.tasks)}." + _did_you_mean(name, entry.tasks))
    kwargs = dict(entry.kwargs)
    if entry.task_kwarg is not None:
        kwargs[entry.task_kwarg] = tasks[0] if len(tasks) == 1 else tasks
        env_id = entry.id
    elif entry.choose_id is not None:
        env_id = entry.choose_id(tasks[0])
    else:
        env_id = entry.id.format(task=tasks[0])
    return env_id, kwargs, entry


def lerobot_env_type(env_type: str) -> EnvType | None:
    """A LeRobot env type not in :data:`ENV_TYPES` (or in :data:`LEROBOT_FIRST`), built by LeRobot's own env config and factory
    (:func:`fasteval.robot.lerobot.envs.make_env`, one task per env; comma-separated tasks run as a suite);
    ``None`` when LeRobot is not importable or does not know the type."""
    try:
        from lerobot.envs.configs import EnvConfig
    except Exception:  # not installed (or Python < 3.12): the caller reports the unknown type
        return None
    choices = EnvConfig.get_known_choices()
    if env_type not in choices:
        return None
    default = getattr(choices[env_type], "task", None)
    from fasteval.robot.lerobot.envs import ENV_REF

    return EnvType(id=ENV_REF, task_kwarg="task", kwargs={"type": env_type},
                   default_task=default if isinstance(default, str) else None, example_task=str(default or ""))


def _did_you_mean(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=3, cutoff=0.6)
    return f" Did you mean {' or '.join(close)}?" if close else ""


def _is_bool_word(tokens: list[str]) -> bool:
    return bool(tokens) and tokens[0].strip().lower() in TRUE_WORDS + FALSE_WORDS


def _parse_bool(value: str, name: str) -> bool:
    low = value.strip().lower()
    if low in TRUE_WORDS:
        return True
    if low in FALSE_WORDS:
        return False
    raise ValueError(f"{name}: expected true or false, got {value!r}.")


@dataclass
class _Options:
    """What the command's options look like: which take a value, which are flags, and their off switch."""

    takes_value: set[str]
    flags: dict[str, str | None]  # long flag -> its off switch (``--no-cuda-graph``) or None
    long_names: set[str]
    by_param: dict[str, str]  # parameter name -> its first long option
    short_env: tuple[str, ...] = ()  # short spellings of --env (-e)

    @classmethod
    def of(cls, params: Iterable[click.Parameter]) -> "_Options":
        params = list(params)
        takes_value: set[str] = set()
        flags: dict[str, str | None] = {}
        by_param: dict[str, str] = {}
        for p in params:
            if not isinstance(p, click.Option):
                continue
            long_opts = [o for o in p.opts if o.startswith("--")]
            if p.name and long_opts:
                by_param[p.name] = long_opts[0]
            if p.is_flag or p.count:
                off = next((o for o in p.secondary_opts if o.startswith("--")), None)
                for name in p.opts:
                    flags[name] = off
                for name in p.secondary_opts:
                    flags.setdefault(name, None)
            else:
                takes_value.update(p.opts)
        short_env = tuple(o for p in params if isinstance(p, click.Option) and p.name == "env"
                          for o in p.opts if not o.startswith("--"))
        return cls(takes_value, flags, {n for n in (*takes_value, *flags) if n.startswith("--")}, by_param, short_env)


def known_names(params: Iterable[click.Parameter], underscores: bool = True) -> list[str]:
    """Every long name the rewrite accepts: native options, their underscore spellings, the aliases."""
    opts = _Options.of(params)
    names = set(opts.long_names)
    if underscores:
        names |= {"--" + n[2:].replace("-", "_") for n in opts.long_names if "-" in n[2:]}
    names |= {a for a, alias in ALIASES.items() if alias.target in opts.long_names}
    names |= set(IGNORED) | {ENV_TYPE_OPTION, ENV_TASK_OPTION} | {f"--env.{k}" for k in ENV_KWARG_FIELDS}
    return sorted(names)


def rewrite_args(args: list[str], params: Iterable[click.Parameter],
                 note: Callable[[str], None] = lambda m: click.echo(m, err=True)) -> list[str]:
    """Aliases and ``key=value`` overrides -> native options (see the module docstring).

    Raises ``ValueError`` with a message meant for the user (the CLI turns it into exit code 2).
    """
    params = list(params)
    opts = _Options.of(params)
    out: list[str] = []
    env_type: str | None = None
    env_task: str | None = None
    native_env = False
    i = 0
    while i < len(args):
        token = args[i]
        i += 1
        if token == "--":
            out.extend(args[i - 1:])
            break
        from_key = False
        if not token.startswith("-"):
            if not _KEY_RE.match(token):
                out.extend(args[i - 1:])  # a subcommand (or a stray argument click will report)
                break
            token, from_key = "--" + token, True
        if not token.startswith("--"):  # short options pass through; their values too
            native_env = native_env or any(token.startswith(o) for o in opts.short_env)
            out.append(token)
            if token in opts.takes_value and i < len(args):
                out.append(args[i])
                i += 1
            continue
        name, has_value, value = token.partition("=")
        where = f"{token[2:]!r}" if from_key else name

        def take_value() -> str:
            nonlocal i
            if has_value:
                return value
            if i >= len(args):
                raise ValueError(f"{name} needs a value.")
            i += 1
            return args[i - 1]

        if name in (ENV_TYPE_OPTION, ENV_TASK_OPTION):
            if name == ENV_TYPE_OPTION:
                env_type = take_value()
            else:
                env_task = take_value()
            continue
        if name.startswith("--env.") and name[6:] in ENV_KWARG_FIELDS:
            out.append(f"--env-kwarg={name[6:]}={take_value()}")
            continue
        if name in IGNORED:
            if not has_value and i < len(args) and not args[i].startswith("-"):
                i += 1
            note(f"fasteval: ignoring {name} ({IGNORED[name]}).")
            continue
        target, alias = _target(name, opts)
        if target is None:
            if from_key or "." in name or "_" in name:
                names = known_names(params, underscores=False)
                if from_key:
                    what, shown, choices = f"override key {name[2:]!r} (in {token[2:]!r})", name[2:], [n[2:] for n in names]
                else:
                    what, shown, choices = f"option {name}", name, names
                raise ValueError(f"unknown {what}." + (_did_you_mean(shown, choices) or
                                 " See `fasteval --help` and docs/lerobot.md for the accepted names."))
            out.append(token)  # click reports it (with its own suggestion)
            continue
        if target == "--env":
            native_env = True
        if target in opts.flags:  # a flag: --x, --x=true/false, x=true/false
            if has_value:
                on = _parse_bool(value, where)
            elif alias is not None and _is_bool_word(args[i:i + 1]):
                on = _parse_bool(args[i], where)
                i += 1
            else:
                on = True
            if on:
                out.append(target)
            elif opts.flags[target] is not None:
                out.append(opts.flags[target])
            continue
        if alias is not None and alias.values is not None and not has_value and (
                i >= len(args) or args[i].startswith("-") or _KEY_RE.match(args[i])):
            raw = "true"  # a bare boolean alias (--eval.use_async_envs) means true, as a flag would
        else:
            raw = take_value()
        if alias is not None and alias.expand is not None:
            try:
                pairs = alias.expand(raw)
            except ValueError as exc:
                raise ValueError(f"{where}: {exc}.") from None
            out.extend(f"{o}={v}" for o, v in pairs)
            continue
        if alias is not None and alias.values is not None:
            low = raw.strip().lower()
            word = "true" if low in TRUE_WORDS else "false" if low in FALSE_WORDS else None
            if word is not None:
                raw = alias.values[word]
            elif not alias.passthrough:
                raise ValueError(f"{where}: expected true or false, got {raw!r}.")
        out.append(f"{target}={raw}")
    if env_type is None and env_task is not None:
        raise ValueError(f"--env.task={env_task} needs --env.type (one of {', '.join(sorted(ENV_TYPES))}).")
    if env_type is not None:
        if native_env:
            raise ValueError("give the env once: either --env (a gymnasium id) or --env.type/--env.task, not both.")
        env_id, kwargs, entry = resolve_env_type(env_type, env_task)
        front = [f"--env={env_id}", *(f"--env-kwarg={k}={json.dumps(v)}" for k, v in kwargs.items())]
        if entry.max_steps is not None:
            front.append(f"--max-steps={entry.max_steps}")
        if entry.lerobot_observations and OBSERVATION_FORMAT_PARAM in opts.by_param:
            front.append(f"{opts.by_param[OBSERVATION_FORMAT_PARAM]}=lerobot")
        out = front + out  # anything the user gave (later on the line) wins
    return out


def _target(name: str, opts: _Options) -> tuple[str | None, Alias | None]:
    """The native option ``name`` stands for, and its alias entry (``None`` for a native spelling)."""
    if name in opts.long_names:
        return name, None
    alias = ALIASES.get(name)
    if alias is not None:
        if alias.target not in opts.long_names:
            raise ValueError(f"{name} maps to {alias.target}, which this fasteval does not have.")
        return alias.target, alias
    dashed = name[:2] + name[2:].replace("_", "-")
    if "." not in name and dashed in opts.long_names:
        return dashed, None
    return None, None
