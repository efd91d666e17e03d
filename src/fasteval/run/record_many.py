"""The record of a many-policy run, built once: :func:`build_many_record` (chosen by
:func:`build_run_record`, which the engine and the durable run call for every run).

From the one segment the engine handed up (a ledger of (policy, episode) rows, the race if one ran) and
the earlier segments of a resumed run, it builds, for each policy, the record its own one-policy run
would have: its episodes (cut at the race's decision: a policy dropped at k keeps episodes ``0..k-1``,
and a race that ended at k keeps ``0..k-1`` for every remaining policy), its aggregates, videos, faults,
facts and end state; then the run's :class:`~fasteval.types.many_result.ManyPolicyResult` with the
ranking (:mod:`fasteval.types.ranking`) and the race's block. The end states are decided by the one
rule, :func:`fasteval.run.record.end_status`, per policy and for the run.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fasteval.core.outcome import Segment
from fasteval.run.record import EpisodeRows, build_record, default_label, end_status, spec_facts
from fasteval.types.eval_result import EarlierSegments, EvalResult, has_success_signal
from fasteval.types.episode_table import EpisodeTable, merge_episodes
from fasteval.types.many_result import ManyPolicyResult
from fasteval.types.metric_bounds import FIELDS, WORDS, default_metric_note
from fasteval.types.ranking import (
    RETURN, SUCCESS, fixed_ranking, interval_trajectory, race_interval_label, race_ranking, ranking_verdict,
)
from fasteval.types.spec import EvalSpec, policy_label

RUN_ONLY_FACTS = ("per_policy", "n_policies", "policy_calls")
"""Facts of the whole run that a policy's own record does not repeat."""


def policy_table(records: EpisodeTable, name: str) -> EpisodeTable:
    """Policy ``name``'s records, in episode order."""
    if not len(records):
        return records
    mask = records.column("policy") == name
    return records.take(np.flatnonzero(mask)).sorted_by_episode()


def build_run_record(spec: EvalSpec, segment: Segment, **kwargs: Any) -> EvalResult:
    """The one record of a run, one policy or several: :func:`~fasteval.run.record.build_record` or
    :func:`build_many_record` (the same keyword arguments), chosen by ``spec.n_policies``."""
    return (build_many_record if spec.n_policies > 1 else build_record)(spec, segment, **kwargs)


def build_many_record(spec: EvalSpec, segment: Segment, *, earlier: EarlierSegments | None = None,
                      task: Any = None, write_error: BaseException | None = None,
                      run_id: str | None = None) -> ManyPolicyResult:
    """See the module docstring (the arguments are :func:`~fasteval.run.record.build_record`'s)."""
    ledger = segment.ledger
    label = tuple(task) if task is not None else default_label(spec)
    names, K = spec.names, spec.n_policies
    records = EpisodeRows(ledger, label).table(signal=segment.success_signal)
    eval_s = segment.eval_s
    if earlier is not None and len(earlier.records):
        records = merge_episodes(earlier.records, records)
        eval_s += earlier.eval_s
    race = segment.stop
    block = race.summary() if race is not None else None
    signal_stop = ledger.starting_stopped and not ledger.halting
    facts = dict(segment.facts)
    per_policy_facts = facts.get("per_policy") or [{} for _ in range(K)]
    run_facts = {k: v for k, v in facts.items() if k not in RUN_ONLY_FACTS}
    videos = segment.outputs.get("video_paths_by_policy") or {}
    shard = facts.get("shard")  # a shard's run wants its own episodes of each policy (run/shards.py)
    n_wanted = len(range(shard["index"], spec.n_episodes, shard["count"])) if shard else spec.n_episodes
    video_episodes = segment.outputs.get("video_episodes_by_policy") or {}
    results: list[EvalResult] = []
    kept: list[EpisodeTable] = []
    totals = {"recorded": 0, "wanted": 0, "failed": 0}
    for p, name in enumerate(names):
        table = policy_table(records, name)
        limit = race.limit(p) if race is not None else None
        wanted = (n_wanted if limit is None else limit)
        if limit is not None:
            table = table.take(np.flatnonzero(np.asarray(table.columns["episode_ix"]) < limit)) if len(table) else table
        rows = np.flatnonzero(ledger.policy_ids == p) if ledger.policy_ids is not None else np.zeros(0, np.int64)
        failed_rows = rows[ledger.failed[rows]]
        if limit is not None:
            failed_rows = failed_rows[ledger.episode_ids[failed_rows] < limit]
        n_failed = int(failed_rows.size)
        status = end_status(len(table), wanted, n_failed, segment.error, signal_stop, write_error)
        meta = {**spec_facts(spec.for_policy(p)), "vectorization": spec.vectorization, "pipeline": spec.pipeline,
                **run_facts, **per_policy_facts[p], "policy_name": name, "n_episodes": spec.n_episodes,
                "status": status}
        if earlier is not None:
            meta["segments"] = earlier.segments + 1
        if block is not None:
            entry = block["policies"][p]
            meta["race"] = {"rule": block["rule"], "episodes": entry["episodes"], "rank": entry["rank"],
                            "dropped_at": entry["dropped_at"],
                            "dropped_by": names[entry["dropped_by"]] if entry["dropped_by"] is not None else None,
                            # the interval valid at the race's stop (its own page leads with it)
                            "metric": block["metric"], "estimate": entry["estimate"], "ci_low": entry["cs_low"],
                            "ci_high": entry["cs_high"], "interval": race_interval_label(block)}
        errors = [e for e in segment.errors if e.get("policy") == name]
        if run_id is not None:
            errors = [{**e, "run_id": run_id} for e in errors]
        own_videos = tuple(videos.get(name, ()))
        if limit is not None and name in video_episodes:  # a video of an episode the race does not count is not listed
            own_videos = tuple(v for v, e in zip(own_videos, video_episodes[name]) if e < limit)
        results.append(EvalResult(table, eval_s, segment.timings, meta, video_paths=own_videos,
                                  errors=errors, n_failed=n_failed))
        kept.append(table)
        totals["recorded"] += len(table)
        totals["wanted"] += wanted
        totals["failed"] += n_failed
    outcomes, ixs = _outcomes(results, block)
    metric, note = rank_metric(spec, block, has_success_signal(records.columns["has_success_signal"]))
    refs = [policy_label(p) for p in spec.policies]
    values = [o[metric] for o in outcomes]
    ranking = race_ranking(block, refs) if block is not None else \
        fixed_ranking(names, refs, ixs, values, metric, spec.confidence)
    bounds, bounds_source = spec.metric_bounds(metric)
    trajectory = interval_trajectory(names, values, metric, spec.confidence, bounds)
    if trajectory is not None and bounds_source is not None:
        trajectory["bounds_source"] = bounds_source
    verdict = ranking_verdict(ranking, block, note)
    status = end_status(totals["recorded"], totals["wanted"], totals["failed"], segment.error, signal_stop, write_error)
    meta = {**spec_facts(spec), "vectorization": spec.vectorization, "pipeline": spec.pipeline, **facts,
            "n_episodes": spec.n_episodes, "status": status}
    meta.pop("per_policy", None)
    if earlier is not None:
        meta["segments"] = earlier.segments + 1
    labels = {"run_id": run_id} if run_id is not None else {}
    errors = [{**e, **labels} for e in segment.errors] if labels else segment.errors
    return ManyPolicyResult(EpisodeTable.concat(kept) if kept else EpisodeTable.empty(), eval_s, segment.timings, meta,
                            video_paths=segment.outputs.get("video_paths", ()), errors=errors,
                            n_failed=totals["failed"], policies=results, names=names, ranking=ranking, race=block,
                            trajectory=trajectory, verdict=verdict)


def rank_metric(spec: EvalSpec, block: Any, has_signal: bool) -> tuple[str, str | None]:
    """The metric the ranking uses and a note that says why: the race's; else ``--rank-by``; else success where
    the env has a success signal, otherwise the return. ``--rank-by success`` on an env without a success
    signal ranks by the return, and says so (every policy would read 0%)."""
    if block is not None:
        return block["metric"], (f"raced on the {WORDS[block['metric']]}"
                                 + (f"; bounds {block['return_bounds']} {block['bounds_source']}"
                                    if block.get("bounds_source") else ""))
    if spec.rank_by == SUCCESS and not has_signal:
        return RETURN, ("--rank-by success, but the env reports no success signal (every policy would read 0%): "
                        "ranked by mean return instead")
    if spec.rank_by is not None:
        return spec.rank_by, f"ranked by {WORDS[spec.rank_by]} (--rank-by {spec.rank_by})"
    return (SUCCESS if has_signal else RETURN), default_metric_note(has_signal)


def _outcomes(results: list[EvalResult], block: Any) -> tuple[list[dict[str, np.ndarray]], list[np.ndarray]]:
    """Per policy: each metric's per-episode values (successes as floats) and the episode indices, in episode
    order."""
    out, ixs = [], []
    for r in results:
        table = r.per_episode
        out.append({m: np.asarray(table.columns[f], dtype=np.float64) for m, f in FIELDS.items()})
        ixs.append(np.asarray(table.columns["episode_ix"]))
    return out, ixs
