"""Capabilities are declared, not probed (issue 29).

* A runner declares what it can do in one frozen :class:`~fasteval.core.capabilities.Capabilities`; core
  reads that value, and the loop, the pipeline check and the capture decision follow it.
* ``getattr(obj, "name", default)`` capability probes are fewer than 5 in the repository (``src/``,
  ``benchmarks/``, ``tests/``, ``scripts/``, ``examples/``), each with a comment on its line or the line
  above saying why it is one (``# probe:``). Dunder reads (``__name__``, ``__dict__``...) are Python's
  introspection, not capabilities, and are not counted.
"""

from __future__ import annotations

import ast
import dataclasses
import sys
from pathlib import Path
from types import SimpleNamespace

import gymnasium as gym
import pytest
import torch

from fasteval import evaluate
from fasteval.core.accel import PER_SLOT_STATE, PYTHON_STATE, TASKS, capture_blockers, capture_decision
from fasteval.core.capabilities import NO_RESET, PER_ENV, WAVE, Capabilities
from fasteval.core.policy import PolicyRunner
from fasteval.testing import ParityPolicy, StepCounterPolicy

ROOT = Path(__file__).resolve().parents[1]
SCANNED = [ROOT / "src" / "fasteval", *(ROOT / name for name in ("benchmarks", "tests", "scripts", "examples"))]
MAX_PROBES = 4
KA = "fasteval/KnownAnswer-v0"


def _probes() -> list[tuple[str, int, str, bool]]:
    """Every ``getattr(x, "literal", default)`` in the scanned folders (not dunders): (file, line, name, commented)."""
    out = []
    for path in sorted(p for folder in SCANNED for p in folder.rglob("*.py")):
        text = path.read_text()
        lines = text.splitlines()
        for node in ast.walk(ast.parse(text)):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
                    and len(node.args) == 3 and isinstance(node.args[1], ast.Constant)
                    and isinstance(node.args[1].value, str) and not node.args[1].value.startswith("__")):
                near = " ".join(lines[max(0, node.lineno - 2):node.lineno])
                out.append((path.name, node.lineno, node.args[1].value, "# probe:" in near))
    return out


def test_capability_probes_are_few_and_each_says_why():
    probes = _probes()
    assert len(probes) <= MAX_PROBES, f"{len(probes)} getattr probes (at most {MAX_PROBES}): {probes}"
    uncommented = [p for p in probes if not p[3]]
    assert not uncommented, f"getattr probes without a '# probe:' comment saying why: {uncommented}"


def test_the_probe_scan_sees_a_probe(tmp_path, monkeypatch):
    """The scan is not vacuous: a planted probe is found and counted as uncommented."""
    planted = tmp_path / "fasteval"
    planted.mkdir()
    (planted / "m.py").write_text("x = getattr(object(), 'flag', False)\ny = getattr(object(), '__name__', '')\n")
    monkeypatch.setattr(sys.modules[__name__], "SCANNED", [planted])
    assert _probes() == [("m.py", 1, "flag", False)]


# -- the declared value ----------------------------------------------------------------------------

def test_capabilities_are_frozen_and_checked():
    caps = Capabilities()
    with pytest.raises(dataclasses.FrozenInstanceError):
        caps.chunks = True  # type: ignore[misc]
    with pytest.raises(ValueError, match="reset_kind"):
        Capabilities(reset_kind="sometimes")
    assert not caps.per_slot_state and Capabilities(reset_kind=PER_ENV).per_slot_state


class WaveReset(torch.nn.Module):
    def reset(self):
        pass

    def forward(self, obs):
        return obs[:, 2].long()


class Reads(ParityPolicy):
    def reads_observation(self, rows):
        return True


@pytest.mark.parametrize("policy, expected", [
    (ParityPolicy(), Capabilities()),
    (StepCounterPolicy(), Capabilities(reset_kind=PER_ENV, policy_reset_kind=PER_ENV)),
    (WaveReset(), Capabilities(reset_kind=WAVE, policy_reset_kind=WAVE, continuous=False)),
    (Reads(), Capabilities(skips_observation=True)),
])
def test_a_runner_declares_what_its_policy_can_do(policy, expected):
    assert PolicyRunner(policy, gym.spaces.Discrete(2), 4).capabilities == expected


def test_the_capture_decision_is_one_function_of_the_declared_value():
    policy, cpu = ParityPolicy(), torch.device("cpu")
    cuda = torch.device("cuda", 0)
    assert capture_decision(Capabilities(), policy, False, cuda).status == "off"
    assert capture_decision(Capabilities(), policy, None, cpu).status == "off"
    assert capture_decision(Capabilities(), policy, True, cpu).status == "eager (no CUDA device)"
    from fasteval.testing.fake_cuda import FakeCuda

    with FakeCuda():
        assert capture_decision(Capabilities(), policy, True, cuda).status is None
        assert capture_decision(Capabilities(tasks=True), policy, True, cuda).status == f"eager ({TASKS})"
        queued = Capabilities(reset_kind=PER_ENV, chunks=True)
        assert capture_decision(queued, policy, True, cuda).status == f"eager ({PER_SLOT_STATE})"
        assert capture_decision(queued, policy, True, cuda, whole_chunks=True).status is None

        class Counts(ParityPolicy):
            calls = 0

            def forward(self, obs):
                self.calls += 1
                return super().forward(obs)

        counting = Counts()
        probe = (counting, torch.zeros(2, 3))
        assert capture_decision(Capabilities(), counting, True, cuda, probe=probe).status == f"eager ({PYTHON_STATE})"
        counting.calls = 0  # refused before the probe: the probe call is not made
        assert capture_decision(Capabilities(tasks=True), counting, True, cuda, probe=probe).status.startswith("eager")
        assert counting.calls == 0
    assert capture_blockers(Capabilities(policy_reset_kind=NO_RESET, reset_kind=PER_ENV), policy, whole_chunks=True) == []


def test_the_loop_binds_what_the_capabilities_say():
    """A runner that wants the active slots is told them before each call, one that does not is never told;
    the watchdog is armed around the call only with a guard."""
    from fasteval.core.loop import StepContext, _actions_copy, _policy_call
    from fasteval.core.watchdog import Watchdog

    told: list[list[int]] = []
    obs = torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]])
    for wants in (False, True):
        for guard in (None, (5.0, "policy", "the policy")):
            told.clear()
            runner = PolicyRunner(ParityPolicy(), gym.spaces.Discrete(2), 2)
            runner.capabilities = dataclasses.replace(runner.capabilities, wants_active=wants)
            runner.note_active = told.append  # type: ignore[method-assign]
            runner.dry_run(obs)
            watchdog = Watchdog()
            armed = []
            watchdog.arm = armed.append  # type: ignore[method-assign]
            envs = SimpleNamespace(step_send=None, step_recv=None, reset_slots=None, failures=[])
            ctx = StepContext(envs=envs, runner=runner, h2d=None, d2h=None, ledger=None, faults=None,  # type: ignore[arg-type]
                              timers=None, step_bookkeeping=None, max_steps=0, check_actions=None,  # type: ignore[arg-type]
                              on_finished=lambda rows: None, watchdog=watchdog, policy_guard=guard)
            actions = _policy_call(ctx, obs)([0, 1])
            assert actions.tolist() == [1, 0]
            assert told == ([[0, 1]] if wants else [])
            assert armed == ([guard] if guard else [])
            calls = watchdog._calls
            _actions_copy(ctx, lambda a: a.numpy())(actions)
            assert watchdog._calls == calls + (1 if guard else 0)  # disarmed after the copy, with a guard only
