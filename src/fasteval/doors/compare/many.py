"""``fasteval compare RUN::A RUN::B``: two policies of one many-policy run folder (or of two).

A many-policy run (``--policy A --policy B ...``) writes one ``eval_info.json`` whose ``policies`` map holds
each policy's own fields, and one ``episodes.jsonl`` whose records name their ``policy``. Either is read
here into a :class:`~fasteval.doors.compare.side.Side` of the one policy named after ``::``: its
records, its reference, and the run's env and seed. Its episodes are paired with the other side's as any
two runs' are (same task, same reset seed): a race's dropped policy brings its episodes ``0..k-1``, and
the side says the race's rule (``stop_when``: its n came from the data).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fasteval.doors.compare.side import CELL_SEPARATOR, Side
from fasteval.types.errors import UserInputError


def load_run_policy(ref: str, label: str) -> Side:
    """``RUN::POLICY`` -> the Side of that policy (from ``eval_info.json``, else from the run's log)."""
    folder_text, _, name = ref.partition(CELL_SEPARATOR)
    folder = Path(folder_text)
    info = folder / "eval_info.json"
    if info.is_file():
        doc = _read(info, label)
        policies = doc.get("policies") if isinstance(doc, dict) else None
        if not isinstance(policies, dict):
            raise UserInputError(f"compare {label}: {folder} is a run of one policy; give the folder itself "
                                 f"(without {CELL_SEPARATOR}{name}).")
        if name not in policies:
            raise UserInputError(f"compare {label}: the run {folder} has no policy {name!r}; it has "
                                 f"{', '.join(policies)}.")
        entry = policies[name]
        meta = entry.get("meta") or {}
        race = meta.get("race") if isinstance(meta.get("race"), dict) else {}
        return Side(label, ref, meta.get("policy"), meta.get("env"), meta.get("env_kwargs") or {}, meta.get("seed"),
                    entry.get("per_episode") or [], stop_when=race.get("rule") or meta.get("stop_when"))
    from fasteval.run.record import manifest_spec
    from fasteval.run.rundir import RunDirectory

    spec = manifest_spec(_read(folder / "manifest.json", label))
    names = spec.get("policy_names") or []
    if name not in names:
        raise UserInputError(f"compare {label}: the run {folder} has no policy {name!r}; it has "
                             f"{', '.join(names) or 'one unnamed policy'}.")
    records = [r for r in RunDirectory(folder).records() if r.get("policy") == name]
    return Side(label, ref, spec["policy"][names.index(name)], spec.get("env"), spec.get("env_kwargs") or {},
                spec.get("seed"), records, stop_when=spec.get("stop_when"))


def _read(path: Path, label: str) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UserInputError(f"compare {label}: cannot read {path} ({exc}).") from None
