"""The ranking of a many-policy run: each policy's estimate with its interval, its episodes, and the paired
difference to the best with its interval; and the intervals over episodes, for the ranking page's plot.

Two sources, one layout (``eval_info.json``'s ``ranking``, docs/how-many-episodes.md):

* a **race** (``--stop-when best``): :func:`race_ranking` reads the race's summary
  (:meth:`fasteval.types.sequential.race.Race.summary`): the race's order (the remaining policies by
  their means, then the dropped ones, the last dropped first), each policy's anytime-valid betting
  interval, and the race's paired interval of its difference to the leader (at the race's per-pair
  level, ``alpha / (K (K - 1) / 2)``: all of them hold at once with probability ``1 - alpha``);
* a **fixed n** run: :func:`fixed_ranking` sorts by the estimate (the success rate, or the mean return
  when the envs report no success), with a Wilson interval (success) or a percentile bootstrap
  (return) per policy, and the paired bootstrap of the difference to the best on the episodes both ran
  (each pair at the run's confidence; they are not simultaneous).

Differences are ``policy - best`` (zero or below for a correct best; the best's own is ``None``).
:func:`interval_trajectory` gives each policy's anytime-valid interval after every episode (thinned to
at most ``points`` episode counts): what the ranking page plots. Pure NumPy, no I/O.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from fasteval.types.stats import bootstrap_mean_ci, paired_bootstrap_ci, wilson_interval

SUCCESS, RETURN, MAX_REWARD = "success", "return", "max_reward"
RANKING_POINTS = 120
"""Episode counts at which :func:`interval_trajectory` keeps each policy's interval (the plot's x axis)."""


def _row(rank: int, name: str, ref: Any, episodes: int, metric: str, estimate: float, low: float, high: float,
         interval: str) -> dict[str, Any]:
    return {"rank": rank, "policy": name, "ref": ref, "episodes": int(episodes), "metric": metric,
            "estimate": _num(estimate), "ci_low": _num(low), "ci_high": _num(high), "interval": interval,
            "vs_best": None, "dropped_at": None, "dropped_by": None}


def _num(x: Any) -> float | None:
    x = float(x)
    return None if math.isnan(x) else x


def fixed_ranking(names: Sequence[str], refs: Sequence[Any], episode_ix: Sequence[np.ndarray],
                  outcomes: Sequence[np.ndarray], metric: str, confidence: float = 0.95,
                  n_boot: int = 2000) -> list[dict[str, Any]]:
    """The ranking of a fixed-n run (see the module docstring). ``episode_ix[p]`` and ``outcomes[p]``:
    policy p's recorded episodes (indices) and outcomes (successes, or returns), in episode order."""
    K = len(names)
    means = np.array([float(np.mean(o)) if len(o) else math.nan for o in outcomes])
    order = sorted(range(K), key=lambda p: (math.isnan(means[p]), -np.nan_to_num(means[p], nan=-np.inf), p))
    z = _z(confidence)
    rows: list[dict[str, Any]] = [{} for _ in range(K)]
    for rank, p in enumerate(order, 1):
        x = np.asarray(outcomes[p], dtype=np.float64)
        if metric == SUCCESS:
            lo, hi = wilson_interval(int(x.sum()), int(x.size), z=z) if x.size else (math.nan, math.nan)
            interval = f"Wilson {confidence:.0%} (not adjusted for best of {K})"
        else:
            lo, hi = bootstrap_mean_ci(x, confidence=confidence, n_boot=n_boot)
            interval = f"bootstrap {confidence:.0%} (not adjusted for best of {K})"
        rows[p] = _row(rank, names[p], refs[p], x.size, metric, means[p], lo, hi, interval)
    best = order[0]
    for p in range(K):
        if p == best:
            continue
        shared, ia, ib = np.intersect1d(episode_ix[p], episode_ix[best], return_indices=True)
        a = np.asarray(outcomes[p], dtype=np.float64)[ia]
        b = np.asarray(outcomes[best], dtype=np.float64)[ib]
        boot = paired_bootstrap_ci(a, b, confidence=confidence, n_boot=n_boot) if shared.size else \
            {"mean_diff": math.nan, "ci": [math.nan, math.nan]}
        rows[p]["vs_best"] = {"best": names[best], "difference": _num(boot["mean_diff"]), "ci_low": _num(boot["ci"][0]),
                              "ci_high": _num(boot["ci"][1]), "n_pairs": int(shared.size),
                              "interval": f"paired bootstrap {confidence:.0%}"}
    return sorted(rows, key=lambda r: r["rank"])


def race_interval_label(summary: dict[str, Any]) -> str:
    """What each policy's own interval in a race is (the ranking's and the policy's own page say the same): the
    anytime-valid betting sequence at 1 - alpha/K (adjusted for the best of K), or at the race's level, labelled
    as not adjusted."""
    each = summary.get("interval_confidence")
    K = len(summary["policies"])
    return (f"anytime-valid betting {each:.2%} each (1 - alpha/{K}: all {K} at once, so the best of {K} too)"
            if each is not None else f"anytime-valid betting {summary['confidence']:.0%} (not adjusted for best of {K})")


def race_ranking(summary: dict[str, Any], refs: Sequence[Any]) -> list[dict[str, Any]]:
    """The ranking of a race, from its summary (see the module docstring)."""
    names = [p["name"] for p in summary["policies"]]
    metric = summary["metric"]
    level = f"{summary['confidence']:.0%}"
    own = race_interval_label(summary)
    rows = []
    for p in summary["policies"]:
        row = _row(p["rank"], p["name"], refs[p["policy"]], p["episodes"], metric, p["estimate"], p["cs_low"],
                   p["cs_high"], own)
        if p["dropped_at"] is not None:
            row["dropped_at"], row["dropped_by"] = p["dropped_at"], names[p["dropped_by"]]
        rows.append(row)
    leader = summary["leader"]
    per_pair = 1.0 - summary["alpha_per_pair"]
    for pair in summary["vs_leader"]:  # leader - p: the difference to the best is its negative
        q = pair["vs"]
        rows[q]["vs_best"] = {"best": names[leader], "difference": _num(-pair["difference"]),
                              "ci_low": _num(-pair["cs_high"]), "ci_high": _num(-pair["cs_low"]),
                              "n_pairs": pair["n_pairs"],
                              "interval": f"anytime-valid paired {per_pair:.4%} (all pairs at once: {level}; drops "
                                          f"by Holm's step-down, whose line is in the race's eliminations)"
                                          if summary.get("holm") else
                                          f"anytime-valid paired {per_pair:.4%} (all pairs at once: {level})"}
    return sorted(rows, key=lambda r: r["rank"])


def interval_trajectory(names: Sequence[str], outcomes: Sequence[np.ndarray], metric: str, confidence: float = 0.95,
                        bounds: tuple[float, float] | None = None, points: int = RANKING_POINTS) -> dict[str, Any] | None:
    """Each policy's anytime-valid betting interval after its first n episodes, for n on a shared grid of at
    most ``points`` counts (the ranking page's plot). ``None`` for returns without ``bounds`` (no anytime
    interval exists for an unbounded return)."""
    from fasteval.types.sequential.betting import BettingCS

    if metric != SUCCESS and bounds is None:
        return None
    lo, width = (0.0, 1.0) if metric == SUCCESS else (bounds[0], bounds[1] - bounds[0])
    longest = max((len(o) for o in outcomes), default=0)
    if longest == 0:
        return None
    grid = np.unique(np.linspace(1, longest, min(points, longest)).round().astype(np.int64))
    series = []
    for name, x in zip(names, outcomes):
        x = np.asarray(x, dtype=np.float64)
        if x.size == 0:
            series.append({"policy": name, "n": [], "estimate": [], "ci_low": [], "ci_high": []})
            continue
        unit = np.clip((x - lo) / width, 0.0, 1.0)
        low, high = BettingCS(confidence).update(unit)
        mean = np.cumsum(unit) / np.arange(1, unit.size + 1)
        at = grid[grid <= unit.size] - 1
        series.append({"policy": name, "n": (at + 1).tolist(), "estimate": (lo + width * mean[at]).tolist(),
                       "ci_low": (lo + width * low[at]).tolist(), "ci_high": (lo + width * high[at]).tolist()})
    return {"metric": metric, "confidence": confidence, "interval": f"anytime-valid betting {confidence:.0%}",
            "series": series}


def _words(metric: str) -> str:
    return {SUCCESS: "success rate", RETURN: "mean return", MAX_REWARD: "mean max reward"}.get(metric, metric)


def _names(names: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    names = [str(n) for n in names]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _shown(x: float | None, metric: str, sign: bool = False) -> str:
    if x is None:
        return "-"
    if metric == SUCCESS:
        return f"{100.0 * x:+.1f} points" if sign else f"{100.0 * x:.1f}%"
    return f"{x:+.4g}" if sign else f"{x:.4g}"


def ranking_verdict(ranking: Sequence[dict[str, Any]], race: dict[str, Any] | None = None,
                    note: str | None = None) -> dict[str, Any]:
    """Which policy is best, only where an interval supports it (``eval_info.json``'s ``verdict``).

    ``state``: ``best`` (one policy, ``best`` names it), ``tied`` (``tied_for_best`` lists the policies that
    cannot be told apart at the run's n), ``undecided`` (a race that reached its cap, or was cut short, with
    more than one policy left: ``tied_for_best`` are the remaining ones, ``leader`` the one ahead, ``gap``
    how far the interval of the leader's difference to its closest rival is from deciding), or ``none`` (no
    episode). ``headline`` says it in one sentence, the undecided state first.

    * fixed n: a policy is tied with the first-ranked one when the paired interval of its difference to it
      reaches 0 (``ci_high >= 0``, or no shared episode); the first-ranked is named best only when every other
      policy's interval lies below 0 (each interval at the run's confidence, pair by pair);
    * a race: ``one_left`` names the last one best; ``tied`` (``best:eps``) says the remaining ones are tied
      within eps; ``cap`` or ``incomplete`` with several left is undecided."""
    out: dict[str, Any] = {"state": "none", "best": None, "tied_for_best": [], "leader": None, "gap": None,
                           "metric": ranking[0]["metric"] if ranking else None, "metric_note": note, "headline": ""}
    if not ranking or ranking[0]["estimate"] is None:
        out["headline"] = "no policy finished an episode: nothing to rank"
        return out
    metric = ranking[0]["metric"]
    first = ranking[0]
    out["leader"] = first["policy"]
    what = _words(metric)
    if race is None:
        tied = [first] + [r for r in ranking[1:] if r["estimate"] is not None and (
            not r.get("vs_best") or r["vs_best"].get("ci_high") is None or r["vs_best"]["ci_high"] >= 0.0)]
        n = min(r["episodes"] for r in ranking)
        if len(tied) == 1:
            out.update(state="best", best=first["policy"], tied_for_best=[first["policy"]],
                       headline=f"best: {first['policy']} by {what} (every other policy's paired interval of its "
                                f"difference to it lies below 0)")
        else:
            names = [r["policy"] for r in tied]
            out.update(state="tied", tied_for_best=names,
                       headline=f"{_names(names)} are tied for best by {what}: the paired intervals of their "
                                f"differences include 0, so they cannot be told apart at n = {n}; no best is named")
        return out
    remaining = [r for r in ranking if r.get("dropped_at") is None]
    names = [r["policy"] for r in remaining]
    reason, k = race.get("reason"), race.get("k")
    if len(remaining) == 1:
        out.update(state="best", best=first["policy"], tied_for_best=names,
                   headline=f"best: {first['policy']} by {what} (the race dropped every other policy by k = {k})")
        return out
    if reason == "tied":
        out.update(state="tied", tied_for_best=names,
                   headline=f"{_names(names)} are tied for best by {what}: within eps = {race.get('eps'):g} of each "
                            f"other, shown by the race at k = {k}; no best is named")
        return out
    # undecided: the hardest rival to drop is the one whose difference to the leader has the highest upper bound
    eps = float(race.get("eps") or 0.0)
    rivals = [r for r in remaining[1:] if r.get("vs_best") and r["vs_best"].get("ci_high") is not None]
    gap = None
    if rivals:
        rival = max(rivals, key=lambda r: r["vs_best"]["ci_high"])
        vs = rival["vs_best"]
        lower = -vs["ci_high"]  # the lower bound of leader - rival
        gap = {"rival": rival["policy"], "difference": None if vs["difference"] is None else -vs["difference"],
               "ci_low": lower, "ci_high": None if vs["ci_low"] is None else -vs["ci_low"], "eps": eps,
               "short_by": eps - lower}
    where = "at the cap" if reason == "cap" else "(the run ended before the race did)"
    text = (f"undecided {where} (k = {k}): {_names(names)} cannot be told apart yet; leader {first['policy']} "
            f"({what} {_shown(first['estimate'], metric)})")
    if gap is not None:
        text += (f"; vs {gap['rival']}: {_shown(gap['difference'], metric, True)}, interval "
                 f"[{_shown(gap['ci_low'], metric, True)}, {_shown(gap['ci_high'], metric, True)}], whose lower bound "
                 f"must rise by {_shown(gap['short_by'], metric, True).lstrip('+')} to decide (above "
                 f"{_shown(eps, metric, True).lstrip('+') if eps else '0'})")
    out.update(state="undecided", tied_for_best=names, gap=gap, headline=text + "; no best is named")
    return out


def _z(confidence: float) -> float:
    from statistics import NormalDist

    return NormalDist().inv_cdf(0.5 + confidence / 2.0)
