"""LeRobot's eval options that are not plain aliases, LeRobot's defaults, and its policy lookup.

``docs/lerobot.md`` ("Every ``lerobot-eval`` option") has one row per option of LeRobot 0.6.1's eval
config; :mod:`fasteval.doors.compat` rewrites the aliases, and this module holds the rest:

* :data:`RULES`: options accepted only with LeRobot's default value (anything else is **refused** with
  the reason), and options with **no effect** in ``lerobot-eval`` either (accepted, with a note);
* :func:`policy_field_refusal`: every other ``--policy.<field>`` (LeRobot's overrides of the saved config);
* :data:`LEROBOT_DEFAULTS`: a command line with a LeRobot-style option gets
  LeRobot's defaults (seed 1000, 50 episodes, ``eval.batch_size`` 0 = :func:`auto_batch_size`, 10 videos);
* :func:`policy_reference`: ``--policy.path`` as LeRobot resolves it, a local folder first, then the hub.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

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


def policy_field_refusal(name: str) -> str:
    """The message for ``--policy.<field>``: a field of the policy's config, which LeRobot applies on top
    of the saved ``config.json``."""
    return (f"{name} is not supported: LeRobot applies it on top of the checkpoint's config.json; fasteval "
            f"evaluates the checkpoint as saved. Change the field in config.json (in a copy of the folder).")


def seed_refusal(value: str) -> str | None:
    """``--seed=null`` (LeRobot: no seeding) is refused: every fasteval episode has a seed."""
    if value.strip().lower() in NULL_WORDS:
        return (f"--seed={value} is not supported: every episode i runs with seed SEED + i, so that a run can be "
                f"repeated; give a seed (LeRobot's default is 1000).")
    return None


# -- which defaults ----------------------------------------------------------------------------------
LEROBOT_PREFIXES = ("--policy.", "--env.", "--eval.")
LEROBOT_DEFAULTS = {"seed": 1000, "n_episodes": 50, "batch_size": 0, "max_episodes_rendered": 10,
                    "video_select": "per-task"}
"""EvalSpec fields (and CLI parameters) under LeRobot-style flags: LeRobot 0.6.1's ``EvalPipelineConfig``
``seed``, ``EvalConfig`` ``n_episodes`` and ``batch_size`` (0: :func:`auto_batch_size`), and the 10
episodes ``eval_main`` renders per task."""
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
