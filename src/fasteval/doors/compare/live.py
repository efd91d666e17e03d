"""``fasteval compare --policy-a P --policy-b Q --env E [--stop-when decided]``: a live paired comparison.

Both policies run on the same seeds (episode i of each has seed ``seed + i``), block by block of
episode indices: A runs episodes ``[s, s + m)``, then B the same ones, and the pairs are fed to
the paired e-process (:class:`~fasteval.types.sequential.PairedEProcess`) in index order. With
``--stop-when decided`` the comparison stops at the first pair count k at which the e-process
decides; the reported pairs are exactly ``0..k-1`` whatever the block size, batch size or
finishing order (the decision reads only pairs in index order), and the pairs of the block past k
are listed as computed past the stop. Without it, all ``-n`` pairs run and the fixed-n tests decide.

The test bets on the discordant successes when the env reports success, else on the paired
return differences mapped with ``--return-bounds`` (required then).

``--design truncated`` (with ``--stop-when decided``; success only): ``-n`` is a real budget, and the
truncated paired design (:class:`~fasteval.types.sequential.TruncatedPaired`: exact conditional
McNemar bounds at 20 looks, all of alpha spent by ``-n``) decides instead of the e-process; it is
valid up to ``-n`` only.

After a stop, the interval of B - A is the anytime-valid confidence sequence at the stop
(:func:`~fasteval.types.sequential.eprocess.difference_sequence`, valid whatever decided the stop),
and the fixed-n tests of the document are descriptive only.
"""

from __future__ import annotations

from typing import Any, Sequence

from fasteval.doors.compare.document import build_document
from fasteval.doors.compare.inputs import Side
from fasteval.types.errors import UserInputError
from fasteval.types.sequential import (
    PairedEProcess, TruncatedDesign, TruncatedPaired, parse_return_bounds, parse_stop_rule,
)
from fasteval.types.sequential.eprocess import (
    centred_differences, difference_sequence, discordant_outcomes, mapped_differences,
)
from fasteval.types.sequential.truncated import decided_by

DESIGNS = ("anytime", "truncated")
ANYTIME_DECIDED_BY = ("anytime-valid betting e-process on the paired episodes (valid at every n, however long "
                      "the comparison goes on)")

BLOCK_BATCHES = 4
"""Episodes per block: this many batches (the block size changes only the work done past k)."""


def _spec(policy: str, env: str, env_kwargs: dict[str, Any], n: int, seed: int, batch_size: int) -> Any:
    from fasteval.types.spec import EvalSpec

    return EvalSpec(env=env, policy=policy, env_kwargs=env_kwargs, n_episodes=n, seed=seed,
                    batch_size=min(batch_size, n), device="auto")


class LivePair:
    """Two engines on the same env and seeds, run block by block; records kept per side."""

    def __init__(self, policy_a: str, policy_b: str, env: str, env_kwargs: dict[str, Any], n: int, seed: int, batch_size: int):
        from fasteval.run.engine import Engine

        self.n, self.seed = n, seed
        self.engines = []
        try:
            for policy in (policy_a, policy_b):
                self.engines.append(Engine(_spec(policy, env, env_kwargs, n, seed, batch_size)))
        except BaseException:
            self.close()
            raise
        self.records: tuple[list[dict[str, Any]], list[dict[str, Any]]] = ([], [])
        self.has_success = True

    def run_block(self, start: int, stop: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        out = []
        for engine, kept in zip(self.engines, self.records):
            result = engine.run(episodes=range(start, stop), seed=self.seed)
            rows = sorted(result.per_episode.to_list(), key=lambda r: r["episode_ix"])
            self.has_success = self.has_success and bool(result.meta.get("has_success_signal", True))
            kept.extend(rows)
            out.append(rows)
        return out[0], out[1]

    def close(self) -> None:
        for engine in self.engines:
            engine.close()


def _paired_values(a: Sequence[dict[str, Any]], b: Sequence[dict[str, Any]], start: int, stop: int, success: bool,
                   bounds: Any, centred: bool = False) -> Any:
    """Per index of ``start..stop-1``: the e-process's input (NaN for a concordant success pair, or
    where a side has no record: an episode that failed for good carries no evidence); ``centred``: the
    interval's input instead (:func:`centred_differences`: a concordant success pair is 1/2)."""
    import numpy as np

    by_a = {r["episode_ix"]: r for r in a}
    by_b = {r["episode_ix"]: r for r in b}
    both = [i for i in range(start, stop) if i in by_a and i in by_b]
    values = np.full(stop - start, np.nan)
    if both:
        ra, rb = [by_a[i] for i in both], [by_b[i] for i in both]
        if not success:
            y = mapped_differences([r["sum_reward"] for r in ra], [r["sum_reward"] for r in rb], bounds)
        else:
            pair = ([r["success"] for r in ra], [r["success"] for r in rb])
            y = centred_differences(*pair) if centred else discordant_outcomes(*pair)
        values[np.asarray(both) - start] = y
    return values


def difference_interval(pair: "LivePair", k: int, bounds: Any, confidence: float, margin: float | None) -> dict[str, Any]:
    """The anytime-valid interval of B - A over pairs ``0..k-1`` (valid at the stop, whatever decided it),
    in the units of the difference (a success-rate difference, or return units), its trajectory, and
    with ``margin`` the one-sided lower bound that gates non-inferiority after a stop."""
    y = _paired_values(pair.records[0], pair.records[1], 0, k, pair.has_success, bounds, centred=True)
    scale = 1.0 if pair.has_success else float(bounds[1] - bounds[0])
    seq = difference_sequence(y, confidence)
    to_diff = lambda v: (2.0 * v - 1.0) * scale  # noqa: E731  (the mean of y is (1 + (B - A) / scale) / 2)
    tr = seq["trajectory"]
    out = {"low": to_diff(seq["low"]), "high": to_diff(seq["high"]), "confidence": confidence,
           "method": "anytime-valid confidence sequence (mixture of the e-process's constant bets, on every pair); "
                     "valid at a data-dependent stop",
           "trajectory": {"diff_k": tr["k"], "diff_low": [to_diff(v) for v in tr["low"]],
                          "diff_high": [to_diff(v) for v in tr["high"]]}}
    if margin is not None:
        one = difference_sequence(y, confidence, points=1, one_sided=True)
        out["lower_bound_one_sided"] = to_diff(one["low"])
    return out


def run_live(policy_a: str | None, policy_b: str | None, env: str | None, env_kwargs: Sequence[str], *, n_episodes: int,
             seed: int, batch_size: int, stop_when: str | None, return_bounds: str | None, alpha: float,
             margin: float | None, fail_if_worse: bool, confidence: float, n_boot: int,
             design: str = "anytime", rank_by: str | None = None) -> dict[str, Any]:
    """Run the comparison; return the ``compare.json`` document (mode ``live``)."""
    from fasteval.doors.cli import parse_env_kwargs

    if not (policy_a and policy_b and env):
        raise UserInputError("compare: a live comparison needs --policy-a, --policy-b and --env.")
    try:
        rule = parse_stop_rule(stop_when, allow_decided=True) if stop_when else None
        bounds = parse_return_bounds(return_bounds)
    except ValueError as exc:
        raise UserInputError(str(exc)) from None
    if rule is not None and rule.kind != "decided":
        raise UserInputError(f"compare --stop-when {stop_when}: a comparison stops with 'decided' (the paired test decides); "
                             f"rules such as {stop_when} are for one policy's run.")
    if design not in DESIGNS:
        raise UserInputError(f"compare --design: expected {' or '.join(DESIGNS)}, got {design!r}.")
    if rule is not None and rank_by == "max_reward":
        raise UserInputError("compare --stop-when decided --rank-by max_reward: the sequential test bets on successes "
                             "or paired returns; drop --stop-when to compare max rewards at a fixed -n.")
    if design == "truncated" and rule is None:
        raise UserInputError("compare --design truncated: the truncated design decides when to stop, so it needs "
                             "--stop-when decided (and -n, the budget it spends its error by).")
    kwargs = parse_env_kwargs(tuple(env_kwargs))
    pair = LivePair(policy_a, policy_b, env, kwargs, n_episodes, seed, batch_size)
    try:
        sequential = _run_blocks(pair, rule, bounds, n_episodes, batch_size, 1.0 - alpha, design,
                                 rank_by)  # the test is at --alpha
    finally:
        pair.close()
    k = sequential["k"] if sequential else n_episodes
    if sequential is not None:  # the interval of B - A at the stop, at the test's level
        interval = difference_interval(pair, k, bounds, 1.0 - alpha, margin)
        sequential["trajectory"].update(interval.pop("trajectory"))
        sequential["difference"] = interval
    sides = []
    for label, policy, kept in (("A", policy_a, pair.records[0]), ("B", policy_b, pair.records[1])):
        sides.append(Side(label, f"live:{policy}", policy, env, kwargs, seed, [r for r in kept if r["episode_ix"] < k]))
    task_key = (sides[0].records[0].get("task_group"), sides[0].records[0].get("task_id")) if sides[0].records else (env, 0)
    return build_document(sides[0], sides[1], alpha=alpha, margin=margin, fail_if_worse=fail_if_worse,
                          confidence=confidence, n_boot=n_boot, mode="live", rank_by=rank_by,
                          sequential={task_key: sequential} if sequential else None)


def _run_blocks(pair: LivePair, rule: Any, bounds: Any, n: int, batch_size: int, confidence: float,
                design: str = "anytime", rank_by: str | None = None) -> dict[str, Any] | None:
    """Run blocks until the sequential test decides (with a rule) or all ``n`` pairs ran."""
    block = max(1, BLOCK_BATCHES * batch_size)
    process: Any = None
    if rule is not None:
        process = (TruncatedPaired(TruncatedDesign(n, (1.0 - confidence) / 2.0)) if design == "truncated"
                   else PairedEProcess(confidence))
    k = None
    past: list[int] = []
    for start in range(0, n, block):
        stop = min(n, start + block)
        a, b = pair.run_block(start, stop)
        if process is None:
            continue
        if not pair.has_success and design == "truncated":
            raise UserInputError("compare --design truncated: the truncated paired design tests discordant successes, "
                                 "and the env reports no success signal; use --design anytime with --return-bounds LO,HI "
                                 "(the e-process then bets on the paired returns).")
        tested = "success" if pair.has_success else "return"
        if rank_by is not None and rank_by != tested:  # the sequential test decides on one metric: the one shown
            raise UserInputError(f"compare --stop-when decided --rank-by {rank_by}: the sequential test decides on "
                                 f"the {tested} here (it bets on {'discordant successes' if pair.has_success else 'paired returns'}), "
                                 f"so its verdict would not be on the {rank_by}; drop --stop-when to compare "
                                 f"{rank_by} at a fixed -n, or drop --rank-by.")
        if not pair.has_success and bounds is None:
            raise UserInputError("compare --stop-when decided: the env reports no success signal, so the test bets on "
                                 "the paired returns; give their bounds with --return-bounds LO,HI.")
        try:
            hit = process.update(_paired_values(a, b, start, stop, pair.has_success, bounds))
        except ValueError as exc:  # a return outside --return-bounds
            raise UserInputError(str(exc)) from None
        if hit is not None:  # pairs seen in all blocks so far: the global k
            k = hit
            past = sorted({r["episode_ix"] for r in a + b if r["episode_ix"] >= k})
            break
    if process is None:
        return None
    common = {"rule": rule.text, "confidence": confidence, "cap": n, "metric": "success" if pair.has_success else "return",
              "n_computed_past_stop": len(past), "computed_past_stop": past}
    if isinstance(process, TruncatedPaired):
        summary = process.summary()
        return {**common, **summary, "k": k if k is not None else n, "decision": process.verdict,
                "decided_by": decided_by(process.design), "alpha_per_side": process.design.alpha,
                "trajectory": {"k": [look["n"] for look in summary["looks"]]}}
    return {
        **common, "design": "anytime", "decided_by": ANYTIME_DECIDED_BY,
        "k": k if k is not None else n, "reason": "rule" if k is not None else "cap", "decision": process.verdict,
        "e_value_better": process.e_better, "e_value_worse": process.e_worse,
        "threshold": float(f"{process.threshold:.12g}"),  # 2/alpha: 40, not 39.999999999999964
        "method": "betting e-process (mixture of constant bets) on " + (
            "discordant pairs" if pair.has_success else "paired return differences"),
        "trajectory": process.trajectory(),
    }
