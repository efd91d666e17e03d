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


def test_a_software_renderer_on_a_machine_with_a_gpu_is_warned_about(tmp_path) -> None:
    from fasteval.robot.env_kinds.renderer import gpu_present, is_software, renderer_warning

    llvmpipe = "llvmpipe (LLVM 15.0.6, 256 bits) (OpenGL 4.5 (Core Profile) Mesa 22.3.6)"
    nvidia = "NVIDIA H200/PCIe/SSE2 (OpenGL 4.6.0 NVIDIA 550.54.15)"
    warning = renderer_warning(llvmpipe, True, "egl")
    assert warning is not None and "llvmpipe" in warning and "MUJOCO_GL=egl" in warning and "NVIDIA" in warning
    assert renderer_warning(llvmpipe, False, "egl") is None  # no GPU: software rendering is all there is
    assert renderer_warning(nvidia, True, "egl") is None
    assert is_software("softpipe") and not is_software(nvidia)
    marker = tmp_path / "version"  # a fake driver file, and a fake nvidia-smi lookup
    assert not gpu_present([str(tmp_path / "none")], which=lambda name: None)
    marker.write_text("NVRM version: 550")
    assert gpu_present([str(marker)], which=lambda name: None)
    assert gpu_present([], which=lambda name: "/usr/bin/nvidia-smi")


def test_the_libero_card_carries_the_renderer_warning(monkeypatch) -> None:
    import warnings

    from fasteval.robot.lerobot import libero_protocol

    monkeypatch.setattr(libero_protocol, "_card", lambda key: {"num_steps_wait": 10})
    monkeypatch.setattr(libero_protocol, "gl_renderer", lambda backend: "llvmpipe (LLVM 15.0.6, 256 bits)")
    monkeypatch.setattr(libero_protocol, "gpu_present", lambda: True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        card = libero_protocol.protocol_card({"type": "libero"})
    assert "llvmpipe" in card["gl_warning"] and any("software renderer" in str(w.message) for w in caught)
    monkeypatch.setattr(libero_protocol, "gpu_present", lambda: False)
    assert "gl_warning" not in libero_protocol.protocol_card({"type": "libero"})
