"""The record of a run, built once, in this module: every file, page and summary of a run is a view of it.

A run's record is an :class:`~fasteval.types.eval_result.EvalResult` (frozen; its ``meta`` and
``timings`` are read-only) built by :func:`build_record` from:

* the spec (:mod:`fasteval.types.spec`: its *what* and *how*);
* the segment the engine handed up (:class:`~fasteval.core.outcome.Segment`): the ledger's finished rows,
  the faults, the stop rule (finished), the engine's facts and what the recorders made (videos, episode
  data);
* the earlier segments of a resumed run (:class:`~fasteval.types.eval_result.EarlierSegments`);
* the task's label (a suite's task; default: the env's names);
* a write that failed (the final flush of ``episodes.jsonl``, ``eval_info.json``): the run's results
  are then not all kept, so it ended ``failed``.

The end state of a run (complete, interrupted, failed; a ``--stop-when`` run that stopped by its rule
is complete, with ``stopping.reason == "rule"``) is decided in one place, :func:`end_status`. The
manifest (:func:`manifest_document`), ``episodes.jsonl`` (:class:`EpisodeRows`), ``eval_info.json``,
the CLI's summary and exit code, the sinks, the report pages, the bench report and the sweep store all
render from the record or from this module's builders; none of them changes it.

The facts of a run that come from its spec are written by one function, :func:`spec_facts` (the
record's ``meta``, the manifest and the bench report's header use it).
"""

from __future__ import annotations

import json
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from fasteval.core.capabilities import GLOBAL_RNG, POLICY_RNG
from fasteval.core.ledger import Ledger
from fasteval.core.outcome import Segment
from fasteval.core.stopping import cut_at_stop, stopping_meta
from fasteval.types.eval_result import (RESUMED_GLOBAL_RNG, RESUMED_GLOBAL_RNG_TEXT, STATUS_COMPLETE, STATUS_FAILED,
                                        STATUS_INTERRUPTED, EarlierSegments, EvalResult)
from fasteval.types.episode_table import EpisodeTable
from fasteval.types.json_writer import column_texts, row_template, row_texts, scalar_text
from fasteval.types.spec import EvalSpec, env_label
from fasteval.version import __version__

Label = tuple[Any, Any, Any]
"""``(task_group, task_id, task)``: the task every record of a run carries."""


def end_status(n_recorded: int, n_wanted: int, n_failed: int, error: BaseException | None, stop_requested: bool,
               write_error: BaseException | None = None) -> str:
    """The end state of a run, decided here only.

    * ``failed``: a write of its results failed (``write_error``: they are not all kept; ``--resume``
      finishes it), an error stopped it, or episodes failed for good;
    * ``interrupted``: a stop request (the first SIGINT/SIGTERM) or a second signal (a KeyboardInterrupt)
      kept wanted episodes from running;
    * ``complete``: every wanted episode is recorded (for a ``--stop-when`` run that stopped by its rule,
      the wanted episodes are ``0..k-1``). A stop request that came after the last episode had started
      changes nothing.
    """
    if write_error is not None:
        return STATUS_FAILED
    if n_recorded == n_wanted and error is None and not n_failed:
        return STATUS_COMPLETE
    if stop_requested or isinstance(error, KeyboardInterrupt):
        return STATUS_INTERRUPTED
    if error is not None or n_failed:
        return STATUS_FAILED
    return STATUS_COMPLETE


def default_label(spec: EvalSpec) -> Label:
    """The task of a one-task run: LeRobot's names for its env types (``pusht``, ``push-v3``), else the env id
    (a live env object or factory: its label, ``<ClassName>``)."""
    from fasteval.robot.env_names import task_label

    if not isinstance(spec.env, str):
        return (env_label(spec.env), 0, env_label(spec.env))
    return task_label(spec.env, spec.env_kwargs)


def spec_facts(spec: EvalSpec) -> dict[str, Any]:
    """The facts of a run that its spec gives, as every view of the run shows them (the record's ``meta``,
    the manifest, the bench report): the version that ran it, the env, the policy (a live object by its
    class name), the seed of episode 0, the episodes asked for, the step cap and device asked for."""
    what = spec.what.to_dict()
    return {
        "fasteval_version": __version__,
        "env": env_label(spec.env),
        "env_kwargs": what["env_kwargs"],
        "policy": what["policy"],
        **({"policy_names": what["policy_names"]} if spec.n_policies > 1 else {}),
        "seed": spec.seed,
        "n_episodes": spec.n_episodes,
        "max_steps": spec.max_steps,
        "device": spec.device,
    }


class EpisodeRows:
    """The per-episode records of a ledger's rows, as a columnar table: the one place they are built
    (the record of a run, the lines of ``episodes.jsonl``, a sweep job's batches).

    ``table(rows)`` reads the ledger's arrays for ``rows`` (default: every finished row, in ledger order,
    as views of the ledger's arrays when every row finished); the records of many rows are built at once
    (the run log builds them 256 at a time). ``has_success_signal``: whether the envs had reported
    ``info["is_success"]`` when the rows were handed up (``ledger.success_signal``). A new per-episode
    field is one more column here (and in :data:`~fasteval.types.episode_table.COLUMN_DTYPES`).
    """

    def __init__(self, ledger: Ledger, label: Label):
        self.ledger, self.label = ledger, tuple(label)
        self._templates: dict[Any, str] = {}

    def table(self, rows: Any = None, signal: bool | None = None, run_id: str | None = None) -> EpisodeTable:
        """The records of ``rows``; with ``run_id``, each also carries the run folder's id (the lines of
        ``episodes.jsonl`` do: a resume tells the run's records from another's)."""
        columns, policies = self._columns(rows)
        n = columns["episode_ix"].size
        signal = self.ledger.success_signal if signal is None else signal
        columns["has_success_signal"] = np.broadcast_to(np.bool_(signal), (n,))
        extra = {} if policies is None else {"policy": policies}
        if run_id is not None:
            extra["run_id"] = np.full(n, run_id, dtype=object)
        return EpisodeTable(columns, np.zeros(1, np.int64), [self.label], extra or None)

    def texts(self, rows: Any, *, run_id: str | None = None, compact: bool = False,
              encode: Callable[[Any], str] | None = None) -> list[str]:
        """The JSON text of each of ``rows``' records: exactly what ``table(rows, run_id=run_id)``'s rows
        encode to (:func:`~fasteval.types.json_writer.row_texts`; the lines of ``episodes.jsonl`` with
        ``compact``), from the same columns, without the table or a dict per row."""
        columns, policies = self._columns(rows)
        numbers = {k: column_texts(c) for k, c in columns.items()}
        signal = bool(self.ledger.success_signal)
        constants = {"has_success_signal": signal, **({} if run_id is None else {"run_id": run_id})}
        extra = {}
        if policies is not None:  # each row's policy name, as the table's extra column encodes it
            text = {name: scalar_text(name, encode or json.dumps) for name in self.ledger.policy_names}
            extra["policy"] = [text[name] for name in policies.tolist()]
        key = (signal, run_id, compact, encode)  # a run log's groups share one template
        template = self._templates.get(key)
        if template is None:
            template = self._templates[key] = row_template(self.label, tuple(extra), constants, compact, encode)
        return row_texts(numbers, columns["episode_ix"].size, task=self.label, extra=extra, constants=constants,
                         template=template)

    def _columns(self, rows: Any) -> tuple[dict[str, np.ndarray], np.ndarray | None]:
        """Every numeric column but ``has_success_signal`` (a run's constant), for ``rows``; and, in a
        many-policy run, each row's policy name (else ``None``)."""
        ledger = self.ledger
        n = ledger.n_episodes
        if rows is None:
            rows = np.flatnonzero(ledger.finished[:n])
            pick = (lambda a: a[:n]) if rows.size == n else (lambda a: a[rows])
        else:
            rows = np.asarray(rows, dtype=np.int64)
            pick = lambda a: a[rows]  # noqa: E731
        ids = pick(ledger.episode_ids)
        columns = {"episode_ix": ids, "seed": ids + ledger.seed, "sum_reward": pick(ledger.sum_reward),
                   "max_reward": pick(ledger.max_reward), "length": pick(ledger.length),
                   "success": pick(ledger.success), "nan_rewards": pick(ledger.nan_rewards)}
        if ledger.policy_names is not None:  # a many-policy run: each record names its policy (not numeric)
            return columns, np.asarray(ledger.policy_names, dtype=object)[pick(ledger.policy_ids)]
        return columns, None


def build_record(spec: EvalSpec, segment: Segment, *, earlier: EarlierSegments | None = None,
                 task: Label | None = None, write_error: BaseException | None = None,
                 run_id: str | None = None) -> EvalResult:
    """The one record of a run (see the module docstring): this segment's finished rows merged with the
    earlier segments', cut at the stop rule's ``k``, its end state decided by :func:`end_status`.
    ``run_id``: a durable run's folder id, which its fault records carry (as in ``errors.jsonl``). A
    many-policy run's record is a :class:`~fasteval.types.many_result.ManyPolicyResult`, built by
    :func:`fasteval.run.record_many.build_many_record` (:func:`~fasteval.run.record_many.build_run_record`
    picks the builder; this module does not import that one, which imports this one)."""
    if spec.n_policies > 1:
        raise ValueError("build_record builds a one-policy run's record; a many-policy run's: "
                         "fasteval.run.record_many.build_run_record")
    ledger = segment.ledger
    label = tuple(task) if task is not None else default_label(spec)
    records = EpisodeRows(ledger, label).table(signal=segment.success_signal)
    n_failed = int(ledger.failed.sum())
    stop_requested = ledger.limit < ledger.n_episodes
    wanted = ledger.n_episodes
    eval_s = segment.eval_s
    meta: dict[str, Any] = {**spec_facts(spec), "vectorization": spec.vectorization, "pipeline": spec.pipeline,
                            **segment.facts}
    if earlier is not None:
        if earlier.resumed_global_rng or (len(earlier.records) and len(records) and meta.get(POLICY_RNG) == GLOBAL_RNG):
            meta[RESUMED_GLOBAL_RNG] = RESUMED_GLOBAL_RNG_TEXT
        records, eval_s = earlier.merged(records), earlier.eval_s + eval_s
        wanted += len(earlier.records)
        meta["segments"] = earlier.segments + 1
    n_episodes = wanted
    stop = segment.stop
    if stop is not None:
        records, block = cut_at_stop(records, stop)
        n_episodes = stop.monitor.cap
        meta.update(stopping_meta(block, label))
        if stop.fired:  # the rule decided: the wanted episodes are 0..k-1
            n_failed = int(ledger.failed[ledger.episode_ids < stop.k].sum())
            wanted, stop_requested = len(records) + n_failed, False
    meta["n_episodes"] = n_episodes
    meta["status"] = end_status(len(records), wanted, n_failed, segment.error, stop_requested, write_error)
    labels = {**({"task_group": label[0], "task_id": label[1], "task": label[2]} if task is not None else {}),
              **({"run_id": run_id} if run_id is not None else {})}
    errors = [{**e, **labels} for e in segment.errors] if labels else segment.errors
    outputs = segment.outputs
    episode_data = outputs.get("episode_data")
    if stop is not None and stop.k is not None and episode_data is not None:
        episode_data = episodes_before(episode_data, stop.k)
    return EvalResult(records, eval_s, segment.timings, meta, video_paths=outputs.get("video_paths", ()),
                      errors=errors, n_failed=n_failed, episode_data=episode_data)


def episodes_before(episode_data: Any, k: int) -> Any:
    """Saved steps (a TensorDict ``[total]`` with an ``episode`` column) of episodes ``0..k-1`` only: the
    episodes a fired stop rule reports (those computed past ``k`` are not the run's)."""
    if "episode" not in episode_data.keys():  # no episode finished: an empty TensorDict
        return episode_data
    keep = episode_data["episode"] < k
    return episode_data if bool(keep.all()) else episode_data[keep]


def merge_records(tasks: Sequence[Mapping[str, Any]], records: Sequence[EvalResult], eval_s: float,
                  concurrency: int = 1, env: str | None = None) -> EvalResult:
    """The record of a suite: its tasks' records, one after another. ``tasks``: one mapping per record
    (``task_group``, ``task_id``, ``task``, ``env``, ``env_kwargs``), in the same order; ``env``: the
    suite's name for its envs (default: none, as each task names its own). Its status is the first
    task's that did not complete (a suite stops there), else ``complete``."""
    from fasteval.types.sequential.rules import overall_stopping

    table = EpisodeTable.concat([r.per_episode for r in records])
    timings: dict[str, float] = {}
    for r in records:
        for stage, seconds in r.timings.items():
            timings[stage] = timings.get(stage, 0.0) + seconds
    meta = {k: v for k, v in records[0].meta.items() if k not in ("env", "env_kwargs")}
    if env is not None:
        meta["env"] = env
    meta["suite"] = True
    meta["concurrency"] = concurrency
    blocks = [block for r in records for block in r.meta.get("stopping_per_task", [])]
    if blocks:  # --stop-when: every task stopped on its own; the tasks' blocks and the overall one
        column = "success" if blocks[0]["metric"] == "success" else "sum_reward"
        outcomes = [r.column(column) for r in records if r.meta.get("stopping_per_task")]
        meta.update(stopping_per_task=blocks, stopping=overall_stopping(blocks, outcomes))
    meta["n_episodes"] = sum(r.meta.get("n_episodes", len(r.per_episode)) for r in records)
    meta["tasks"] = [{**dict(t), "n_episodes": len(r.per_episode), "eval_s": r.eval_s, "status": r.meta.get("status")}
                     for t, r in zip(tasks, records)]
    meta["status"] = next((r.meta.get("status") for r in records if r.meta.get("status") != STATUS_COMPLETE),
                          STATUS_COMPLETE)
    data = {f"{t['task_group']}/{t['task_id']}": r.episode_data for t, r in zip(tasks, records)
            if r.episode_data is not None}
    return EvalResult(table, eval_s, timings, meta, video_paths=[p for r in records for p in r.video_paths],
                      errors=[e for r in records for e in r.errors], n_failed=sum(r.n_failed for r in records),
                      episode_data=data or None)


def manifest_document(spec: EvalSpec, identity: Mapping[str, Any], status: str, segments: Sequence[Mapping[str, Any]],
                      error: BaseException | None = None) -> dict[str, Any]:
    """``manifest.json``: the spec's facts, its two halves (``what``: a resume must keep it; ``how``: a
    resume may change it), the run's identity (``run_id``, ``policy_digest``, the resolved ``max_steps``,
    ``provenance``), its status and segments, and the error that ended it."""
    return {**spec_facts(spec), **identity, "what": spec.what.to_dict(), "how": spec.how.to_dict(),
            "status": status, "segments": [dict(s) for s in segments],
            **({"error": f"{type(error).__name__}: {error}"} if error is not None else {})}


def manifest_spec(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The flat spec fields a manifest holds: its ``what`` and ``how`` (or an older fasteval's ``spec``)."""
    if "what" in manifest:
        from fasteval.types.spec import LEGACY_WHAT_DEFAULTS

        return {**LEGACY_WHAT_DEFAULTS, **manifest.get("what", {}), **manifest.get("how", {})}
    from fasteval.types.spec import LEGACY_WHAT_DEFAULTS

    return {**LEGACY_WHAT_DEFAULTS, **(manifest.get("spec") or {})}
