"""LIBERO's hard reset without recompiling: the compiled model and its render context kept while the XML is the same.

robosuite's hard reset (LIBERO's default through LeRobot's ``LiberoEnv``, ``hard_reset=True``) frees the simulation
(its ``MjSim``, with a ``gc.collect()``), rebuilds the task's model objects, writes their XML, compiles it
(``MjModel.from_xml_string``) and makes a new offscreen render context (a GL context and MuJoCo's ``MjrContext``,
which uploads every mesh and texture). Profiled on the 2-core development machine (one libero_spatial reset,
128 px, loaded): of 18.5 s, the render context took 4.9 s, the compile 1.3 s, the free 1.0 s; the settle steps'
renders (skipped by :mod:`fasteval.robot.env_kinds.unread`) most of the rest. The XML is byte-identical from reset to
reset of one env (LIBERO places objects by setting the state after the compile, never in the XML).

**Declared for LIBERO** (LeRobot's ``LiberoEnv`` as :func:`fasteval.robot.lerobot.envs.make_env` builds it, both
LIBERO types): :class:`KeptModel` shadows the robosuite env's ``_destroy_sim`` and ``_initialize_sim`` on the
instance. A hard reset still rebuilds the model objects and writes the XML; when that XML (after robosuite's XML
processor) is byte-identical to the one compiled last, the simulation is kept with **a fresh copy of the model as it
was compiled** (``copy.copy`` of a pristine ``MjModel``: whatever an episode changed in the model is gone) and **a
fresh ``MjData``** (as a new compile's), and the render context is kept (re-pointed at them); otherwise it compiles
as robosuite does. So every hard reset starts from the state a compile would give: LeRobot's ``hard_reset``
semantics are kept (tests/lerobot/test_model_reuse.py: every observation read, rewards, success and lengths bitwise
equal with and without, at several batch sizes and in the pool). The first hard reset of an env compiles (the
pristine copy is taken then); every later one reuses.

**Off by default**: ``FASTEVAL_MODEL_REUSE=1`` turns it on. With it on, fasteval's episodes are bitwise those it
gives with it off (the test above), and the differential test's ``libero-witness-reuse`` case (a dense witness reward,
an env's second hard reset reusing) equals ``lerobot-eval``'s, which compiles every time. An earlier round's witness
run found one LIBERO ACT episode that differed, with the reuse among that round's other LIBERO changes; its cause was
never separated, and it has not come back. The gain is small in a full-length sitting (benchmarks/RESULTS.md: sync
4.05x against 3.79x, the pool unchanged), so every hard reset compiles by default, as robosuite does.
``FASTEVAL_NO_MODEL_REUSE=1`` keeps it off whatever else is set. The run says which in ``meta["reset_reuse"]``
(:func:`reuse_decision`).
"""

from __future__ import annotations

import copy
import os
from typing import Any, Mapping

OFF_VARIABLE = "FASTEVAL_NO_MODEL_REUSE"
"""Set to ``1`` to compile the model on every hard reset (robosuite's own way), whatever :data:`ON_VARIABLE` says."""
ON_VARIABLE = "FASTEVAL_MODEL_REUSE"
"""Set to ``1`` to reuse the compiled model (off by default: see the module docstring)."""
DEFAULT_OFF = (f"off (the default: every hard reset compiles, as robosuite does; {ON_VARIABLE}=1 reuses the compiled "
               f"model)")
ON = ("on: LIBERO's hard reset keeps the compiled model and render context while the model XML is byte-identical "
      "(each reset starts from a fresh copy of the model as compiled and fresh MjData)")


def enabled(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the compiled model is reused (not turned off by :data:`OFF_VARIABLE`)."""
    environ = os.environ if environ is None else environ
    return environ.get(OFF_VARIABLE, "") in ("", "0") and environ.get(ON_VARIABLE, "") not in ("", "0")


def reuse_decision(libero: bool, environ: Mapping[str, str] | None = None) -> str | None:
    """``meta["reset_reuse"]`` of a run: :data:`ON`, ``off (why)``, or ``None`` for an env that is not LIBERO."""
    if not libero:
        return None
    environ = os.environ if environ is None else environ
    if enabled(environ):
        return ON
    return f"off ({OFF_VARIABLE}={environ[OFF_VARIABLE]})" if environ.get(OFF_VARIABLE, "") not in ("", "0") else DEFAULT_OFF


class KeptModel:
    """The kept simulation of one robosuite env (see the module docstring); ``compiled`` / ``reused`` count the hard
    resets' simulations built each way."""

    def __init__(self, robosuite_env: Any):
        self.env = robosuite_env
        self.xml: str | None = None
        self.pristine: Any = None
        self.kept: Any = None
        self.closing = False
        self.compiled = self.reused = 0
        self._destroy, self._initialize, self._close = (robosuite_env._destroy_sim, robosuite_env._initialize_sim,
                                                        robosuite_env.close)
        robosuite_env._destroy_sim = self.destroy_sim
        robosuite_env._initialize_sim = self.initialize_sim
        robosuite_env.close = self.close

    def destroy_sim(self) -> None:
        """Keep the simulation for the next ``_initialize_sim`` (which decides), once a pristine model is known."""
        env = self.env
        if self.closing or self.pristine is None or env.sim is None:
            self._drop_kept()
            self._destroy()
            return
        self._drop_kept()
        self.kept, env.sim = env.sim, None

    def initialize_sim(self, xml_string: str | None = None) -> None:
        env = self.env
        raw = xml_string if xml_string else env.model.get_xml()
        xml = env._xml_processor(raw) if env._xml_processor is not None else raw
        kept, self.kept = self.kept, None
        if kept is not None and xml == self.xml:
            self._renew(kept)
            env.sim = kept
            kept.forward()  # as _initialize_sim does after its compile
            env.initialize_time(env.control_freq)
            self.reused += 1
            return
        if kept is not None:
            kept.free()
        self._initialize(raw)  # robosuite's compile (it applies the XML processor itself)
        self.xml, self.pristine = xml, copy.copy(env.sim.model._model)
        self.compiled += 1

    def _renew(self, sim: Any) -> None:
        """``sim`` with a fresh copy of the pristine model and a fresh ``MjData``; its render context re-pointed."""
        from robosuite.utils.binding_utils import MjData, MjModel

        sim.model = MjModel(copy.copy(self.pristine))
        sim.data = MjData(sim.model)
        context = sim._render_context_offscreen
        if context is not None:
            context.model, context.data = sim.model, sim.data
            context.gl_ctx.make_current()  # as a new render context is made current (robosuite renders in the current one)

    def _drop_kept(self) -> None:
        kept, self.kept = self.kept, None
        if kept is not None:
            kept.free()

    def close(self) -> None:
        self.closing = True
        self._drop_kept()
        self._close()


KEPT = "_fasteval_kept_model"
"""Where a robosuite env holds its :class:`KeptModel` (in its ``__dict__``: it lives and dies with the env)."""


def keep_compiled_model(libero: Any) -> None:
    """Reuse the compiled model of LeRobot ``LiberoEnv`` ``libero`` (its robosuite env is built on first use: the hooks
    go in when it is, and again after a close rebuilt it); nothing when turned off (:data:`OFF_VARIABLE`)."""
    if not enabled() or "_ensure_env" in vars(libero):
        return
    ensure = libero._ensure_env

    def ensure_kept() -> None:
        ensure()
        robosuite_env = libero._env.env
        if KEPT not in vars(robosuite_env):
            vars(robosuite_env)[KEPT] = KeptModel(robosuite_env)

    libero._ensure_env = ensure_kept


def kept_model_of(libero: Any) -> KeptModel | None:
    """The :class:`KeptModel` of ``libero``'s robosuite env, or ``None`` (for tests and the benchmark's counts)."""
    return None if libero._env is None else vars(libero._env.env).get(KEPT)
