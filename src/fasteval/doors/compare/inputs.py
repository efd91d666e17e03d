"""The inputs of ``fasteval compare``: run folders, run logs and sweep cells, paired by task and seed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from fasteval.doors.compare.side import CELL_SEPARATOR, Side  # noqa: F401  (Side: re-exported, its old home)
from fasteval.types.errors import UserInputError

PAIR_KEYS = ("env", "env_kwargs")


# -- loading -----------------------------------------------------------------------------------------
def load_side(ref: str, label: str) -> Side:
    """A run folder, one policy of a many-policy run folder (``RUN::POLICY``) or a sweep cell
    (``DIR::POLICY[::ENV]``) -> :class:`Side`; UserInputError otherwise."""
    if CELL_SEPARATOR in ref:
        folder = Path(ref.partition(CELL_SEPARATOR)[0])
        if (folder / "eval_info.json").is_file() or (folder / "manifest.json").is_file():
            from fasteval.doors.compare.many import load_run_policy

            return load_run_policy(ref, label)
        return _load_sweep_cell(ref, label)
    folder = Path(ref)
    if not folder.is_dir():
        raise UserInputError(f"compare {label}: {ref!r} is not a folder; expected a run folder (with eval_info.json) "
                             f"or a sweep cell SWEEP_DIR{CELL_SEPARATOR}POLICY[{CELL_SEPARATOR}ENV].")
    info = folder / "eval_info.json"
    if info.is_file():
        return _from_eval_info(info, label)
    if (folder / "episodes.jsonl").is_file() and (folder / "manifest.json").is_file():
        return _from_run_log(folder, label)
    raise UserInputError(f"compare {label}: {ref!r} holds neither eval_info.json nor episodes.jsonl + manifest.json; "
                         f"expected the output folder of a fasteval run.")


def _read_json(path: Path, label: str) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UserInputError(f"compare {label}: cannot read {path} ({exc}).") from None


def _from_eval_info(path: Path, label: str) -> Side:
    doc = _read_json(path, label)
    if isinstance(doc, dict) and isinstance(doc.get("policies"), dict):
        raise UserInputError(f"compare {label}: {path.parent} is a run of {len(doc['policies'])} policies "
                             f"({', '.join(doc['policies'])}); name one: {path.parent}{CELL_SEPARATOR}POLICY.")
    if not isinstance(doc, dict) or not isinstance(doc.get("per_episode"), list):
        raise UserInputError(f"compare {label}: {path} has no per_episode list; expected a fasteval eval_info.json.")
    meta = doc.get("meta") or {}
    rule = (doc.get("stopping") or {}).get("rule") if isinstance(doc.get("stopping"), dict) else None
    return Side(label, str(path.parent), meta.get("policy"), meta.get("env"), meta.get("env_kwargs") or {},
                meta.get("seed"), doc["per_episode"], stop_when=rule or meta.get("stop_when"),
                policy_block=meta.get("policy_block", 0))


def _from_run_log(folder: Path, label: str) -> Side:
    from fasteval.run.rundir import RunDirectory

    run = RunDirectory(folder)
    from fasteval.run.record import manifest_spec

    spec = manifest_spec(_read_json(folder / "manifest.json", label))
    return Side(label, str(folder), spec.get("policy"), spec.get("env"), spec.get("env_kwargs") or {},
                spec.get("seed"), run.records(), stop_when=spec.get("stop_when"), policy_block=spec.get("policy_block"))


def _load_sweep_cell(ref: str, label: str) -> Side:
    from fasteval.doors.sweep.store import Store

    folder, _, rest = ref.partition(CELL_SEPARATOR)
    policy, _, env = rest.partition(CELL_SEPARATOR)
    store = Store(folder, create=False)
    try:
        episodes = [ep for ep in store.episodes() if ep["policy_name"] == policy and (not env or ep["env_name"] == env)]
        settings = json.loads(store.meta("settings") or "{}") or {}
    finally:
        store.close()
    if not episodes:
        raise UserInputError(f"compare {label}: the sweep {folder!r} has no episodes of policy {policy!r}"
                             f"{f' on env {env!r}' if env else ''}.")
    envs = sorted({(ep["env_id"], ep["env_kwargs"]) for ep in episodes})
    if len(envs) > 1:
        names = sorted({ep["env_name"] for ep in episodes})
        raise UserInputError(f"compare {label}: policy {policy!r} ran on several envs in {folder!r} ({', '.join(names)}); "
                             f"name one: {folder}{CELL_SEPARATOR}{policy}{CELL_SEPARATOR}ENV.")
    env_id, env_kwargs = envs[0]
    return Side(label, ref, episodes[0]["policy_ref"], env_id, json.loads(env_kwargs or "{}"),
                min(ep["seed"] for ep in episodes), episodes, stop_when=settings.get("stop_when"))


# -- pairing -------------------------------------------------------------------------------------------
def block_note(a: Side, b: Side) -> str | None:
    """A line naming a difference in rows per policy call (``policy_block``), which changes the float rounding of
    every episode: the two runs are still paired, but an equal policy would not give equal numbers."""
    if a.policy_block is None or b.policy_block is None or a.policy_block == b.policy_block:
        return None
    def words(r: int) -> str:
        return "the whole batch" if r == 0 else f"blocks of {r} rows"
    return (f"A called its policy on {words(a.policy_block)} (--policy-block {a.policy_block}), B on "
            f"{words(b.policy_block)} (--policy-block {b.policy_block}): a different evaluation, whose float rounding "
            f"differs; rerun one with the other's --policy-block for a like-for-like comparison.")


def _task_key(record: dict[str, Any]) -> tuple[Any, Any]:
    return (record.get("task_group"), record.get("task_id"))


def pair_episodes(a: Side, b: Side) -> list[dict[str, Any]]:
    """Per task: the paired records (same task, same reset seed), in seed order.

    Refuses (UserInputError) runs of different envs, or with no episode in common. Episodes only
    one run has (one stopped earlier, say) are left out and counted in ``unpaired_a``/``unpaired_b``.
    """
    for key in PAIR_KEYS:
        if getattr(a, key) != getattr(b, key):
            raise UserInputError(f"compare: the runs are not paired: A has {key} {getattr(a, key)!r}, B has "
                                 f"{getattr(b, key)!r}. Compare runs of the same env with the same seeds.")
    index_a = {(_task_key(r), int(r["seed"])): r for r in a.records}
    index_b = {(_task_key(r), int(r["seed"])): r for r in b.records}
    common = sorted(set(index_a) & set(index_b), key=lambda k: (str(k[0]), k[1]))
    if not common:
        raise UserInputError(f"compare: the runs share no episode (no task and reset seed in common: A starts at seed "
                             f"{a.seed}, B at seed {b.seed}). Rerun one with the other's --seed.")
    tasks: dict[tuple[Any, Any], dict[str, Any]] = {}
    for key in common:
        ra, rb = index_a[key], index_b[key]
        task = tasks.setdefault(key[0], {"task_group": ra.get("task_group"), "task_id": ra.get("task_id"),
                                         "task": ra.get("task"), "a": [], "b": []})
        task["a"].append(ra)
        task["b"].append(rb)
    for task in tasks.values():
        task["unpaired_a"] = sum(1 for k in index_a if k[0] == (task["task_group"], task["task_id"])) - len(task["a"])
        task["unpaired_b"] = sum(1 for k in index_b if k[0] == (task["task_group"], task["task_id"])) - len(task["b"])
    return list(tasks.values())


def _has_signal(records: Sequence[dict[str, Any]]) -> bool:
    return any(r.get("has_success_signal", True) is not False for r in records)


