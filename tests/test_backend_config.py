"""A config file's backend keys (``backend``, ``address``, ``ray_workers``, ``num_cpus``, ``num_gpus``,
``ray_block``, ``ship_policy``; issue 43): bad values are refused with one line (exit 2) before anything runs,
the command line wins over the file, and sweeps (which keep their own backend) refuse a file's Ray backend.
The runs on Ray from a config are in tests/test_ray_many.py."""

import json

import pytest
from click.testing import CliRunner

from fasteval.doors.cli import main
from fasteval.run.config import BACKEND_DEFAULTS, ConfigError, backend_config, config_document
from fasteval.types.spec import EvalSpec

KA = "fasteval/KnownAnswer-v0"


@pytest.mark.parametrize("key, value, expected", [
    ("backend", "slurm", "expected local or ray"),
    ("ray_workers", 0, "expected an integer >= 1"),
    ("ray_workers", True, "expected an integer >= 1"),
    ("ray_block", 2.5, "expected an integer >= 1"),
    ("num_cpus", "two", "expected a number >= 0"),
    ("num_gpus", -1, "expected a number >= 0"),
    ("ship_policy", "yes", "expected true or false"),
    ("address", 7, "expected a Ray address string"),
    ("ray_policy_actors", 0, "expected an integer >= 1"),
])
def test_a_bad_backend_value_in_a_config_exits_2_with_one_line(tmp_path, key, value, expected):
    config = tmp_path / "run.json"
    config.write_text(json.dumps({"env": KA, "n_episodes": 2, key: value}))
    result = CliRunner().invoke(main, ["--config", str(config), "-o", str(tmp_path / "x"), "--no-report"])
    assert result.exit_code == 2, result.output
    line = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(line) == 1 and expected in line[0] and key in line[0] and repr(value) in line[0]
    assert not (tmp_path / "x").exists()


def test_the_backend_keys_are_checked_and_saved_for_a_ray_run_only():
    assert backend_config({"backend": "ray", "num_cpus": 1, "env": KA}) == {"backend": "ray", "num_cpus": 1.0}
    with pytest.raises(ConfigError):
        backend_config({"ray_workers": -3})
    spec = EvalSpec(env=KA)
    assert "backend" not in config_document(spec, None, backend=BACKEND_DEFAULTS)
    saved = config_document(spec, None, backend={**BACKEND_DEFAULTS, "backend": "ray", "ray_workers": 3})
    assert saved["backend"] == "ray" and saved["ray_workers"] == 3 and saved["ship_policy"] is True


def test_the_command_line_wins_over_the_files_backend(tmp_path):
    config = tmp_path / "run.json"
    config.write_text(json.dumps({"env": KA, "n_episodes": 3, "backend": "ray", "ray_workers": 2, "num_cpus": 0.5}))
    printed = CliRunner().invoke(main, ["--config", str(config), "--ray-workers", "5", "--print-config"])
    assert printed.exit_code == 0, printed.output
    doc = json.loads(printed.output[printed.output.index("{"):])
    assert doc["backend"] == "ray" and doc["ray_workers"] == 5 and doc["num_cpus"] == 0.5
    local = CliRunner().invoke(main, ["--config", str(config), "--backend", "local", "-o", str(tmp_path / "run"),
                                      "--no-report"])  # the file's Ray keys go with its backend: a local run
    assert local.exit_code == 0, local.output
    info = json.loads((tmp_path / "run" / "eval_info.json").read_text())
    assert info["meta"].get("backend") != "ray" and len(info["per_episode"]) == 3
    assert "backend" not in json.loads((tmp_path / "run" / "config.json").read_text())
    mixed = tmp_path / "mixed.json"  # Ray options with a local backend: refused as on the command line
    mixed.write_text(json.dumps({"env": KA, "n_episodes": 3, "ray_workers": 2}))
    refused = CliRunner().invoke(main, ["--config", str(mixed), "-o", str(tmp_path / "m")])
    assert refused.exit_code == 2 and "options of --backend ray" in refused.output


def test_a_sweep_refuses_a_configs_ray_backend():
    from fasteval.doors.sweep.spec import config_to_sweep_dict

    assert config_to_sweep_dict({"env": KA, "backend": "local"})["envs"][0]["id"] == KA
    with pytest.raises(ConfigError, match="backend"):
        config_to_sweep_dict({"env": KA, "backend": "ray"})
