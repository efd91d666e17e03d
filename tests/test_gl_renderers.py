"""The GL renderer of every process that hosts a run's envs (issue 40): the main process of a sync run, each env
worker of a pool, in ``meta["gl_renderers"]`` and in LIBERO's protocol card. The GL query is faked: env kinds whose
``renderer`` answers with the process id (the real query, a child process making a MuJoCo context, is
tests/lerobot/test_libero.py's)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping

import pytest

from fasteval.robot.env_kinds import RobotEnvKinds, renders_with_gl
from fasteval.robot.lerobot.envs import ENV_REF
from fasteval.run.engine import Engine, FastevalParts
from fasteval.types.spec import EvalSpec

KNOWN = "fasteval/KnownAnswer-v0"


@dataclass(frozen=True)
class FakeGLKinds(RobotEnvKinds):
    """fasteval's env kinds, with a GL query that answers which process asked (picklable: workers get it)."""

    def renderer(self, env: str, kwargs: Mapping[str, Any]) -> str | None:
        return f"FakeGL in pid {os.getpid()}"


class FakeGLParts(FastevalParts):
    env_kinds = FakeGLKinds()


def _run(vectorization: str, workers: int | None = None) -> dict[str, Any]:
    spec = EvalSpec(env=KNOWN, policy="fasteval.testing.policies:ParityPolicy", n_episodes=4, batch_size=2,
                    vectorization=vectorization, workers=workers)
    with Engine(spec, parts=FakeGLParts()) as engine:
        return engine.run().meta


def test_a_sync_run_records_the_main_process_renderer() -> None:
    meta = _run("sync")
    assert meta["gl_renderers"] == {"main": f"FakeGL in pid {os.getpid()}"}


def test_a_pool_records_each_workers_renderer() -> None:
    meta = _run("async", workers=2)
    renderers = meta["gl_renderers"]
    assert sorted(renderers) == ["worker 0", "worker 1"]
    pids = {value.rsplit(" ", 1)[1] for value in renderers.values()}
    assert len(pids) == 2 and str(os.getpid()) not in pids  # asked in each worker, not in the main process


def test_envs_without_gl_record_nothing() -> None:
    spec = EvalSpec(env=KNOWN, policy="fasteval.testing.policies:ParityPolicy", n_episodes=2, batch_size=2)
    with Engine(spec) as engine:
        assert "gl_renderers" not in engine.run().meta


def test_which_envs_render_with_gl() -> None:
    assert renders_with_gl(ENV_REF, {"type": "libero", "task": "libero_spatial"})
    assert renders_with_gl(ENV_REF, {"type": "metaworld"})
    assert not renders_with_gl(ENV_REF, {"type": "pusht"})
    assert renders_with_gl("HalfCheetah-v5", {"render_mode": "rgb_array"})
    assert not renders_with_gl("HalfCheetah-v5", {})  # no frames asked for: nothing renders
    assert not renders_with_gl("CartPole-v1", {"render_mode": "rgb_array"})  # pygame, not GL
    assert not renders_with_gl(object(), {})


def test_the_robot_kinds_ask_the_gl_query_only_for_envs_that_render(monkeypatch) -> None:
    from fasteval.robot.env_kinds import ENV_KINDS, renderer

    asked = []
    monkeypatch.setattr(renderer, "gl_renderer", lambda backend: asked.append(backend) or "llvmpipe (faked)")
    monkeypatch.setenv("MUJOCO_GL", "egl")
    assert ENV_KINDS.renderer(ENV_REF, {"type": "libero"}) == "llvmpipe (faked)" and asked == ["egl"]
    assert ENV_KINDS.renderer("CartPole-v1", {}) is None and asked == ["egl"]


def test_the_card_gets_every_process_renderer_and_a_workers_software_renderer_is_warned(monkeypatch) -> None:
    from fasteval.robot.lerobot import libero_protocol

    nvidia, llvmpipe = "NVIDIA H200/PCIe/SSE2 (OpenGL 4.6.0)", "llvmpipe (LLVM 15.0.6, 256 bits) (OpenGL 4.5)"
    monkeypatch.setattr(libero_protocol, "gpu_present", lambda: True)
    card = libero_protocol.with_renderers({"gl_renderer": nvidia}, {"worker 0": nvidia, "worker 1": llvmpipe})
    assert card["gl_renderers"] == {"worker 0": nvidia, "worker 1": llvmpipe}
    assert card["gl_warning"].startswith("worker 1: MuJoCo renders with a software renderer (llvmpipe")
    quiet = libero_protocol.with_renderers({"gl_renderer": nvidia}, {"worker 0": nvidia})
    assert "gl_warning" not in quiet
    monkeypatch.setattr(libero_protocol, "gpu_present", lambda: False)
    assert "gl_warning" not in libero_protocol.with_renderers({}, {"main": llvmpipe})


def test_a_pool_card_carries_the_workers_renderers(monkeypatch) -> None:
    """The run layer adds the processes' renderers to the protocol card (faked card: no LIBERO here)."""
    monkeypatch.setattr(FakeGLParts, "env_meta", lambda self, spec: {"protocol": {"num_steps_wait": 10}})
    meta = _run("async", workers=2)
    assert meta["protocol"]["num_steps_wait"] == 10
    assert meta["protocol"]["gl_renderers"] == meta["gl_renderers"] and len(meta["gl_renderers"]) == 2


@pytest.mark.parametrize("backend", ["egl"])
def test_the_real_gl_query_names_a_renderer_and_its_vendor(backend) -> None:
    pytest.importorskip("mujoco")
    pytest.importorskip("OpenGL")
    from fasteval.robot.env_kinds.renderer import gl_renderer

    text = gl_renderer(backend)
    if text.startswith("unknown"):
        pytest.skip(f"no {backend} GL context on this machine: {text}")
    assert "(OpenGL " in text and "; vendor " in text
