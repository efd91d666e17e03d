"""The package root: what ``import fasteval`` does (and does not do) to the process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _python(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_import_fasteval_registers_no_env_and_fasteval_testing_does():
    out = _python("import gymnasium as gym, fasteval\n"
                  "before = [k for k in gym.registry if k.startswith('fasteval/')]\n"
                  "import fasteval.testing\n"
                  "print(before, [k for k in gym.registry if k.startswith('fasteval/')])")
    assert out == "[] ['fasteval/KnownAnswer-v0', 'fasteval/BusyKnownAnswer-v0']"


def test_the_known_answer_id_builds_in_a_fresh_process_without_importing_fasteval_testing():
    """The env layer maps the ``fasteval`` namespace to ``fasteval.testing``: the id works from the
    command line and in every env worker, though ``import fasteval`` registers nothing."""
    out = _python("import sys\n"
                  "from fasteval.core.envs import EnvFactory\n"
                  "from fasteval.robot.env_kinds import ENV_KINDS\n"
                  "env = EnvFactory('fasteval/KnownAnswer-v0', kinds=ENV_KINDS)()\n"
                  "obs, _ = env.reset(seed=5)\n"
                  "print(env.spec.id, 'fasteval.testing' in sys.modules, obs.tolist())")
    assert out == "fasteval/KnownAnswer-v0 True [0.05154639109969139, 0.0, 1.0]"


def test_import_fasteval_keeps_its_public_names_and_no_old_paths():
    """``from fasteval import Evaluator, evaluate`` stays (docs/api.md); the 0.1.0 aliases of moved
    modules are gone (CHANGELOG.md lists the new homes)."""
    out = _python("import importlib.util, fasteval\n"
                  "print(sorted(fasteval.__all__), fasteval.Evaluator.__module__, fasteval.evaluate.__module__,\n"
                  "      importlib.util.find_spec('fasteval.results'), importlib.util.find_spec('fasteval.moved'))")
    assert out == ("['EvalResult', 'EvalSpec', 'Evaluator', 'FastevalError', '__version__', 'evaluate'] "
                   "fasteval.run.api fasteval.run.api None None")
