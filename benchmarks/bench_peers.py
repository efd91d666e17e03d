"""fasteval against its peers, side by side in one process (issue 4).

Usage::

    python benchmarks/bench_peers.py [--batch-sizes 1,16,256] [--repeats 3] [--workloads ...]
                                     [--heavy auto|hopper|pendulum] [--json FILE] [--tiny] [--strict]

Workloads (one definition each, shared by every row; episode ``i`` has seed ``SEED + i``):

* ``cartpole-demo``: CartPole-v1, the demo MLP (``src/fasteval/assets/cartpole_mlp``): 500-step episodes;
* ``cartpole-zero``: CartPole-v1, the constant action 0: ~9-step episodes;
* ``hopper-mlp64`` (MuJoCo ``Hopper-v5``, when ``mujoco`` imports) or ``pendulum-mlp64``
  (``Pendulum-v1``): a 64x64 tanh MLP with a fixed random init (``torch.manual_seed(0)``).
  Hopper episodes end when the hopper falls, so they are short and of varying length.

Rows, for each workload and batch size ``b``:

* ``fasteval``: ``Evaluator(env, policy, batch_size=b, device="cpu", vectorization=MODE)``; the mode is
  chosen per case by an untimed calibration run of each mode in ``--fasteval-modes`` (async only up to
  ``--async-max-batch`` slots) and reported;
* ``classic loop``: ``benchmarks/classic_loop.py`` (LeRobot-style static batches on a ``SyncVectorEnv``);
* ``torchrl``: ``GymWrapper`` over a gymnasium ``SyncVectorEnv`` of b envs with autoreset disabled
  (TorchRL's preferred mode: it does the partial resets itself; the fastest TorchRL variant here, see
  RESULTS.md), ``td = env.reset(seed=SEED)`` then ``env.rollout(T, policy, auto_reset=False,
  tensordict=td, break_when_any_done=False)`` in chunks (each sized for the episodes still missing,
  so little is simulated past the N-th), under ``torch.no_grad()`` and deterministic exploration;
  the first N *complete* episodes, in the order they complete, are what it reports;
* ``sb3``: ``stable_baselines3.common.evaluation.evaluate_policy`` on a ``DummyVecEnv`` of b
  ``Monitor``-wrapped envs (``venv.seed(SEED)``), with a ``predict`` adapter around the same policy;
* ``env only (limit)``: b envs stepped in a tight loop, replaying fasteval's episodes (recorded
  untimed) with per-slot seeded resets: the same episodes with no policy;
* ``policy only (limit)``: forward passes at batch b on a fixed observation; shown as rows/s and as
  episodes/s at fasteval's mean episode length.

Every row uses the same policy object and torch with ``--torch-threads`` (1) intra-op threads.
All rows of a case are built and warmed up (untimed) first, then the repeats run with the rows
interleaved inside each repeat, so noise on a shared machine hits every row alike; tables show
medians, ratios are medians of per-repeat ratios. ``vs fasteval`` = row episodes/s / fasteval's.
The mean return of every peer is compared with fasteval's for the same seeds, and every
disagreement is explained. Exit code 0, unless ``--strict`` and a target fails.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

import fasteval  # noqa: E402
from fasteval.robot.policies import MLPPolicy, ZeroPolicy, load_checkpoint  # noqa: E402

from classic_loop import classic_eval, make_vector_env  # noqa: E402
from common import (  # noqa: E402
    Samples, calls_per_budget, check_line, env_only_replay, command_line, fmt_num, format_machine, machine_info, markdown_table,
    write_json,
)

DEMO_PATH = Path(fasteval.__file__).resolve().parent / "assets" / "cartpole_mlp"
WARMUP_SEED = 10_000_000
OVERHEAD_TARGET_US = 2.0
PEERS = ("classic loop", "torchrl", "sb3")
LIMITS = ("env only (limit)", "policy only (limit)")


# -- workloads -----------------------------------------------------------------------------------
@dataclass
class Workload:
    """One env + policy, and how many episodes a case of batch size b runs."""

    name: str
    env_id: str
    policy_desc: str
    make_policy: Callable[[gym.Env], Any]
    """``probe env -> policy object`` (an nn.Module, or ``None`` for the built-in zero policy)."""
    min_episodes: int
    batches_per_case: int
    tiny_episodes: int
    exact: bool
    """Returns must agree exactly (discrete argmax or constant actions on an exact env)."""
    env_kwargs: dict = field(default_factory=dict)

    def episodes(self, b: int, tiny: bool) -> int:
        if tiny:
            return max(self.tiny_episodes, b)
        return max(self.min_episodes, self.batches_per_case * b)


def demo_policy(_probe: gym.Env) -> torch.nn.Module:
    return load_checkpoint(DEMO_PATH).eval()


def mlp64(probe: gym.Env) -> torch.nn.Module:
    torch.manual_seed(0)
    return MLPPolicy(probe.observation_space.shape[0], probe.action_space.shape[0], (64, 64), "tanh", "tanh").eval()


def mujoco_available() -> bool:
    try:
        import mujoco  # noqa: F401

        gym.make("Hopper-v5").close()
        return True
    except Exception:
        return False


def workloads(heavy: str) -> dict[str, Workload]:
    out = {
        "cartpole-demo": Workload("cartpole-demo", "CartPole-v1", "demo MLP (cartpole_mlp, 500-step episodes)", demo_policy,
                                  16, 2, 4, exact=True),
        "cartpole-zero": Workload("cartpole-zero", "CartPole-v1", "zero (constant action 0, ~9-step episodes)",
                                  lambda probe: None, 500, 16, 8, exact=True),
    }
    if heavy == "auto":
        heavy = "hopper" if mujoco_available() else "pendulum"
    if heavy == "hopper":
        out["hopper-mlp64"] = Workload("hopper-mlp64", "Hopper-v5", "64x64 tanh MLP, random init (seed 0)", mlp64,
                                       200, 4, 8, exact=False)
    else:
        out["pendulum-mlp64"] = Workload("pendulum-mlp64", "Pendulum-v1", "64x64 tanh MLP, random init (seed 0)", mlp64,
                                         64, 2, 4, exact=False)
    return out


# -- what a row returns --------------------------------------------------------------------------
@dataclass
class RowRun:
    seconds: float
    returns: np.ndarray | None
    """float64[n] returns of the episodes the row reports (None for the limits)."""
    lengths: np.ndarray | None
    env_steps: int
    """Env steps simulated (padding, discarded and unfinished episodes included)."""
    facts: dict[str, Any] = field(default_factory=dict)


def policy_call(policy: Any) -> Callable[[torch.Tensor], torch.Tensor]:
    return policy.select_action if hasattr(policy, "select_action") else policy


class _Call(torch.nn.Module):
    """An nn.Module around any ``obs -> action`` callable (for TensorDictModule)."""

    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor]):
        super().__init__()
        self.fn = fn

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.fn(obs)


@dataclass
class Case:
    workload: Workload
    b: int
    n: int
    seed: int
    policy: Any
    """The policy object every peer runs (the live module, or a ZeroPolicy of b slots)."""
    fasteval_policy: Any
    """What fasteval gets: the same module, or ``"zero"`` (which builds the same ZeroPolicy)."""


# -- rows ----------------------------------------------------------------------------------------
class FastevalRow:
    name = "fasteval"

    def __init__(self, case: Case, modes: list[str], async_max_batch: int):
        self.case = case
        wl = case.workload
        candidates = [m for m in modes if m == "sync" or case.b <= async_max_batch] or ["sync"]
        self.calibration: dict[str, float] = {}
        best, best_rate = None, -1.0
        n_cal = min(case.n, max(2 * case.b, 8))
        for mode in candidates:
            ev = fasteval.Evaluator(wl.env_id, policy=case.fasteval_policy, batch_size=case.b, device="cpu",
                                    vectorization=mode, env_kwargs=wl.env_kwargs)
            ev.evaluate(n_episodes=min(case.n, max(2, case.b)), seed=WARMUP_SEED)  # build + dry run + warm-up
            res = ev.evaluate(n_episodes=n_cal, seed=WARMUP_SEED)
            rate = len(res.per_episode) / res.eval_s
            self.calibration[mode] = rate
            if rate > best_rate:
                if best is not None:
                    best.close()
                best, best_rate, self.mode = ev, rate, mode
            else:
                ev.close()
        self.evaluator = best
        self.mode_note = self.mode + (
            " (calibrated: " + ", ".join(f"{m} {r:.0f} ep/s" for m, r in self.calibration.items()) + ")"
            if len(self.calibration) > 1 else "")

    def run(self) -> RowRun:
        t0 = time.perf_counter()
        res = self.evaluator.evaluate(n_episodes=self.case.n, seed=self.case.seed)
        seconds = time.perf_counter() - t0
        lengths = res.column("length").astype(np.int64)
        return RowRun(seconds, res.column("sum_reward").astype(np.float64), lengths, int(lengths.sum()),
                      {"eval_s": res.eval_s, "timings": dict(res.timings)})

    def close(self) -> None:
        self.evaluator.close()


class ClassicRow:
    name = "classic loop"

    def __init__(self, case: Case):
        self.case = case
        self.venv = make_vector_env(case.workload.env_id, case.b, **case.workload.env_kwargs)
        classic_eval(self.venv, case.policy, min(case.b, 2), start_seed=WARMUP_SEED)  # warm-up
        self.mode_note = "SyncVectorEnv, static batches"

    def run(self) -> RowRun:
        t0 = time.perf_counter()
        res = classic_eval(self.venv, self.case.policy, self.case.n, start_seed=self.case.seed)
        seconds = time.perf_counter() - t0
        return RowRun(seconds, res.sum_reward, None, res.env_steps,
                      {"n_simulated_episodes": res.n_simulated_episodes, "n_batches": res.n_batches})

    def close(self) -> None:
        self.venv.close()


class TorchRLRow:
    name = "torchrl"

    def __init__(self, case: Case):
        from tensordict.nn import TensorDictModule
        from torchrl.envs import GymWrapper
        from torchrl.envs.utils import ExplorationType, set_exploration_type, step_mdp

        self.case = case
        self._step_mdp, self._explore = step_mdp, (set_exploration_type, ExplorationType.DETERMINISTIC)
        wl = case.workload
        venv = gym.make_vec(wl.env_id, num_envs=case.b, vectorization_mode="sync",
                            vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.DISABLED}, **wl.env_kwargs)
        self.env = GymWrapper(venv, categorical_action_encoding=True)
        self.policy = TensorDictModule(_Call(policy_call(case.policy)), in_keys=["observation"], out_keys=["action"])
        probe = gym.make(wl.env_id, **wl.env_kwargs)
        self.chunk_cap = int(probe.spec.max_episode_steps or 1000)
        probe.close()
        self.mode_note = "GymWrapper(SyncVectorEnv, autoreset off) + rollout"
        self._collect(min(case.b, 2), WARMUP_SEED)  # warm-up

    def _collect(self, n: int, seed: int) -> RowRun:
        b = self.case.b
        set_type, det = self._explore
        running_ret = np.zeros(b)
        running_len = np.zeros(b, dtype=np.int64)
        first = np.ones(b, dtype=bool)
        returns: list[float] = []
        lengths: list[int] = []
        seeded: dict[int, float] = {}
        est_len, steps = 8.0, 0
        t0 = time.perf_counter()
        with torch.no_grad(), set_type(det):
            td = self.env.reset(seed=seed)  # seeds envs with seed + i (vector env semantics)
            while len(returns) < n:
                chunk = int(min(self.chunk_cap, max(4, math.ceil((n - len(returns)) / b * est_len - running_len.mean()))))
                ro = self.env.rollout(chunk, self.policy, auto_reset=False, tensordict=td, break_when_any_done=False)
                rew = ro["next", "reward"].reshape(b, -1).to(torch.float64).numpy()
                done = ro["next", "done"].reshape(b, -1).numpy()
                steps += rew.size
                for t in range(rew.shape[1]):
                    running_ret += rew[:, t]
                    running_len += 1
                    for i in np.flatnonzero(done[:, t]).tolist():
                        returns.append(float(running_ret[i]))
                        lengths.append(int(running_len[i]))
                        if first[i]:
                            seeded[i] = float(running_ret[i])
                            first[i] = False
                        running_ret[i] = 0.0
                        running_len[i] = 0
                # Next chunk: enough steps for the episodes still missing at the mean length seen so far
                # (doubling while none has finished), less the steps the envs are already into their
                # episodes, so that little is simulated past the n-th episode.
                est_len = max(1.0, float(np.mean(lengths))) if lengths else 2.0 * est_len
                td = self._step_mdp(ro[..., -1])
        seconds = time.perf_counter() - t0
        return RowRun(seconds, np.asarray(returns[:n]), np.asarray(lengths[:n]), steps,
                      {"n_completed": len(returns), "seeded_first": seeded})

    def run(self) -> RowRun:
        return self._collect(self.case.n, self.case.seed)

    def close(self) -> None:
        self.env.close()


class _Predictor:
    """``predict`` for SB3's ``evaluate_policy``: numpy obs -> the policy -> numpy actions."""

    def __init__(self, call: Callable[[torch.Tensor], torch.Tensor]):
        self.call = call

    def predict(self, observation, state=None, episode_start=None, deterministic=False):
        with torch.inference_mode():
            action = self.call(torch.from_numpy(observation))
        return action.numpy(), None


class SB3Row:
    name = "sb3"

    def __init__(self, case: Case):
        from stable_baselines3.common.evaluation import evaluate_policy
        from stable_baselines3.common.monitor import Monitor
        from stable_baselines3.common.vec_env import DummyVecEnv

        self.case = case
        wl = case.workload
        self.evaluate_policy = evaluate_policy
        self.venv = DummyVecEnv([lambda: Monitor(gym.make(wl.env_id, **wl.env_kwargs)) for _ in range(case.b)])
        self.model = _Predictor(policy_call(case.policy))
        self.mode_note = "evaluate_policy, DummyVecEnv + Monitor"
        self._eval(min(case.b, 2), WARMUP_SEED)  # warm-up

    def _eval(self, n: int, seed: int) -> RowRun:
        monitors = [env for env in self.venv.envs]
        before = [len(m.get_episode_rewards()) for m in monitors]
        t0 = time.perf_counter()
        self.venv.seed(seed)
        rets, lens = self.evaluate_policy(self.model, self.venv, n_eval_episodes=n, deterministic=True,
                                          return_episode_rewards=True, warn=False)
        seconds = time.perf_counter() - t0
        lens = np.asarray(lens, dtype=np.int64)
        # Env i's first episode of this call is the seeded one (seed + i; DummyVecEnv.seed applies at the reset):
        # read it from env i's Monitor, whatever the order evaluate_policy collected episodes in.
        seeded = {i: float(m.get_episode_rewards()[k]) for i, (m, k) in enumerate(zip(monitors, before))
                  if len(m.get_episode_rewards()) > k}
        return RowRun(seconds, np.asarray(rets, dtype=np.float64), lens, int(lens.sum()), {"seeded_first": seeded})

    def run(self) -> RowRun:
        return self._eval(self.case.n, self.case.seed)

    def close(self) -> None:
        self.venv.close()


class EnvOnlyRow:
    """b envs in a tight loop, replaying fasteval's episodes (actions recorded untimed)."""

    name = "env only (limit)"

    def __init__(self, case: Case):
        self.case = case
        wl = case.workload
        rec = fasteval.evaluate(env=wl.env_id, policy=case.fasteval_policy, n_episodes=case.n, batch_size=case.b,
                                device="cpu", seed=case.seed, env_kwargs=wl.env_kwargs, return_episode_data=True)
        data = rec.episode_data
        ep = data["episode"].numpy()
        fr = data["step_count"].reshape(-1).numpy()
        order = np.lexsort((fr, ep))
        actions = data["action"].numpy()[order]
        self.lengths = rec.column("length").astype(np.int64)
        bounds = np.concatenate([[0], np.cumsum(self.lengths)])
        discrete = isinstance(gym.make(wl.env_id, **wl.env_kwargs).action_space, gym.spaces.Discrete)
        self.actions = [actions[bounds[i]:bounds[i + 1]] for i in range(case.n)]
        if discrete:
            self.actions = [a.tolist() for a in self.actions]
        self.envs = [gym.make(wl.env_id, **wl.env_kwargs) for _ in range(min(case.b, case.n))]
        probe = self.envs[0].observation_space
        self.obs_buf = np.zeros((len(self.envs), *probe.shape), dtype=probe.dtype)
        self.mode_note = "gym.make envs, replayed actions"
        self.replay(2, WARMUP_SEED)

    def replay(self, n: int, seed: int) -> tuple[float, list[int]]:
        return env_only_replay(self.envs, self.actions[:n], seed, self.obs_buf)

    def run(self) -> RowRun:
        seconds, lengths = self.replay(self.case.n, self.case.seed)
        lengths = np.asarray(lengths, dtype=np.int64)
        return RowRun(seconds, None, lengths, int(lengths.sum()),
                      {"exact_replay": bool(np.array_equal(lengths, self.lengths))})

    def close(self) -> None:
        for env in self.envs:
            env.close()


class PolicyOnlyRow:
    name = "policy only (limit)"

    def __init__(self, case: Case, budget_s: float):
        self.case, self.budget_s = case, budget_s
        probe = gym.make(case.workload.env_id, **case.workload.env_kwargs)
        probe.observation_space.seed(0)
        obs = np.stack([probe.observation_space.sample() for _ in range(case.b)])
        self.obs = torch.from_numpy(obs)
        self.call = policy_call(case.policy)
        self.mode_note = "forward passes on a fixed batch"
        with torch.inference_mode():
            for _ in range(20):
                self.call(self.obs)

    def run(self) -> RowRun:
        with torch.inference_mode():
            calls, seconds = calls_per_budget(lambda: self.call(self.obs), self.budget_s)
        return RowRun(seconds, None, None, 0, {"rows_per_s": self.case.b * calls / seconds})

    def close(self) -> None:
        pass


def build_row(name: str, case: Case, args: argparse.Namespace) -> tuple[Any | None, str | None]:
    """The row object, or (None, reason) when it cannot run here."""
    try:
        if name == "fasteval":
            return FastevalRow(case, args.modes, args.async_max_batch), None
        if name == "classic loop":
            return ClassicRow(case), None
        if name == "torchrl":
            try:
                import torchrl  # noqa: F401
            except ImportError as exc:
                return None, f"torchrl is not installed ({exc}); ./scripts/install.sh bench"
            return TorchRLRow(case), None
        if name == "sb3":
            try:
                import stable_baselines3  # noqa: F401
            except ImportError as exc:
                return None, f"stable-baselines3 is not installed ({exc}); ./scripts/install.sh bench"
            return SB3Row(case), None
        if name == "env only (limit)":
            return EnvOnlyRow(case), None
        if name == "policy only (limit)":
            return PolicyOnlyRow(case, args.policy_budget), None
    except Exception as exc:  # a peer that cannot run here is skipped with its reason, not hidden
        if name == "fasteval":
            raise
        return None, f"failed to set up: {type(exc).__name__}: {exc}"
    raise ValueError(name)


# -- agreement -----------------------------------------------------------------------------------
def agreement(case: Case, name: str, run: RowRun, ref: RowRun) -> tuple[bool, float, str]:
    """(agrees, difference of mean returns, explanation) for a peer's last run against fasteval's."""
    fe_mean = float(ref.returns.mean())
    mean = float(run.returns.mean())
    diff = mean - fe_mean
    tol = 0.0 if case.workload.exact else 1e-5 * max(1.0, abs(fe_mean))
    agrees = abs(diff) <= tol
    b, n, seed = case.b, case.n, case.seed
    fe_len = float(ref.lengths.mean())
    notes = []
    if name == "classic loop":
        sim = run.facts["n_simulated_episodes"]
        useful = int(ref.lengths.sum())
        notes.append(f"same seeds {seed}..{seed + n - 1}; simulated {sim} episodes ({sim - n} discarded: the last batch "
                     f"runs whole) and {run.env_steps} steps for {useful} useful ({run.env_steps / useful:.2f}x: finished "
                     f"envs keep stepping until their batch ends)")
        if not agrees:
            notes.append("the done mask keeps one step past each episode's end (the off-by-one); its reward is added")
        else:
            notes.append("its done-mask off-by-one keeps the autoreset step, whose reward is 0 in gymnasium, so sums agree")
    elif name == "torchrl":
        completed = run.facts["n_completed"]
        notes.append(f"reports the first {n} episodes to complete, in completion order ({completed} completed, others "
                     f"in flight discarded); mean length {float(run.lengths.mean()):.3f} vs fasteval {fe_len:.3f}"
                     + (" (short-episode bias: short episodes finish first)" if run.lengths.mean() < fe_len - 1e-9 else ""))
        notes.append(f"only each env's first episode is seeded (seeds {seed}..{seed + b - 1}); later ones start from "
                     "an unseeded partial reset, so they are other episodes than fasteval's seeds")
        seeded = run.facts["seeded_first"]
        same = [i for i in seeded if i < n]
        if same:
            fe_first = ref.returns[same]
            tr_first = np.asarray([seeded[i] for i in same])
            ok = np.allclose(tr_first, fe_first, rtol=0 if case.workload.exact else 1e-5, atol=0)
            notes.append(f"its {len(same)} seeded episodes {'match' if ok else 'DO NOT match'} fasteval's for the same seeds"
                         + ("" if case.workload.exact else " (rewards are float32 in TorchRL: tolerance 1e-5)"))
    elif name == "sb3":
        if b > n:
            notes.append(f"b > n: evaluate_policy counts one episode in envs {b - n}..{b - 1} only (quota (n + i) // b), "
                         f"so its seeds are {seed + b - n}..{seed + b - 1}, not {seed}..{seed + n - 1}")
        else:
            notes.append(f"each env has a quota of episodes ((n + i) // b), so completion order does not bias it, but "
                         f"only each env's first episode is seeded (seeds {seed}..{seed + b - 1}); later ones start "
                         f"from unseeded autoresets, so they are other episodes than fasteval's seeds")
        notes.append(f"mean length {float(run.lengths.mean()):.3f} vs fasteval {fe_len:.3f}")
        seeded = run.facts["seeded_first"]
        same = [i for i in seeded if i < n]
        if same:  # Monitor's own list keeps each return unrounded
            ok = np.allclose([seeded[i] for i in same], ref.returns[same], rtol=0 if case.workload.exact else 1e-5, atol=0)
            notes.append(f"its {len(same)} seeded episodes {'match' if ok else 'DO NOT match'} fasteval's for the same seeds")
        if not case.workload.exact:
            notes.append("Monitor rounds each return to 6 decimals")
    return agrees, diff, "; ".join(notes)


# -- main ----------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch-sizes", default=None, help="comma-separated [default: 1,16,256; --tiny: 1,4]")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--workloads", default=None, help="comma-separated subset (default: all)")
    p.add_argument("--heavy", choices=("auto", "hopper", "pendulum"), default="auto",
                   help="the heavier env: MuJoCo Hopper-v5 when mujoco imports (auto), or Pendulum-v1")
    p.add_argument("--rows", default=None, help="comma-separated subset of rows (fasteval always runs)")
    p.add_argument("--fasteval-modes", default="sync,async", help="vectorizations fasteval may pick from, per case")
    p.add_argument("--async-max-batch", type=int, default=16, help="async is calibrated only up to this many slots")
    p.add_argument("--episode-scale", type=float, default=1.0, help="multiply every case's episode count")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--torch-threads", type=int, default=1)
    p.add_argument("--policy-budget", type=float, default=0.3, help="seconds per policy-only measurement")
    p.add_argument("--json", dest="json_path", default=None)
    p.add_argument("--strict", action="store_true", help="exit 1 if a target fails")
    p.add_argument("--tiny", action="store_true", help="smoke run: tiny n, batches 1,4, one repeat")
    args = p.parse_args(argv)
    if args.tiny:
        args.repeats, args.policy_budget = 1, 0.02
    if args.batch_sizes is None:
        args.batch_sizes = "1,4" if args.tiny else "1,16,256"
    args.batches = [int(x) for x in args.batch_sizes.split(",") if x.strip()]
    args.modes = [m.strip() for m in args.fasteval_modes.split(",") if m.strip()]
    if args.repeats < 1 or not args.batches or min(args.batches) < 1:
        p.error("--repeats and every batch size must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    warnings.filterwarnings("ignore", category=UserWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    torch.set_num_threads(args.torch_threads)
    wls = workloads(args.heavy)
    if args.workloads:
        wanted = [w.strip() for w in args.workloads.split(",") if w.strip()]
        unknown = [w for w in wanted if w not in wls]
        if unknown:
            print(f"unknown workloads {unknown}; choose from {sorted(wls)}", file=sys.stderr)
            return 2
        wls = {k: v for k, v in wls.items() if k in wanted}
    row_names = ["fasteval", *PEERS, *LIMITS]
    if args.rows:
        keep = {r.strip() for r in args.rows.split(",")}
        row_names = [r for r in row_names if r == "fasteval" or r in keep]
    info = machine_info()
    versions = {}
    for mod in ("torchrl", "tensordict", "stable_baselines3", "mujoco"):
        try:
            versions[mod] = __import__(mod).__version__
        except Exception:
            versions[mod] = "not installed"
    print(f"# Peers (issue 4): fasteval vs classic loop vs TorchRL vs SB3 vs the limits\n\n{format_machine(info)}")
    print("- peers: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    print(f"- command: `{command_line()}`")
    print(f"- batch sizes {args.batches}, medians of {args.repeats} repeat(s), rows interleaved per repeat; "
          f"torch {args.torch_threads} intra-op thread(s) for every row; seeds {args.seed}..")
    for wl in wls.values():
        ns = ", ".join(f"b={b}: {_n(wl, b, args)}" for b in args.batches)
        print(f"- workload `{wl.name}`: {wl.env_id}, policy {wl.policy_desc}; episodes {ns}")
    print(flush=True)

    S = Samples()
    cases_out: list[dict[str, Any]] = []
    t_all = time.perf_counter()
    for wl in wls.values():
        probe = gym.make(wl.env_id, **wl.env_kwargs)
        base_policy = wl.make_policy(probe)
        for b in args.batches:
            n = _n(wl, b, args)
            policy = base_policy if base_policy is not None else ZeroPolicy(probe.action_space, b)
            case = Case(wl, b, n, args.seed, policy, base_policy if base_policy is not None else "zero")
            rows: dict[str, Any] = {}
            skipped: dict[str, str] = {}
            for name in row_names:
                row, reason = build_row(name, case, args)
                if row is None:
                    skipped[name] = reason
                else:
                    rows[name] = row
            last: dict[str, RowRun] = {}
            key = (wl.name, b)
            for rep in range(args.repeats):
                for name, row in rows.items():
                    run = row.run()
                    last[name] = run
                    S.add(key + (name, "s"), run.seconds)
                    if name == "policy only (limit)":
                        S.add(key + (name, "rows_per_s"), run.facts["rows_per_s"])
                    if name == "fasteval":
                        S.add(key + (name, "eval_s"), run.facts["eval_s"])
                        t = run.facts["timings"]
                        S.add(key + (name, "overhead_us"),
                              1e6 * (run.facts["eval_s"] - t["env_step"] - t["policy"]) / max(1, run.env_steps))
                fe_s = S.values(key + ("fasteval", "s"))[-1]
                for name in rows:  # row episodes/s / fasteval episodes/s, per repeat (same n)
                    if name not in ("fasteval", "policy only (limit)"):
                        S.add(key + (name, "ratio"), fe_s / S.values(key + (name, "s"))[-1])
            case_doc = _case_report(case, rows, skipped, last, S, key)
            cases_out.append(case_doc)
            _print_case(case_doc)
            for row in rows.values():
                row.close()
            print(f"({wl.name}, b={b} done at {time.perf_counter() - t_all:.0f} s)", file=sys.stderr, flush=True)
        probe.close()

    # -- summary + targets ---------------------------------------------------------------------------
    print("\n## Summary: fasteval episodes/s and each row's speed relative to fasteval (median of per-repeat ratios)\n")
    heads = ["workload", "b", "fasteval mode", "fasteval ep/s", *[f"{p} x" for p in PEERS], "env only x", "fasteval/env-only"]
    srows = []
    for c in cases_out:
        r = {row["row"]: row for row in c["rows"]}
        cells = [c["workload"], str(c["b"]), r["fasteval"]["mode"].split(" ")[0], fmt_num(r["fasteval"]["episodes_per_s"])]
        for p in PEERS:
            cells.append(f"{r[p]['vs_fasteval']:.3f}x" if p in r else "skipped")
        eo = r.get("env only (limit)")
        cells.append(f"{eo['vs_fasteval']:.2f}x" if eo else "skipped")
        cells.append(f"{1 / eo['vs_fasteval']:.2f}" if eo else "")
        srows.append(cells)
    print(markdown_table(heads, srows))
    print("\n`p x` = peer episodes/s / fasteval episodes/s (< 1: fasteval is faster). "
          "`fasteval/env-only` = fraction of the env-only limit fasteval reaches.")

    print("\n## Targets\n")
    checks = []
    big = [c for c in cases_out if c["b"] >= 16]
    if not big:
        checks.append(("fasteval ahead of every peer at batch >= 16 on every workload", None, "no batch >= 16 run"))
    for c in big:
        r = {row["row"]: row for row in c["rows"]}
        peers = [(p, r[p]["vs_fasteval"]) for p in PEERS if p in r]
        missing = [p for p in PEERS if p not in r]
        if not peers:
            checks.append((f"{c['workload']}, b={c['b']}: fasteval ahead of every peer", None, "no peer ran"))
            continue
        worst = max(peers, key=lambda x: x[1])
        detail = ", ".join(f"{p} {v:.3f}x" for p, v in peers) + f" (closest: {worst[0]})"
        if missing:
            detail += "; skipped: " + ", ".join(f"{p} ({c['skipped'].get(p, 'not selected')})" for p in missing)
        checks.append((f"{c['workload']}, b={c['b']}: fasteval ahead of every peer", worst[1] < 1.0, detail))
    b256 = [c for c in cases_out if c["b"] == 256]
    for c in b256:
        ov = c["fasteval_overhead_us"]
        checks.append((f"{c['workload']}, b=256: evaluator overhead < {OVERHEAD_TARGET_US:g} us per env step", ov < OVERHEAD_TARGET_US,
                       f"{ov:.3f} us/step = (eval_s - env_step - policy) / steps, median of repeats (same engine and formula "
                       f"as `fasteval bench`)"))
    agree_rows = [(c, row) for c in cases_out for row in c["rows"] if row.get("agrees") is not None]
    n_dis = sum(1 for _, row in agree_rows if not row["agrees"])
    checks.append(("mean returns: every peer agrees with fasteval on the same seeds, or the difference is explained",
                   True if agree_rows else None,
                   f"{len(agree_rows) - n_dis} of {len(agree_rows)} peer rows agree exactly"
                   f"{' (tolerance 1e-5 relative on continuous control)' if any(not c['exact'] for c, _ in agree_rows) else ''}; "
                   f"{n_dis} differ, each explained above"))
    lines = [check_line(*c) for c in checks]
    print("\n".join(lines))

    if args.json_path:
        write_json(args.json_path, {
            "machine": info, "peer_versions": versions, "command": command_line(), "batch_sizes": args.batches,
            "repeats": args.repeats, "cases": cases_out, "samples": S.to_dict(),
            "checks": [{"name": c[0], "ok": c[1], "detail": c[2]} for c in checks],
        })
        print(f"\nwrote {args.json_path}")
    failed = any(c[1] is False for c in checks)
    return 1 if (failed and args.strict) else 0


def _n(wl: Workload, b: int, args: argparse.Namespace) -> int:
    n = wl.episodes(b, args.tiny)
    return n if args.tiny else max(1, int(round(n * args.episode_scale)))


def _case_report(case: Case, rows: dict[str, Any], skipped: dict[str, str], last: dict[str, RowRun], S: Samples,
                 key: tuple) -> dict[str, Any]:
    ref = last["fasteval"]
    n = case.n
    fe_s = S.median(key + ("fasteval", "s"))
    fe_rate = n / fe_s
    mean_len = float(ref.lengths.mean())
    out_rows = []
    for name, row in rows.items():
        run = last[name]
        doc: dict[str, Any] = {"row": name, "mode": row.mode_note}
        if name == "policy only (limit)":
            rps = S.median(key + (name, "rows_per_s"))
            doc.update(seconds=None, episodes_per_s=rps / mean_len, env_steps_per_s=rps, env_steps=None,
                       vs_fasteval=(rps / mean_len) / fe_rate, mean_return=None, agrees=None, note=f"{fmt_num(rps)} rows/s")
        else:
            sec = S.median(key + (name, "s"))
            doc.update(seconds=sec, episodes_per_s=n / sec, env_steps=run.env_steps, env_steps_per_s=run.env_steps / sec,
                       vs_fasteval=1.0 if name == "fasteval" else S.median(key + (name, "ratio")))
            if run.returns is not None:
                doc["mean_return"] = float(run.returns.mean())
                if name == "fasteval":
                    doc["agrees"], doc["note"] = None, f"eval_s {S.median(key + (name, 'eval_s')):.4f} s (engine time)"
                else:
                    ok, diff, note = agreement(case, name, run, ref)
                    doc.update(agrees=ok, diff=diff, note=note)
            else:
                doc["mean_return"], doc["agrees"] = None, None
                doc["note"] = ("replayed fasteval's exact episodes" if run.facts.get("exact_replay")
                               else "WARNING: replay lengths differ from fasteval's")
        out_rows.append(doc)
    return {
        "workload": case.workload.name, "env": case.workload.env_id, "policy": case.workload.policy_desc, "b": case.b,
        "n": n, "exact": case.workload.exact, "rows": out_rows, "skipped": skipped,
        "fasteval_overhead_us": S.median(key + ("fasteval", "overhead_us")),
    }


def _print_case(c: dict[str, Any]) -> None:
    print(f"\n### {c['workload']} ({c['env']}, {c['policy']}), b={c['b']}, n={c['n']}\n")
    heads = ["row", "how", "time (s)", "episodes/s", "env steps", "env steps/s", "vs fasteval", "mean return", "agrees"]
    rows = []
    for r in c["rows"]:
        agrees = "" if r.get("agrees") is None else ("yes" if r["agrees"] else f"no ({r['diff']:+.4g})")
        rows.append([r["row"], r["mode"], "" if r["seconds"] is None else f"{r['seconds']:.4f}", fmt_num(r["episodes_per_s"]),
                     "" if r["env_steps"] is None else fmt_num(r["env_steps"]), fmt_num(r["env_steps_per_s"]),
                     f"{r['vs_fasteval']:.3f}x", "" if r.get("mean_return") is None else f"{r['mean_return']:.6g}", agrees])
    for name, reason in c["skipped"].items():
        rows.append([name, f"SKIPPED: {reason}", "", "", "", "", "", "", ""])
    print(markdown_table(heads, rows, align=["l", "l"] + ["r"] * 7))
    print()
    for r in c["rows"]:
        if r.get("note"):
            print(f"- {r['row']}: {r['note']}")
    print(f"- fasteval overhead: {c['fasteval_overhead_us']:.3f} us per env step", flush=True)


if __name__ == "__main__":
    sys.exit(main())
