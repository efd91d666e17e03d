"""``fasteval merge``: the run folders of one evaluation's shards, merged into the one record of the whole.

Each folder is a run over some of the evaluation's episode indices (``--shard K/N``,
:mod:`fasteval.run.shards`; any complete run folder of the same evaluation counts, a one-process run
included). The merge:

1. reads each folder's ``manifest.json`` and refuses (:class:`~fasteval.types.errors.UserInputError`,
   exit 2) a folder of another evaluation: its *what* (env, policy, seed, ``n_episodes``, step cap, ...),
   its policy's weight digest or its resolved step cap differs from the first folder's; and a folder whose
   run has not ended ``complete`` (it says how to finish it: ``fasteval --resume DIR``);
2. reads each folder's records (every one must carry its folder's ``run_id`` and seed ``seed + i``) and
   refuses episodes recorded in two folders (overlapping shards) and episodes of ``0..n-1`` in none
   (a missing shard), naming them;
3. builds the one record (:class:`~fasteval.types.eval_result.EvalResult`): the per-episode table in
   episode order, as a one-process run's (its records identical, field for field, and so its aggregates);
   the engine seconds and stage timings summed over the folders (worker seconds: ``episodes_per_s`` is per
   worker); the first folder's facts of how it ran, with ``shards`` naming each folder;
4. writes it as a run folder of its own (``manifest.json``, ``episodes.jsonl``, ``errors.jsonl``,
   ``eval_info.json``, under a new ``run_id``), which ``--resume`` finds complete and ``fasteval report``
   draws.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from fasteval.core.capabilities import GLOBAL_RNG, POLICY_RNG
from fasteval.run.folder_lock import FolderLock
from fasteval.run.record import manifest_spec
from fasteval.run.rundir import (EPISODES, EVAL_INFO, MANIFEST, RESUME_IDENTITY, RunDirectory, RunIdentity,
                                 digested_lines, format_records, resume_command, same_value, table_lines, what_differences)
from fasteval.types.episode_table import EpisodeTable
from fasteval.types.errors import UserInputError
from fasteval.types.eval_result import RESUMED_GLOBAL_RNG, STATUS_COMPLETE, EvalResult

SHARDED_GLOBAL_RNG_TEXT = (
    "the policy draws its noise from torch's global RNG, which each shard seeds anew: every episode is a valid "
    "episode at its seed, but not the draws one process would have made. For draws that do not depend on the "
    "shards, run with --noise episode where the policy takes its noise as an argument.")
"""``meta[resumed_global_rng]`` of a merge of several folders whose policy draws from torch's global RNG."""

SUMMED_FACTS = ("dry_run_s", "capture_s", "n_out_of_range_actions")
"""Facts of a run's record that add up over the folders (the rest are the first folder's)."""
FOLDER_FACTS = ("shard", "segments", "status", "n_episodes", RESUMED_GLOBAL_RNG)
"""Facts of one folder's record that the merged record sets itself."""


@dataclass(frozen=True)
class Part:
    """One folder of the merge: its manifest, its records, its record's document (``eval_info.json``)."""

    path: Path
    manifest: dict[str, Any]
    records: list[dict[str, Any]]
    info: dict[str, Any]

    @property
    def name(self) -> str:
        shard = self.manifest.get("shard")
        return f"{self.path} (shard {shard['index']}/{shard['count']})" if shard else str(self.path)


def read_part(path: Path) -> Part:
    """One folder's manifest, records and ``eval_info.json``; UserInputError when it is not a finished run."""
    import json

    run_dir = RunDirectory(path)
    if not run_dir.has_manifest():
        raise UserInputError(f"merge: {path} holds no {MANIFEST}; expected the output folder of a fasteval run "
                             f"(fasteval --shard K/N -o DIR ...).")
    try:
        manifest = run_dir.read_manifest()
    except UserInputError as exc:
        raise UserInputError(str(exc).replace("--resume", "merge:", 1)) from None
    status = manifest.get("status")
    if status != STATUS_COMPLETE:
        raise UserInputError(f"merge: the run in {path} is {status!r}, not complete: some of its episodes are "
                             f"missing. Finish it first ({resume_command(path)}), then merge.")
    if manifest.get("stop_when") or (manifest.get("what") or {}).get("stop_when"):
        raise UserInputError(f"merge: the run in {path} stopped by a --stop-when rule: its episodes are a prefix "
                             f"chosen by its data, not a shard of a fixed evaluation. Merge runs of a fixed -n.")
    what = manifest_spec(manifest)
    records = run_dir.records(RunIdentity(manifest.get("run_id"), what["seed"], what["n_episodes"],
                                          what.get("policy_names") or None))
    try:
        info = json.loads((path / EVAL_INFO).read_text())
    except (OSError, ValueError) as exc:
        raise UserInputError(f"merge: {path / EVAL_INFO} is unreadable ({exc}); rebuild it with "
                             f"{resume_command(path)}.") from None
    return Part(path, manifest, records, info)


def check_same_evaluation(parts: Sequence[Part]) -> None:
    """Every folder must hold the first one's evaluation: its *what* (with ``n_episodes`` equal), its weights
    and its resolved step cap. UserInputError naming each difference."""
    first = parts[0]
    saved = manifest_spec(first.manifest)
    for part in parts[1:]:
        now = manifest_spec(part.manifest)
        diffs = [f"{key}: {had!r} in {first.path}, {has!r} in {part.path}"
                 for key, had, has in what_differences(saved, now)]
        if saved.get("n_episodes") != now.get("n_episodes"):
            diffs.append(f"n_episodes: {saved.get('n_episodes')!r} in {first.path}, {now.get('n_episodes')!r} in "
                         f"{part.path}")
        diffs += [f"{key}: {first.manifest.get(key)!r} in {first.path}, {part.manifest.get(key)!r} in {part.path}"
                  for key in RESUME_IDENTITY if not same_value(key, first.manifest.get(key), part.manifest.get(key))]
        if diffs:
            raise UserInputError(f"merge: {part.path} is a run of another evaluation than {first.path} "
                                 f"({'; '.join(diffs)}). Merge only the shards of one evaluation (the same what, "
                                 f"weights and step cap).")


def check_cover(parts: Sequence[Part], n_episodes: int, names: Sequence[str] | None = None) -> None:
    """Every episode of ``0..n_episodes-1`` (of every policy ``names`` of a many-policy evaluation) in exactly
    one folder: UserInputError naming overlaps and gaps."""
    owner: dict[tuple[Any, int], Part] = {}
    for part in parts:
        for record in part.records:
            ix = int(record["episode_ix"])
            key = (record.get("policy"), ix)
            if key in owner:
                which = f"episode {ix}" + (f" of policy {key[0]}" if key[0] is not None else "")
                raise UserInputError(
                    f"merge: {which} is recorded in {owner[key].name} and in {part.name}: the folders overlap "
                    f"(the same shard twice, or shards of different N). Give each episode's folder once.")
            owner[key] = part
    missing = sorted({i for i in range(n_episodes) for name in (names or (None,)) if (name, i) not in owner})
    if missing:
        counts = sorted({p.manifest["shard"]["count"] for p in parts if p.manifest.get("shard")})
        hint = ""
        if len(counts) == 1:
            have = {p.manifest["shard"]["index"] for p in parts if p.manifest.get("shard")}
            absent = [k for k in range(counts[0]) if k not in have]
            if absent:
                hint = f" Shards {', '.join(f'{k}/{counts[0]}' for k in absent[:8])} are not among the folders."
        shown = ", ".join(map(str, missing[:8])) + (", ..." if len(missing) > 8 else "")
        raise UserInputError(f"merge: {len(missing)} of the evaluation's {n_episodes} episodes are in none of the "
                             f"folders (episodes {shown}).{hint} Merge every shard of the evaluation.")


def merged_record(parts: Sequence[Part]) -> EvalResult:
    """The one record of the evaluation (see the module docstring); the folders are checked first."""
    if not parts:
        raise UserInputError("merge: expected at least one run folder.")
    check_same_evaluation(parts)
    what = manifest_spec(parts[0].manifest)
    n_episodes = int(what["n_episodes"])
    names = what.get("policy_names") or None
    check_cover(parts, n_episodes, names)
    if names:
        return _merged_many(parts, n_episodes)
    records = sorted((r for p in parts for r in p.records), key=lambda r: int(r["episode_ix"]))
    table = EpisodeTable.from_records(records)
    metas = [p.info.get("meta", {}) for p in parts]
    meta = {k: v for k, v in metas[0].items() if k not in FOLDER_FACTS}
    for key in SUMMED_FACTS:
        if any(key in m for m in metas):
            meta[key] = sum(m.get(key, 0) for m in metas)
    meta["has_success_signal"] = any(m.get("has_success_signal") for m in metas)
    if len(parts) > 1 and any(m.get(POLICY_RNG) == GLOBAL_RNG for m in metas):
        meta[RESUMED_GLOBAL_RNG] = SHARDED_GLOBAL_RNG_TEXT
    elif any(m.get(RESUMED_GLOBAL_RNG) for m in metas):
        meta[RESUMED_GLOBAL_RNG] = next(m[RESUMED_GLOBAL_RNG] for m in metas if m.get(RESUMED_GLOBAL_RNG))
    meta["n_episodes"] = n_episodes
    meta["segments"] = sum(int(m.get("segments", 1)) for m in metas)
    meta["shards"] = _shards_fact(parts)
    meta["status"] = STATUS_COMPLETE
    timings: dict[str, float] = {}
    for part in parts:
        for stage, seconds in (part.info.get("timings") or {}).items():
            timings[stage] = timings.get(stage, 0.0) + float(seconds)
    eval_s = sum(_eval_s(p) for p in parts)
    errors = [e for p in parts for e in p.info.get("errors", [])]
    videos = [v for p in parts for v in p.info.get("overall", {}).get("video_paths", [])]
    return EvalResult(table, eval_s, timings, meta, video_paths=videos, errors=errors)


def _merged_many(parts: Sequence[Part], n_episodes: int) -> EvalResult:
    """The one record of a many-policy evaluation's folders: the record a resume would build from every
    folder's records (:func:`fasteval.run.record_many.build_many_record`, the one builder of it: each policy's
    episodes and aggregates, the ranking), with the first folder's facts and ``shards`` naming each folder."""
    import numpy as np

    from fasteval.core.ledger import Ledger
    from fasteval.core.outcome import Segment
    from fasteval.run.record_many import build_many_record
    from fasteval.types.eval_result import EarlierSegments
    from fasteval.types.spec import EvalSpec

    spec = EvalSpec.from_dict(parts[0].manifest)
    metas = [p.info.get("meta", {}) for p in parts]
    facts = {k: v for k, v in metas[0].items() if k not in FOLDER_FACTS}
    for key in SUMMED_FACTS:
        if any(key in m for m in metas):
            facts[key] = sum(m.get(key, 0) for m in metas)
    facts["per_policy"] = [{k: v for k, v in p.get("meta", {}).items() if k.startswith("policy_")}
                           for p in parts[0].info.get("policies", {}).values()] or None
    facts["shards"] = _shards_fact(parts)
    timings: dict[str, float] = {}
    for part in parts:
        for stage, seconds in (part.info.get("timings") or {}).items():
            timings[stage] = timings.get(stage, 0.0) + float(seconds)
    records = sorted((r for p in parts for r in p.records), key=lambda r: (int(r["episode_ix"]), r["policy"]))
    segments = sum(int(m.get("segments", 1)) for m in metas)
    earlier = EarlierSegments(EpisodeTable.from_records(records), sum(_eval_s(p) for p in parts), segments - 1)
    K = spec.n_policies
    empty = Ledger(0, 1, spec.seed, np.zeros(0, np.int64), np.zeros(0, np.int64), K, spec.names)
    errors = tuple(e for p in parts for e in p.info.get("errors", []))
    segment = Segment(ledger=empty, errors=errors, eval_s=0.0, timings=timings, facts=facts,
                      success_signal=any(m.get("has_success_signal") for m in metas), cap=n_episodes)
    return build_many_record(spec, segment, earlier=earlier)


def _eval_s(part: Part) -> float:
    return float(part.info.get("overall", {}).get("eval_s") or 0.0)


def _shards_fact(parts: Sequence[Part]) -> list[dict[str, Any]]:
    """``meta["shards"]``: each folder merged, its run id, shard, episodes and engine seconds."""
    return [{"folder": str(p.path), "run_id": p.manifest.get("run_id"),
             **({"shard": p.manifest["shard"]} if p.manifest.get("shard") else {}),
             "n_episodes": len(p.records), "eval_s": p.info.get("overall", {}).get("eval_s")} for p in parts]


def merge_folders(folders: Sequence[str | Path], out: str | Path) -> EvalResult:
    """Merge the run folders ``folders`` of one evaluation into the new run folder ``out`` (see the module
    docstring); returns the merged record. UserInputError (exit 2) for a bad merge; ``out`` is not touched then."""
    out = Path(out)
    paths = [Path(f) for f in folders]
    if len({p.resolve() for p in paths}) != len(paths):
        raise UserInputError("merge: a folder is given twice; its episodes would overlap themselves. Give each "
                             "shard's folder once.")
    if any(p.resolve() == out.resolve() for p in paths):
        raise UserInputError(f"merge: the output folder {out} is one of the folders merged. Choose another -o.")
    parts = [read_part(p) for p in paths]
    record = merged_record(parts)
    run_dir = RunDirectory(out)
    if run_dir.has_manifest() or run_dir.has_records():
        raise UserInputError(f"merge: {out} already holds a fasteval run. Choose another -o.")
    out.mkdir(parents=True, exist_ok=True)
    lock = FolderLock(out)
    lock.acquire()
    try:
        run_id = uuid.uuid4().hex
        first = parts[0].manifest
        manifest = {k: v for k, v in first.items() if k not in ("shard", "segments", "status", "run_id", "error")}
        manifest.update(run_id=run_id, status=STATUS_COMPLETE,
                        segments=[{**s, "folder": str(p.path), **({"shard": p.manifest["shard"]}
                                                                    if p.manifest.get("shard") else {})}
                                  for p in parts for s in p.manifest.get("segments", [])],
                        merged_from=record.meta["shards"])
        lines = table_lines(_with_run_id(record.per_episode, run_id))
        digest = first.get("what_digest")  # the evaluation's: every shard of it has the same (merge checks the what)
        (out / EPISODES).write_text(digested_lines(lines, digest) if digest else lines)
        errors = [{**e, "run_id": run_id} for e in record.errors]
        if errors:
            (out / "errors.jsonl").write_text(format_records(errors))
        run_dir.write_eval_info(record.eval_info_document())
        run_dir.write_manifest(manifest)
    finally:
        lock.release()
    return record


def _with_run_id(table: EpisodeTable, run_id: str) -> EpisodeTable:
    """``table`` whose rows carry ``run_id`` (the lines of a run folder's ``episodes.jsonl`` do)."""
    import numpy as np

    extra = dict(table.extra or {})
    extra["run_id"] = np.full(len(table), run_id, dtype=object)
    return EpisodeTable(table.columns, table.task_codes, table.tasks, extra)
