"""The trust rule (docs/security.md) on the kinds of reference a policy or env can be."""

from __future__ import annotations

import pytest

from fasteval.types.errors import UserInputError
from fasteval.types.trust import COMMAND_LINE, check_env_ref, check_policy_ref, is_code_ref


@pytest.mark.parametrize("ref", ["ws://127.0.0.1:8000", "openpi+ws://localhost:9000", "hf://lerobot/diffusion_pusht"])
def test_urls_name_servers_or_checkpoints_not_local_code(ref):
    """A served policy or a hub checkpoint runs no local code, so it needs no flag (its colons are a URL's)."""
    assert not is_code_ref(ref)
    check_policy_ref(ref, COMMAND_LINE, trust_remote_code=False)
    check_policy_ref(ref, "config file 'x.json'", trust_remote_code=False)


@pytest.mark.parametrize("ref, needle", [("./env.py:make", "from a file"), ("os:system", "not an env constructor")])
def test_code_refs_still_need_the_flag(ref, needle):
    assert is_code_ref(ref)
    with pytest.raises(UserInputError, match=needle):
        check_env_ref(ref, COMMAND_LINE, trust_remote_code=False)
    check_env_ref(ref, COMMAND_LINE, trust_remote_code=True)


# -- env namespaces: a file may make fasteval import only an installed gymnasium plugin (issue 32) -------------

import json
import os
import subprocess
import sys
from pathlib import Path

from fasteval.types.trust import ENV_PLUGINS, env_namespace, plugin_import_allowed


def _plant_module(tmp_path: Path) -> tuple[str, Path, dict[str, str]]:
    """A module on the subprocess's path that leaves a mark when it is imported (top-level code runs)."""
    name = f"planted_{tmp_path.name.replace('-', '_')}"
    mark = tmp_path / "imported.txt"
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / f"{name}.py").write_text(f"open({str(mark)!r}, 'w').write('ran')\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(lib), env.get("PYTHONPATH", "")])
    return name, mark, env


def _fasteval(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fasteval.doors.cli", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def test_a_config_file_cannot_import_a_module_through_an_env_namespace(tmp_path):
    name, mark, env = _plant_module(tmp_path)
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"env": f"{name}/Foo-v0", "policy": "zero", "n_episodes": 1}))
    refused = _fasteval(["--config", str(cfg), "-o", str(tmp_path / "run")], env, tmp_path)
    assert refused.returncode == 2, refused.stderr
    assert not mark.exists(), "the file made fasteval import the module"
    assert f"namespace {name!r}" in refused.stderr and "--trust-remote-code" in refused.stderr
    assert not (tmp_path / "run").exists()
    # the command line may: typed there, or granted by the flag (the module runs; gymnasium then finds no env)
    typed = _fasteval(["--env", f"{name}/Foo-v0", "-n", "1", "-o", str(tmp_path / "run2")], env, tmp_path)
    assert typed.returncode == 2 and mark.exists(), typed.stderr
    mark.unlink()
    granted = _fasteval(["--config", str(cfg), "--trust-remote-code", "-o", str(tmp_path / "run3")], env, tmp_path)
    assert granted.returncode == 2 and mark.exists(), granted.stderr


def test_a_sweep_file_cannot_import_a_module_through_an_env_namespace(tmp_path):
    name, mark, env = _plant_module(tmp_path)
    spec = tmp_path / "sweep.json"
    spec.write_text(json.dumps({"name": "t", "episodes": 1, "seeds": [0],
                                "policies": [{"name": "zero", "ref": "zero"}],
                                "envs": [{"name": "evil", "id": f"{name}/Foo-v0"}]}))
    refused = _fasteval(["sweep", str(spec), "-o", str(tmp_path / "sw"), "-w", "1", "--no-report"], env, tmp_path)
    assert refused.returncode == 2, refused.stderr
    assert not mark.exists(), "the sweep file made fasteval import the module"
    assert f"namespace {name!r}" in refused.stderr


def test_an_edited_manifest_cannot_import_a_module_on_resume(tmp_path):
    name, mark, env = _plant_module(tmp_path)
    run = tmp_path / "run"
    first = _fasteval(["--env", "CartPole-v1", "-p", "zero", "-n", "2", "-o", str(run), "--no-report"], env, tmp_path)
    assert first.returncode == 0, first.stderr
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["what"]["env"] = f"{name}/Foo-v0"  # what is evaluated: the half a resume reads back
    manifest["status"] = "interrupted"
    (run / "manifest.json").write_text(json.dumps(manifest))
    resumed = _fasteval(["--resume", str(run)], env, tmp_path)
    assert resumed.returncode == 2, resumed.stderr
    assert not mark.exists(), "the manifest made fasteval import the module"
    assert f"namespace {name!r}" in resumed.stderr and "--trust-remote-code" in resumed.stderr


def test_namespaces_a_file_may_name():
    assert env_namespace("gym_pusht/PushT-v0") == "gym_pusht" and env_namespace("CartPole-v1") is None
    assert env_namespace("ws://host:1/x") is None and env_namespace("pkg.mod:make") is None
    assert plugin_import_allowed("phys2d")  # registered already: nothing to import
    assert all(plugin_import_allowed(ns) for ns in ENV_PLUGINS)
    assert not plugin_import_allowed("this") and not plugin_import_allowed("antigravity")
    check_env_ref("gym_pusht/PushT-v0", "config file 'x.json'", trust_remote_code=False)
    check_env_ref("this/Foo-v0", COMMAND_LINE, trust_remote_code=False)
    with pytest.raises(UserInputError, match="not an installed gymnasium plugin"):
        check_env_ref("this/Foo-v0", "sweep file 'x.yaml'", trust_remote_code=False)
    check_env_ref("this/Foo-v0", "sweep file 'x.yaml'", trust_remote_code=True)


def test_the_trusted_plugins_are_the_ones_the_env_layer_imports():
    """Every plugin the docs let a file name has its module in the env layer's table, and the docs list them."""
    from fasteval.robot.env_kinds import PLUGINS

    assert ENV_PLUGINS == set(PLUGINS)
    doc = (Path(__file__).parents[1] / "docs" / "security.md").read_text()
    assert all(f"`{ns}`" in doc for ns in ENV_PLUGINS)


def test_a_declared_gymnasium_plugin_may_be_named_by_a_file_and_is_loaded_in_its_namespace(tmp_path, monkeypatch):
    """A package that declares itself in gymnasium's ``gymnasium.envs`` entry points is an installed plugin: a
    file may name its namespace, and it is loaded as gymnasium 0.29 loaded plugins (its function, called
    inside ``namespace(name)``)."""
    import gymnasium as gym

    from fasteval.robot.env_kinds import import_env_namespace

    ns, module = f"DeclaredNs{tmp_path.name[-6:].replace('-', '')}", f"declared_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{module}.py").write_text(
        "import gymnasium as gym\n"
        "def register():\n"
        "    gym.register(id='Thing-v0', entry_point='fasteval.testing.envs:KnownAnswerEnv')\n")
    info = tmp_path / f"{module}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[gymnasium.envs]\n{ns} = {module}:register\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert plugin_import_allowed(ns) and not plugin_import_allowed(ns + "X")
    check_env_ref(f"{ns}/Thing-v0", "config file 'x.json'", trust_remote_code=False)
    try:
        import_env_namespace(f"{ns}/Thing-v0")
        assert f"{ns}/Thing-v0" in gym.registry
    finally:
        gym.registry.pop(f"{ns}/Thing-v0", None)
