"""An env's protocol card (LIBERO's: fasteval.robot.lerobot.libero_protocol) on the run page, and LIBERO's offline
setup and init-state rule where no LIBERO is installed (the LIBERO runs are tests/lerobot/test_libero.py)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from fasteval.render.html.run_facts import protocol_pairs


def test_protocol_rows_on_the_page() -> None:
    rows = dict(protocol_pairs({"num_steps_wait": 10, "hard_reset": True, "cameras": ["agentview", "wrist"],
                                "versions": {"hf-libero": "0.1.4", "missing": None}, "gl_renderer": "llvmpipe"}))
    assert rows == {"protocol: num steps wait": "10", "protocol: hard reset": "True",
                    "protocol: cameras": "agentview, wrist", "protocol: versions": "hf-libero 0.1.4",
                    "protocol: gl renderer": "llvmpipe"}
    assert protocol_pairs(None) == [] and protocol_pairs("not a card") == []


def test_a_run_page_shows_the_card(tmp_path) -> None:
    from fasteval.doors.cli import main
    from fasteval.render.html import write_run_report

    out = tmp_path / "run"
    result = CliRunner().invoke(main, ["--env", "fasteval/KnownAnswer-v0", "-n", "2", "-o", str(out), "--no-report"])
    assert result.exit_code == 0, result.output
    info = json.loads((out / "eval_info.json").read_text())
    info["meta"]["protocol"] = {"num_steps_wait": 10, "init_state_rule": "the episode reset with seed s starts from "
                                                                         "init state (s - 0) mod 50"}
    (out / "eval_info.json").write_text(json.dumps(info))
    page = write_run_report(out).read_text()
    assert "protocol: num steps wait" in page and "(s - 0) mod 50" in page


def test_init_state_rule_and_setup_without_libero(tmp_path, monkeypatch) -> None:
    from fasteval.robot.lerobot.libero import init_state_index, is_libero_type, stale_config

    assert [init_state_index(1000 + i, 0, 50) for i in (0, 1, 49, 50)] == [0, 1, 49, 0]
    assert init_state_index(7 + 3, 7, 50) == 3
    assert is_libero_type("libero") and is_libero_type("libero_plus") and not is_libero_type("pusht")
    config = tmp_path / "config.yaml"
    config.write_text(f"bddl_files: {tmp_path / 'gone'}\ninit_states: {tmp_path}\n")
    assert "bddl_files folder" in stale_config(config)
    config.write_text(f"bddl_files: {tmp_path}\ninit_states: {tmp_path}\n")
    assert stale_config(config) is None
