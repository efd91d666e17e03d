"""LeRobot's eval options that are not plain aliases, LeRobot's defaults, and its policy lookup.

``docs/lerobot.md`` ("Every ``lerobot-eval`` option") has one row per option of LeRobot 0.6.1's eval
config; :mod:`fasteval.doors.compat` rewrites the aliases, and this module holds the rest:

* :data:`RULES`: options accepted only with LeRobot's default value (anything else is **refused** with
  the reason), and options with **no effect** in ``lerobot-eval`` either (accepted, with a note);
* :data:`POLICY_FIELD_OPTION`: every other ``--policy.<field>=value`` is an override of the saved config,
  applied by LeRobot's own config classes when the policy is loaded (``--policy-field field=value``);
* :data:`LEROBOT_DEFAULTS`: a command line with a LeRobot-style option gets
  LeRobot's defaults (seed 1000, 50 episodes, ``eval.batch_size`` 0 = :func:`auto_batch_size`, 10 videos,
  and LeRobot's global-RNG noise for the policy types whose noise fasteval draws per episode:
  :func:`noise_default`);
* :func:`set_aside_earlier_run`: a LeRobot-style run into an ``--output_dir`` that holds an earlier run keeps
  that run under a new name (LeRobot overwrites; fasteval never mixes two runs' records);
* :func:`policy_reference`: ``--policy.path`` as LeRobot resolves it, a local folder first, then the hub.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SAME, MAPPED, NO_EFFECT, REFUSED = "same", "mapped", "no effect", "refused"
TRUE_WORDS = ("true", "1", "yes", "on")
FALSE_WORDS = ("false", "0", "no", "off")
LEROBOT, FASTEVAL = "lerobot", "fasteval"
"""Which set of defaults a command line gets (``--print-config`` shows it as ``"defaults"``)."""


@dataclass(frozen=True)
class Rule:
    """A LeRobot option fasteval has no native option for: ``default_values`` (LeRobot's default,
    spelled any way) are accepted and change nothing; any other value is ``kind``: refused, or
    accepted with a note (no effect)."""

    kind: str
    why: str
    default_values: tuple[str, ...] = ()

    def check(self, name: str, value: str) -> str | None:
        """``None`` for a default value; the note to print for ``no effect``. Raises ``ValueError`` when refused."""
        if value.strip().lower() in self.default_values:
            return None
        if self.kind == REFUSED:
            shown = f"{name}={value}" if value else name
            raise ValueError(f"{shown} is not supported: {self.why}.")
        return f"fasteval: {name} has no effect ({self.why})."


_UPLOAD = "an upload setting of training; an evaluation pushes nothing, in lerobot-eval too"
RULES: dict[str, Rule] = {
    "--policy.type": Rule(REFUSED, "fasteval evaluates a saved checkpoint, not a policy built from scratch with "
                                   "random weights; save one with save_pretrained and give --policy.path=DIR"),
    "--policy.pretrained_path": Rule(REFUSED, "LeRobot sets it from --policy.path; give --policy.path"),
    "--policy.use_peft": Rule(REFUSED, "fasteval does not load PEFT adapters; merge the adapter into the weights "
                                       "and save the policy with save_pretrained", FALSE_WORDS),
    "--policy.push_to_hub": Rule(NO_EFFECT, _UPLOAD),
    "--policy.repo_id": Rule(NO_EFFECT, _UPLOAD),
    "--policy.private": Rule(NO_EFFECT, _UPLOAD),
    "--policy.tags": Rule(NO_EFFECT, _UPLOAD),
    "--policy.license": Rule(NO_EFFECT, _UPLOAD),
    "--eval.recording": Rule(REFUSED, "fasteval does not write LeRobot datasets; --save-episodes DIR writes every "
                                      "step of the episodes (a TensorDict memory map)", FALSE_WORDS),
    "--eval.recording_repo_id": Rule(REFUSED, "it needs --eval.recording, which fasteval does not do, and a hub upload"),
    "--eval.recording_private": Rule(REFUSED, "it only matters with --eval.recording_repo_id", FALSE_WORDS),
    "--env.features": Rule(REFUSED, "it is the layout of an env type, not a command-line value"),
    "--env.features_map": Rule(REFUSED, "it is the layout of an env type, not a command-line value"),
    "--env.max_parallel_tasks": Rule(NO_EFFECT, "fasteval runs a suite's tasks one after the other; the numbers do "
                                                "not depend on it", ("1",)),
    "--env.disable_env_checker": Rule(REFUSED, "fasteval never wraps envs in gymnasium's passive env checker "
                                               "(it only warns)", TRUE_WORDS),
}
"""LeRobot options with no native counterpart (docs/lerobot.md, the option table)."""

TABLE_TYPE_NO_EFFECT: dict[str, str] = {
    "fps": "PushT's and ALOHA's videos use the env's render_fps; lerobot-eval does not give the env this field either",
    "observation_height": "it shapes only the features of a policy built from scratch; the env never sees it",
    "observation_width": "it shapes only the features of a policy built from scratch; the env never sees it",
}
"""``--env.<field>`` of LeRobot's PushT/ALOHA configs that ``lerobot-eval`` does not pass to the env."""

NULL_WORDS = ("null", "none", "~")
EARLIER_RUN_FILES = ("manifest.json", "episodes.jsonl", "errors.jsonl", "eval_info.json", "tasks", "videos")
"""What an output folder holds after a run (fasteval's or ``lerobot-eval``'s): such a folder holds an earlier run."""


POLICY_FIELD_OPTION = "--policy-field"
"""The native option of ``--policy.<field>=value``: ``--policy-field field=value`` (repeatable; the spec's
``policy_overrides``), applied to the LeRobot checkpoint's config through LeRobot's own config classes
before the policy is built, as ``lerobot-eval`` applies its ``--policy.<field>`` overrides."""


def policy_field_arg(name: str, value: str) -> str:
    """``--policy.n_action_steps`` = ``10`` -> ``--policy-field=n_action_steps=10``."""
    return f"{POLICY_FIELD_OPTION}={name[len('--policy.'):]}={value}"


STOCHASTIC_TYPES = ("diffusion",)
"""LeRobot policy types whose noise fasteval draws per episode by default (``--noise episode``): under
LeRobot's command line they get LeRobot's global-RNG draws instead (:func:`noise_default`)."""


def noise_default(policy_type: str | None) -> tuple[str, str] | None:
    """``("global", notice)`` for a LeRobot-style command line whose checkpoint is a type of
    :data:`STOCHASTIC_TYPES` (its numbers are then ``lerobot-eval``'s), else ``None``."""
    if policy_type not in STOCHASTIC_TYPES:
        return None
    return "global", (f"fasteval: {policy_type} under LeRobot-style options draws its noise as lerobot-eval does "
                      f"(LeRobot's global RNG, in LeRobot's batches: its numbers, which depend on the batch size); "
                      f"--noise episode gives every episode its own noise generator (batch-invariant results).")


def seed_refusal(value: str) -> str | None:
    """``--seed=null`` (LeRobot: no seeding) is refused: every fasteval episode has a seed."""
    if value.strip().lower() in NULL_WORDS:
        return (f"--seed={value} is not supported: every episode i runs with seed SEED + i, so that a run can be "
                f"repeated; give a seed (LeRobot's default is 1000).")
    return None


# -- which defaults ----------------------------------------------------------------------------------
LEROBOT_PREFIXES = ("--policy.", "--env.", "--eval.")
LEROBOT_DEFAULTS = {"seed": 1000, "n_episodes": 50, "batch_size": 0, "max_episodes_rendered": 10,
                    "video_select": "per-task", "policy_block": "batch"}
"""EvalSpec fields (and CLI parameters) under LeRobot-style flags: LeRobot 0.6.1's ``EvalPipelineConfig``
``seed``, ``EvalConfig`` ``n_episodes`` and ``batch_size`` (0: :func:`auto_batch_size`), and the 10
episodes ``eval_main`` renders per task; and the policy called on blocks of the batch size (``policy_block``
``batch``): lerobot-eval calls its policy on the whole batch, so its rounding is the batch size's."""
VIDEO_DEFAULTS = ("max_episodes_rendered", "video_select")
"""The video entries of :data:`LEROBOT_DEFAULTS`: only for env types that render (``EnvType.renders``)."""


def auto_batch_size(n_episodes: int, cpu_count: int | None = None) -> int:
    """LeRobot's ``eval.batch_size=0``: ``min(max(1, floor(0.7 * cpu_count)), n_episodes, 64)``
    (``EvalConfig._auto_batch_size``; ``os.cpu_count()``, else 4)."""
    cores = cpu_count if cpu_count is not None else (os.cpu_count() or 4)
    return max(1, min(max(1, math.floor(cores * 0.7)), int(n_episodes), 64))


def lerobot_output_dir(job_name: str, now: float | None = None) -> Path:
    """LeRobot's default output folder: ``outputs/eval/<date>/<time>_<job_name>``."""
    import time

    stamp = time.localtime(now)
    return Path("outputs") / "eval" / time.strftime("%Y-%m-%d", stamp) / f"{time.strftime('%H-%M-%S', stamp)}_{job_name}"


def checkpoint_type(ref: str) -> str | None:
    """The LeRobot policy type (``config.json``'s ``"type"``) of a local folder or a cached hub snapshot."""
    import json

    folder = Path(ref[len("hf://"):] if ref.startswith("hf://") else ref)
    config = folder / "config.json"
    if not config.is_file() and ref.startswith("hf://"):
        try:
            from huggingface_hub import try_to_load_from_cache

            repo, _, revision = ref[len("hf://"):].partition("@")
            cached = try_to_load_from_cache(repo, "config.json", revision=revision or None)
            config = Path(cached) if isinstance(cached, str) else config
        except Exception:  # no huggingface_hub, or nothing cached: the job name says "policy"
            return None
    try:
        kind = json.loads(config.read_text()).get("type")
    except (OSError, ValueError, AttributeError):
        return None
    return kind if isinstance(kind, str) else None


# -- --policy.path: a local folder first, then the hub --------------------------------------------------
HF_PREFIX = "hf://"
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


def policy_reference(path: str, revision: str | None = None) -> str:
    """``--policy.path`` as LeRobot resolves it (``PreTrainedConfig.from_pretrained``): an existing local
    path stays as it is; else ``org/repo`` is a hub id (``hf://org/repo``, with ``@revision``). Anything
    else (``module:callable``, a missing deeper folder) is left to the loader, which says what it expected.
    Raises ``ValueError`` for a revision given with a local folder."""
    if Path(path).exists():
        if revision:
            raise ValueError(f"--policy.pretrained_revision={revision}: {path} is a local folder, which has no "
                             f"revisions; drop the option or give a hub id.")
        return path
    if path.startswith(HF_PREFIX):
        return path if not revision or "@" in path else f"{path}@{revision}"
    if _HUB_ID.match(path) and ":" not in path:
        return f"{HF_PREFIX}{path}" + (f"@{revision}" if revision else "")
    if revision:
        raise ValueError(f"--policy.pretrained_revision={revision}: {path!r} is not a hub id (org/repo).")
    return path


# -- a re-run into the same --output_dir ---------------------------------------------------------------------
def holds_earlier_run(folder: Path) -> bool:
    """Whether ``folder`` holds the files of an earlier run (:data:`EARLIER_RUN_FILES`)."""
    return folder.is_dir() and any((folder / name).exists() for name in EARLIER_RUN_FILES)


def unfinished_suite(folder: Path, labels: list[str]) -> bool:
    """Whether ``folder`` holds a suite run of these task folders (``tasks/<group>_<task_id>``) that stopped before
    its end: some task's manifest says other than ``complete``. The same command then finishes it (the suite's
    own rule: each task resumes), as with native options."""
    import json

    for label in labels:
        manifest = folder / "tasks" / label / "manifest.json"
        if manifest.is_file():
            try:
                if json.loads(manifest.read_text()).get("status") != "complete":
                    return True
            except (OSError, ValueError):
                return False
    return False


def set_aside_earlier_run(folder: Path, suite_labels: list[str] | None = None) -> Path | None:
    """A LeRobot-style run into ``folder`` that holds an earlier run: move the earlier run to
    ``<folder>-earlier-<k>`` (the first free ``k``), so that this run starts in an empty folder and the two runs'
    records never mix; return the new name (``None``: nothing to move). ``lerobot-eval`` overwrites its output
    folder; fasteval keeps the earlier run instead, and says where.

    ``suite_labels`` (a suite's task folders): a suite that stopped before its end is left in place, to be
    finished by the same command (:func:`unfinished_suite`). A folder another fasteval process is writing (its
    lock) is never moved: :class:`~fasteval.types.errors.UserInputError` naming that process."""
    folder = Path(folder)
    if not holds_earlier_run(folder) or (suite_labels and unfinished_suite(folder, suite_labels)):
        return None
    from fasteval.run.folder_lock import FolderLock

    FolderLock(folder).acquire().release()  # raises when another process holds the folder
    k = 1
    while folder.with_name(f"{folder.name}-earlier-{k}").exists():
        k += 1
    target = folder.with_name(f"{folder.name}-earlier-{k}")
    folder.rename(target)
    return target


def rerun_note(out_dir: Path, suite: Any = None) -> str | None:
    """The LeRobot-style re-run into ``out_dir`` (:func:`set_aside_earlier_run`, ``suite``: the run's suite, if
    any): the earlier run is moved aside; returns the line that says where (``None``: nothing was there)."""
    labels = None
    if suite is not None:
        from fasteval.doors.suites import flatten_suite
        from fasteval.types.eval_result import task_folder

        labels = [task_folder(group, task_id) for group, task_id, _ in flatten_suite(suite)]
    moved = set_aside_earlier_run(Path(out_dir), labels)
    if moved is None:
        return None
    return (f"fasteval: {out_dir} held an earlier run; it is kept as {moved} (lerobot-eval would write over it) and "
            f"this run starts afresh in {out_dir}.")
