"""docs/lerobot.md's table of every ``lerobot-eval`` option, held to LeRobot's installed config dataclasses.

Every field of ``EvalPipelineConfig`` (top level), ``EvalConfig`` (``eval.*``), ``PreTrainedConfig``
(``policy.*``) and the ``EnvConfig`` of every registered env type (``env.*``) must have a row; a field
LeRobot adds in a later version fails this test until the table (and fasteval) says what it does.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

pytest.importorskip("lerobot")

DOC = Path(__file__).resolve().parents[2] / "docs" / "lerobot.md"
SECTION = "## Every `lerobot-eval` option"
WORDS = ("same", "mapped", "no effect", "refused")


def table_rows() -> list[tuple[list[str], str, str]]:
    """``[(option names, LeRobot default, fasteval cell)]`` of the doc's option table."""
    text = DOC.read_text()
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    rows = []
    for line in text[start:end if end > 0 else None].splitlines():
        if not line.startswith("| ") or line.startswith("| LeRobot option") or line.startswith("|---"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        assert len(cells) == 4, f"a row of the option table has {len(cells)} cells, not 4: {line}"
        rows.append((re.findall(r"`(--[\w.]+)", cells[0]), cells[1], cells[2]))
    return rows


def lerobot_fields() -> dict[str, str]:
    """``{"--eval.n_episodes": "EvalConfig", ...}``: every option of LeRobot's installed eval config."""
    from lerobot.configs.default import EvalConfig
    from lerobot.configs.eval import EvalPipelineConfig
    from lerobot.configs.policies import PreTrainedConfig
    from lerobot.envs.configs import EnvConfig

    out: dict[str, str] = {}
    for f in dataclasses.fields(EvalPipelineConfig):
        if f.name not in ("env", "eval", "policy"):
            out[f"--{f.name}"] = "EvalPipelineConfig"
    out.update({f"--eval.{f.name}": "EvalConfig" for f in dataclasses.fields(EvalConfig)})
    out.update({f"--policy.{f.name}": "PreTrainedConfig" for f in dataclasses.fields(PreTrainedConfig)})
    out.update({"--policy.path": "the policy's path field", "--policy.type": "the policy's choice",
                "--env.type": "the env's choice", "--config_path": "draccus"})
    for name, cls in EnvConfig.get_known_choices().items():
        for f in dataclasses.fields(cls):
            out.setdefault(f"--env.{f.name}", f"EnvConfig {name}")
    return out


def test_every_lerobot_option_has_a_row() -> None:
    documented = {name for names, _, _ in table_rows() for name in names}
    missing = {name: where for name, where in lerobot_fields().items() if name not in documented}
    assert not missing, f"options of LeRobot's eval config missing from {DOC.name}'s table: {missing}"


def test_every_policy_type_field_is_covered() -> None:
    """The fields of each policy type (``n_action_steps``, ...) are one row: mapped to ``--policy-field``, which
    LeRobot's config class applies to the checkpoint's config."""
    from lerobot.configs.policies import PreTrainedConfig

    base = {f.name for f in dataclasses.fields(PreTrainedConfig)}
    row = next(cell for names, _, cell in table_rows() if "--policy.n_action_steps" in names)
    assert row.startswith("**mapped**") and "--policy-field" in row
    for name, cls in PreTrainedConfig.get_known_choices().items():
        assert {f.name for f in dataclasses.fields(cls)} - base, f"policy type {name} has no fields of its own"


def test_every_row_says_what_fasteval_does() -> None:
    for names, default, cell in table_rows():
        assert names and default, f"row {names}: an option and LeRobot's default"
        words = re.findall(r"\*\*([a-z ]+)\*\*", cell)
        assert words and all(w in WORDS for w in words), f"row {names}: {cell!r} names none of {WORDS}"


def test_each_row_word_is_what_the_rewrite_does() -> None:
    """Rows whose options fasteval refuses or accepts with no effect name exactly the rules of
    fasteval.doors.lerobot_options.RULES (or a policy field / a refused env type), and the rewrite
    does what the row says: a refused option exits 2 with its reason, a no-effect one prints a note."""
    from fasteval.doors.cli import main
    from fasteval.doors.compat import rewrite
    from fasteval.doors.lerobot_options import NO_EFFECT, REFUSED, RULES

    rows = {name: cell for names, _, cell in table_rows() for name in names}
    for name, rule in RULES.items():
        cell = rows[name]
        assert f"**{rule.kind}**" in cell, f"{name}: the table says {cell!r}, the code {rule.kind!r}"
        value = "sample" if not rule.default_values else "2"
        notes: list[str] = []
        args = ["--env.type=pusht", f"{name}={value}"]
        if rule.kind == REFUSED:
            with pytest.raises(ValueError, match="not supported"):
                rewrite(args, main.params, notes.append)
        else:
            assert rule.kind == NO_EFFECT
            rewrite(args, main.params, notes.append)
            assert any("no effect" in n for n in notes), (name, notes)
        if rule.default_values:  # LeRobot's default value: accepted, silently (it changes nothing)
            notes.clear()
            rewrite(["--env.type=pusht", f"{name}={rule.default_values[0]}"], main.params, notes.append)
            assert notes == []
    for name in ("--policy.n_action_steps", "--policy.temporal_ensemble_coeff", "--policy.n_obs_steps"):
        assert f"--policy-field={name[len('--policy.'):]}=3" in rewrite([f"{name}=3"], main.params).args
    for env_type in ("isaaclab_arena", "gym_manipulator"):
        with pytest.raises(ValueError, match="not supported"):
            rewrite([f"--env.type={env_type}"], main.params)


def test_the_image_sizes_in_the_table_are_lerobots_defaults() -> None:
    """The default column of ``--env.observation_height``/``width`` names each type's LeRobot default (issue 42: the
    docs said 128 px for LIBERO, where LeRobot 0.6.1's ``LiberoEnv`` renders 360 px)."""
    from lerobot.envs.configs import EnvConfig

    row = next(default for names, default, _ in table_rows() if "--env.observation_height" in names)
    listed = {t: (int(h), int(w)) for t, h, w in re.findall(r"`(\w+)` (\d+), (\d+)", row)}
    assert {"pusht", "aloha", "libero"} <= set(listed)
    choices = EnvConfig.get_known_choices()
    for env_type, size in listed.items():
        cls = choices[env_type]
        assert size == (cls.observation_height, cls.observation_width), env_type
