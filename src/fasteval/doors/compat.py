"""LeRobot-style command lines, accepted as they are: rewritten once into native options before click parses.

``fasteval --policy.path=DIR --env.type=pusht --eval.n_episodes=50 --eval.batch_size=10
--policy.device=cpu --seed=1000 --output_dir=DIR`` runs the same evaluation as the native flags, with
LeRobot's numbers. Nothing here is a second parser: :func:`rewrite` turns every alias into the native
option it stands for (``--eval.batch_size=10`` -> ``--batch-size=10``) and click parses the result, with
its own types and checks. Every option of LeRobot 0.6.1's eval config is one of (docs/lerobot.md, "Every
``lerobot-eval`` option"):

* :data:`ALIASES`: dotted (LeRobot) names -> native options, with a value map for the booleans
  that select a native choice (``--eval.use_async_envs=true`` -> ``--vectorization=async``);
* ``--env.type`` / ``--env.task`` / ``--env.<field>``: :mod:`fasteval.doors.env_types`;
* ``--policy.path`` (+ ``--policy.pretrained_revision``): a local folder first, then a hub id
  (:func:`fasteval.doors.lerobot_options.policy_reference`); ``--job_name``: LeRobot's default output folder;
* :data:`fasteval.doors.lerobot_options.RULES`: accepted with LeRobot's default value only, or with no
  effect (a note), or refused with the reason; every other ``--policy.<field>=value`` sets that field of the
  checkpoint's config (``--policy-field field=value``, applied by LeRobot's own config classes at load time);
* any native option spelled with underscores (``--n_episodes``, ``--trust_remote_code=true``);
* ``key=value`` tokens after the options (``eval.batch_size=8``, ``seed=3``): the same names without
  the leading dashes.

A command line with a LeRobot-style option (``--policy.*``, ``--env.*``, ``--eval.*``) gets LeRobot's
defaults (:data:`fasteval.doors.lerobot_options.LEROBOT_DEFAULTS`), returned as click defaults
(:attr:`Rewritten.defaults`), so that options given on the command line, and ``--config`` files, win.

Rewriting stops at the first positional token that is not ``key=value`` (a subcommand name such
as ``bench``, ``sweep`` or ``report``) and at ``--``: what follows is passed through untouched.
Unknown dotted names and unknown keys are usage errors (exit code 2) with a suggestion.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

import click

from fasteval.doors.env_types import (ENV_KWARG_FIELDS, ENV_TYPES, LEROBOT_FIRST, STEP_LIMIT_FIELD, EnvType,  # noqa: F401
                                      did_you_mean, env_field_args, env_type_front, lerobot_env_type, resolve_env_type)
from fasteval.doors.lerobot_options import (FALSE_WORDS, LEROBOT, LEROBOT_DEFAULTS, LEROBOT_PREFIXES, RULES,
                                            TRUE_WORDS, VIDEO_DEFAULTS, checkpoint_type, lerobot_output_dir,
                                            noise_default, policy_field_arg, policy_reference, seed_refusal)
from fasteval.robot.lerobot.libero import INIT_STATE_OFFSET, is_libero_type


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
    "--policy.device": Alias("--device"),
    # LeRobot's use_amp is torch.autocast(device_type) with the device's default dtype: fasteval's "auto".
    "--policy.use_amp": Alias("--amp", {"true": "auto", "false": "none"}, passthrough=True),
    "--eval.n_episodes": Alias("--n-episodes"),
    "--eval.batch_size": Alias("--batch-size"),
    "--eval.use_async_envs": Alias("--vectorization", {"true": "async", "false": "sync"}),
    "--output_dir": Alias("--output-dir"),
    "--config_path": Alias("--config"),
    "--rename_map": Alias("--rename", expand=_rename_pairs),
}
"""LeRobot names -> native options. Native options spelled with underscores need no entry."""

ENV_TYPE_OPTION, ENV_TASK_OPTION = "--env.type", "--env.task"
POLICY_PATH, POLICY_REVISION, JOB_NAME = "--policy.path", "--policy.pretrained_revision", "--job_name"
FAST_ENV, NO_FAST_ENV = "--fast-env", "--no-fast-env"
"""``--no-fast-env``: step the env package's own env where ``--env.type`` would pick fasteval's faster one."""
OBSERVATION_FORMAT_PARAM = "observation_format"
"""The CLI parameter that selects what the policy receives (``--obs-format``)."""
RESUME_OPTION = "--resume"
_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*=")


@dataclass
class Rewritten:
    """A rewritten command line: the native ``args``, and click defaults for the options it does not give."""

    args: list[str]
    lerobot: bool = False
    """The command line uses a LeRobot-style option: LeRobot's defaults apply."""
    defaults: dict[str, Any] = field(default_factory=dict)
    """``{parameter: value}`` for click's ``default_map`` (LeRobot's defaults; empty for native command lines)."""


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
    names |= set(RULES) | {ENV_TYPE_OPTION, ENV_TASK_OPTION, POLICY_PATH, POLICY_REVISION, JOB_NAME}
    names |= {f"--env.{k}" for k in (STEP_LIMIT_FIELD, *ENV_KWARG_FIELDS)}
    return sorted(names)


@dataclass
class _Token:
    """One long option being rewritten: ``--name[=value]`` (or ``key=value``, ``from_key``)."""

    name: str
    has_value: bool
    value: str
    where: str
    """How the error messages name it (the key of a ``key=value``, else the option)."""
    from_key: bool


class _Rewrite:
    """The state of one rewrite (see :func:`rewrite`): the native tokens so far and what the LeRobot
    options said, turned into native options by :meth:`finish` once the whole line is read."""

    def __init__(self, args: list[str], params: list[click.Parameter], note: Callable[[str], None]):
        self.args, self.params, self.note = args, params, note
        self.opts = _Options.of(params)
        self.out: list[str] = []
        self.i = 0
        self.env_type: str | None = None
        self.env_task: str | None = None
        self.env_fields: dict[str, str] = {}
        self.native_env = False
        self.policy_path: str | None = None
        self.revision: str | None = None
        self.job_name: str | None = None
        self.fast_env = True
        self.lerobot = False

    def run(self) -> Rewritten:
        while self.i < len(self.args):
            token = self.args[self.i]
            self.i += 1
            if token == "--":
                self.out.extend(self.args[self.i - 1:])
                break
            if not token.startswith("-"):
                if not _KEY_RE.match(token):
                    self.out.extend(self.args[self.i - 1:])  # a subcommand (or a stray argument click will report)
                    break
                self.long("--" + token, from_key=True)
            elif token.startswith("--"):
                self.long(token, from_key=False)
            else:
                self.short(token)
        return self.finish()

    # -- one token --------------------------------------------------------------------------------
    def short(self, token: str) -> None:
        """Short options pass through; their values too."""
        self.native_env = self.native_env or any(token.startswith(o) for o in self.opts.short_env)
        self.out.append(token)
        if token in self.opts.takes_value and self.i < len(self.args):
            self.out.append(self.args[self.i])
            self.i += 1

    def take_value(self, t: _Token) -> str:
        if t.has_value:
            return t.value
        if self.i >= len(self.args):
            raise ValueError(f"{t.name} needs a value.")
        self.i += 1
        return self.args[self.i - 1]

    def take_optional(self, t: _Token) -> str:
        """The value of an option that may come bare (``--policy.push_to_hub`` means true)."""
        if t.has_value:
            return t.value
        if self.i < len(self.args) and not self.args[self.i].startswith("-") and not _KEY_RE.match(self.args[self.i]):
            self.i += 1
            return self.args[self.i - 1]
        return "true"

    def long(self, token: str, from_key: bool) -> None:
        name, has_value, value = token.partition("=")
        t = _Token(name, has_value, value, f"{token[2:]!r}" if from_key else name, from_key)
        self.lerobot = self.lerobot or name.startswith(LEROBOT_PREFIXES)
        if not self.lerobot_option(t):
            self.native(t, token)

    def lerobot_option(self, t: _Token) -> bool:
        """The LeRobot options that are not plain aliases; ``False`` when ``t`` is none of them."""
        name = t.name
        if name == ENV_TYPE_OPTION:
            self.env_type = self.take_value(t)
        elif name == ENV_TASK_OPTION:
            self.env_task = self.take_value(t)
        elif name in RULES:
            message = RULES[name].check(name, self.take_optional(t))
            if message:
                self.note(message)
        elif name.startswith("--env."):
            self.env_fields[name[len("--env."):]] = self.take_value(t)
        elif name == POLICY_PATH:
            self.policy_path = self.take_value(t)
        elif name == POLICY_REVISION:
            self.revision = self.take_value(t)
        elif name == JOB_NAME:
            self.job_name = self.take_value(t)
        elif name in (FAST_ENV, NO_FAST_ENV):
            on = _parse_bool(t.value, t.where) if t.has_value else True
            self.fast_env = on if name == FAST_ENV else not on
        elif name.startswith("--policy.") and name not in ALIASES:
            known = [n for n in known_names(self.params) if n.startswith("--policy.")]
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.85)  # a typo of a name fasteval takes
            if close:
                raise ValueError(f"unknown option {name}. Did you mean {close[0]}?")
            # a field of the policy's config: LeRobot's own config class parses it when the policy is loaded
            self.out.append(policy_field_arg(name, self.take_value(t)))
        else:
            return False
        return True

    def native(self, t: _Token, token: str) -> None:
        """An alias, a native option (any spelling), or a name click will report."""
        target, alias = _target(t.name, self.opts)
        if target is None:
            if t.from_key or "." in t.name or "_" in t.name:
                names = known_names(self.params, underscores=False)
                if t.from_key:
                    what, shown, choices = (f"override key {t.name[2:]!r} (in {token[2:]!r})", t.name[2:],
                                            [n[2:] for n in names])
                else:
                    what, shown, choices = f"option {t.name}", t.name, names
                raise ValueError(f"unknown {what}." + (did_you_mean(shown, choices) or
                                 " See `fasteval --help` and docs/lerobot.md for the accepted names."))
            self.out.append(token)  # click reports it (with its own suggestion)
            return
        if target == "--env":
            self.native_env = True
        if target in self.opts.flags:
            self.flag(t, target, alias)
            return
        if alias is not None and alias.values is not None and not t.has_value and (
                self.i >= len(self.args) or self.args[self.i].startswith("-") or _KEY_RE.match(self.args[self.i])):
            raw = "true"  # a bare boolean alias (--eval.use_async_envs) means true, as a flag would
        else:
            raw = self.take_value(t)
        if target == "--seed" and seed_refusal(raw):
            raise ValueError(seed_refusal(raw))
        self.out.extend(f"{o}={v}" for o, v in _native_values(t, target, alias, raw))

    def flag(self, t: _Token, target: str, alias: Alias | None) -> None:
        """A flag: ``--x``, ``--x=true/false``, ``x=true/false``."""
        if t.has_value:
            on = _parse_bool(t.value, t.where)
        elif alias is not None and _is_bool_word(self.args[self.i:self.i + 1]):
            on = _parse_bool(self.args[self.i], t.where)
            self.i += 1
        else:
            on = True
        if on:
            self.out.append(target)
        elif self.opts.flags[target] is not None:
            self.out.append(self.opts.flags[target])

    # -- the whole line ---------------------------------------------------------------------------
    def finish(self) -> Rewritten:
        front: list[str] = []
        entry: EnvType | None = None
        if self.env_type is None and self.env_task is not None:
            raise ValueError(f"--env.task={self.env_task} needs --env.type (one of {', '.join(sorted(ENV_TYPES))}).")
        if self.env_type is not None:
            if self.native_env:
                raise ValueError("give the env once: either --env (a gymnasium id) or --env.type/--env.task, not both.")
            env_id, kwargs, entry = resolve_env_type(self.env_type, self.env_task, fast=self.fast_env)
            front = env_type_front(env_id, kwargs, entry, self.opts.by_param.get(OBSERVATION_FORMAT_PARAM))
        elif not self.fast_env:
            raise ValueError(f"{NO_FAST_ENV} chooses the env of --env.type (pusht: gym-pusht's own); with --env, "
                             f"name the env itself (--env gym_pusht/PushT-v0).")
        front += env_field_args(entry, self.env_type, self.env_fields, self.note)
        front += self.libero_init_states(entry)
        policy = None
        if self.policy_path is not None:
            policy = policy_reference(self.policy_path, self.revision)
            front.append(f"{self.opts.by_param.get('policy', '--policy')}={policy}")
        elif self.revision is not None:
            raise ValueError(f"{POLICY_REVISION}={self.revision} needs {POLICY_PATH} (a hub id).")
        if self.job_name is not None and not self.lerobot:
            self.note(f"fasteval: {JOB_NAME} has no effect here (it names LeRobot's default output folder, used "
                      f"with LeRobot-style options); give --output-dir.")
        return Rewritten(front + self.out, self.lerobot, self.lerobot_defaults(policy, entry) if self.lerobot else {})

    def given(self, option: str) -> bool:
        """Whether the rewritten command line gives the native ``option`` (``--noise``, ``--noise=...``)."""
        return any(t == option or t.startswith(option + "=") for t in self.out)

    def libero_init_states(self, entry: EnvType | None) -> list[str]:
        """LIBERO under a LeRobot-style ``--seed``: episode i starts from init state i mod 50 whatever the seed, as
        in ``lerobot-eval`` (``--env-kwarg init_state_offset=SEED``; without it fasteval's rule is seed mod 50,
        the same for seeds that are multiples of 50, LeRobot's default 1000 among them). A later
        ``--env-kwarg init_state_offset=...`` wins."""
        if entry is None or not entry.lerobot_config or not is_libero_type(self.env_type):
            return []
        seeds = [t.split("=", 1)[1] for t in self.out if t.startswith("--seed=")]
        return [f"--env-kwarg={INIT_STATE_OFFSET}={seeds[-1]}"] if seeds else []

    def lerobot_defaults(self, policy: str | None, entry: EnvType | None) -> dict[str, Any]:
        """LeRobot's defaults for the options the command line leaves out (click's ``default_map``): its
        10 videos only for env types that render (``lerobot-eval`` renders every env; one that cannot fails);
        LeRobot's noise for the policy types whose noise fasteval draws per episode (one line says so),
        unless the command line chooses ``--noise`` or ``--reset-mode``."""
        defaults: dict[str, Any] = {**LEROBOT_DEFAULTS, "video_layout": LEROBOT}
        if entry is None or not entry.renders:
            defaults = {k: v for k, v in defaults.items() if k not in VIDEO_DEFAULTS}
        noise = noise_default(checkpoint_type(policy)) if policy else None
        if noise is not None and not self.given("--noise") and not self.given("--reset-mode"):
            defaults["noise"] = noise[0]
            self.note(noise[1])
        resuming = any(t == RESUME_OPTION or t.startswith(RESUME_OPTION + "=") for t in self.out)
        if not resuming and "output_dir" in self.opts.by_param:
            job = self.job_name or f"{self.env_type or 'env'}_{(checkpoint_type(policy) if policy else None) or 'policy'}"
            defaults["output_dir"] = str(lerobot_output_dir(job))
        return {k: v for k, v in defaults.items() if k in self.opts.by_param}


def _native_values(t: _Token, target: str, alias: Alias | None, raw: str) -> list[tuple[str, str]]:
    """``(native option, value)`` pairs of one valued option, through its alias's value map or expansion."""
    if alias is not None and alias.expand is not None:
        try:
            return alias.expand(raw)
        except ValueError as exc:
            raise ValueError(f"{t.where}: {exc}.") from None
    if alias is not None and alias.values is not None:
        low = raw.strip().lower()
        word = "true" if low in TRUE_WORDS else "false" if low in FALSE_WORDS else None
        if word is not None:
            raw = alias.values[word]
        elif not alias.passthrough:
            raise ValueError(f"{t.where}: expected true or false, got {raw!r}.")
    return [(target, raw)]


def rewrite(args: list[str], params: Iterable[click.Parameter],
            note: Callable[[str], None] = lambda m: click.echo(m, err=True)) -> Rewritten:
    """Aliases, LeRobot's options and ``key=value`` overrides -> native options and LeRobot's defaults (see
    the module docstring). Raises ``ValueError`` with a message meant for the user (the CLI: exit code 2)."""
    return _Rewrite(list(args), list(params), note).run()


def rewrite_args(args: list[str], params: Iterable[click.Parameter],
                 note: Callable[[str], None] = lambda m: click.echo(m, err=True)) -> list[str]:
    """The native tokens of :func:`rewrite` (without its defaults)."""
    return rewrite(args, params, note).args


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
