"""``fasteval compare RUN_A RUN_B``: two policies on the same episodes, tested in pairs.

Inputs: two run folders (``eval_info.json``, or ``episodes.jsonl`` + ``manifest.json`` of a run
that did not finish), or two sweep cells written ``SWEEP_DIR::POLICY`` (``::ENV`` when the sweep
has several envs). Both must share the env (id and kwargs) and the seeds: episode i of a task is
paired with episode i of the same task in the other run (same reset seed). Anything else is
refused before any test runs.

Output: a table in the terminal, ``compare.json`` (schema ``fasteval.compare/1``, see
docs/how-many-episodes.md) and ``compare.md`` (a Markdown section) in ``--output-dir``.

Exit codes: 0 done (and the gate passed); 2 bad input (unreadable or unpaired runs, bad options);
3 ``--fail-if-worse`` and B is significantly worse than A on some task (or, with ``--margin``,
not shown non-inferior on some task).
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import click

from fasteval.types.comparison import SCHEMA, compare_task, finish
from fasteval.types.errors import UserInputError
from fasteval.types.results import write_json_atomic

EXIT_OK, EXIT_BAD_INPUT = 0, 2
CELL_SEPARATOR = "::"
PAIR_KEYS = ("env", "env_kwargs")


@dataclass
class Side:
    """One policy's episodes: ``records`` (per-episode dicts) plus what identifies the run."""

    label: str
    source: str
    policy: Any
    env: str
    env_kwargs: Any
    seed: int | None
    records: list[dict[str, Any]] = field(default_factory=list)

    def header(self) -> dict[str, Any]:
        return {"label": self.label, "source": self.source, "policy": self.policy, "env": self.env,
                "env_kwargs": self.env_kwargs, "seed": self.seed, "n_episodes": len(self.records)}


# -- loading -----------------------------------------------------------------------------------------
def load_side(ref: str, label: str) -> Side:
    """A run folder or a sweep cell (``DIR::POLICY[::ENV]``) -> :class:`Side`; UserInputError otherwise."""
    if CELL_SEPARATOR in ref:
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
    if not isinstance(doc, dict) or not isinstance(doc.get("per_episode"), list):
        raise UserInputError(f"compare {label}: {path} has no per_episode list; expected a fasteval eval_info.json.")
    meta = doc.get("meta") or {}
    return Side(label, str(path.parent), meta.get("policy"), meta.get("env"), meta.get("env_kwargs") or {},
                meta.get("seed"), doc["per_episode"])


def _from_run_log(folder: Path, label: str) -> Side:
    from fasteval.run.rundir import RunDirectory

    run = RunDirectory(folder)
    spec = _read_json(folder / "manifest.json", label).get("spec") or {}
    return Side(label, str(folder), spec.get("policy"), spec.get("env"), spec.get("env_kwargs") or {},
                spec.get("seed"), run.records())


def _load_sweep_cell(ref: str, label: str) -> Side:
    from fasteval.doors.sweep.store import Store

    folder, _, rest = ref.partition(CELL_SEPARATOR)
    policy, _, env = rest.partition(CELL_SEPARATOR)
    store = Store(folder, create=False)
    try:
        episodes = [ep for ep in store.episodes() if ep["policy_name"] == policy and (not env or ep["env_name"] == env)]
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
                min(ep["seed"] for ep in episodes), episodes)


# -- pairing -------------------------------------------------------------------------------------------
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


# -- the document -----------------------------------------------------------------------------------
def build_document(a: Side, b: Side, *, alpha: float = 0.05, margin: float | None = None, fail_if_worse: bool = False,
                   confidence: float = 0.95, n_boot: int = 2000, boot_seed: int = 0, mode: str = "runs",
                   sequential: dict[tuple[Any, Any], dict[str, Any]] | None = None) -> dict[str, Any]:
    """The ``compare.json`` document of two paired runs (see the module docstring)."""
    tasks = []
    for paired in pair_episodes(a, b):
        ra, rb = paired["a"], paired["b"]
        task = compare_task(
            [r["success"] for r in ra], [r["success"] for r in rb],
            [r["sum_reward"] for r in ra], [r["sum_reward"] for r in rb],
            has_success=_has_signal(ra) and _has_signal(rb), alpha=alpha, confidence=confidence,
            margin=margin, n_boot=n_boot, seed=boot_seed)
        key = (paired["task_group"], paired["task_id"])
        head = {"task_group": paired["task_group"], "task_id": paired["task_id"], "task": paired["task"],
                "unpaired_a": paired["unpaired_a"], "unpaired_b": paired["unpaired_b"]}
        if sequential is not None:
            task["sequential"] = sequential.get(key)
        tasks.append({**head, **task})
    overall = finish(tasks, alpha=alpha, margin=margin, fail_if_worse=fail_if_worse)
    seq_top = tasks[0].get("sequential") if sequential is not None and len(tasks) == 1 else None
    return {"schema": SCHEMA, "mode": mode, "a": a.header(), "b": b.header(), "alpha": alpha, "margin": margin,
            "correction": "holm", "n_boot": n_boot, "boot_seed": boot_seed, "confidence": confidence,
            "tasks": tasks, "overall": overall, "sequential": seq_top}


# -- rendering -----------------------------------------------------------------------------------------
def _num(x: Any, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:.{digits}f}" if isinstance(x, float) else str(x)


def _ci(pair: Sequence[float] | None, digits: int = 3) -> str:
    return "-" if not pair else f"[{_num(pair[0], digits)}, {_num(pair[1], digits)}]"


def _task_name(task: dict[str, Any]) -> str:
    group, tid = task.get("task_group"), task.get("task_id")
    return str(group) if tid in (None, 0) and str(group) == str(task.get("task")) else f"{group}/{tid}"


def table_rows(doc: dict[str, Any]) -> list[list[str]]:
    rows = []
    for t in doc["tasks"]:
        s, r = t.get("success"), t["return"]
        rows.append([
            _task_name(t), str(t["n_pairs"]),
            _num(s["a_rate"]) if s else "-", _num(s["b_rate"]) if s else "-",
            f"{_num(s['diff'])} {_ci(s['diff_ci'])}" if s else "-",
            f"{_num(s['p_value'], 4)} ({_num(s['p_holm'], 4)})" if s else "-",
            f"{_num(r['diff'])} {_ci(r['diff_ci'])}", f"{_num(r['p_value'], 4)} ({_num(r['p_holm'], 4)})",
            _num(r["prob_improvement"]), t["verdict"],
        ])
    return rows


HEADERS = ["task", "n", "A rate", "B rate", "diff B-A [CI]", "McNemar p (Holm)", "return diff [CI]",
           "signed-rank p (Holm)", "P(B>A)", "verdict"]


def render_markdown(doc: dict[str, Any]) -> str:
    """The Markdown section: a heading, one row per task, the overall verdict."""
    a, b = doc["a"]["label"], doc["b"]["label"]
    lines = [f"## Comparison: {b} vs {a}", "",
             f"{b} = `{doc['b']['policy']}`, {a} = `{doc['a']['policy']}`, env `{doc['a']['env']}`; differences are "
             f"{b} - {a}; alpha = {doc['alpha']} with Holm's correction across tasks.", "",
             "| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    lines += ["| " + " | ".join(row) + " |" for row in table_rows(doc)]
    o = doc["overall"]
    lines += ["", f"**Overall: {o['verdict']}** ({o['n_better']} better, {o['n_worse']} worse of {o['n_tasks']} tasks)"
              + (f"; non-inferior within {doc['margin']}: {o['non_inferior']}" if doc["margin"] is not None else "")
              + (f"; gate: {'FAILED (exit 3)' if o['exit_code'] else 'passed'}" if o["fail_if_worse"] else "") + "."]
    seq = [t for t in doc["tasks"] if t.get("sequential")]
    for t in seq:
        q = t["sequential"]
        lines.append(f"Sequential ({_task_name(t)}): stopped at k = {q['k']} ({q['reason']}), decision "
                     f"{q['decision'] or 'none'}, e-values {_num(q['e_value_better'], 2)} (better) / "
                     f"{_num(q['e_value_worse'], 2)} (worse) against {_num(q['threshold'], 1)}.")
    return "\n".join(lines) + "\n"


def render_table(doc: dict[str, Any]) -> str:
    rows = [HEADERS] + table_rows(doc)
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADERS))]
    text = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    o = doc["overall"]
    text.append(f"overall: {o['verdict']} ({o['n_better']} better, {o['n_worse']} worse of {o['n_tasks']} tasks; "
                f"B = {doc['b']['source']}, A = {doc['a']['source']}; differences B - A)")
    return "\n".join(text)


def write_outputs(doc: dict[str, Any], out_dir: Path) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = write_json_atomic(out_dir / "compare.json", doc)
    md_path = out_dir / "compare.md"
    md_path.write_text(render_markdown(doc))
    return json_path, md_path


# -- the command ----------------------------------------------------------------------------------------
@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("runs", nargs=-1, metavar="[RUN_A RUN_B]")
@click.option("--alpha", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=0.05, show_default=True,
              help="Significance level (two-sided; Holm's correction across tasks).")
@click.option("--margin", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Non-inferiority margin (a success-rate difference such as 0.05, or return units when the env has no success signal).")
@click.option("--fail-if-worse", is_flag=True, help="Exit 3 when B is significantly worse than A on any task (with --margin: not shown non-inferior).")
@click.option("--output-dir", "-o", type=click.Path(file_okay=False, path_type=Path), default=Path("."), show_default=True,
              help="Where compare.json and compare.md go.")
@click.option("--n-boot", type=click.IntRange(min=100), default=2000, show_default=True, help="Bootstrap resamples.")
@click.option("--confidence", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=0.95, show_default=True,
              help="Level of the intervals (bootstrap; anytime-valid sequences in live mode).")
@click.option("--policy-a", default=None, help="Live mode: policy A (the baseline).")
@click.option("--policy-b", default=None, help="Live mode: policy B (the candidate).")
@click.option("--env", default=None, help="Live mode: the env both policies run on, with the same seeds.")
@click.option("--env-kwarg", "env_kwargs", multiple=True, metavar="KEY=VALUE", help="Live mode: env keyword argument; repeatable.")
@click.option("--n-episodes", "-n", type=click.IntRange(min=1), default=100, show_default=True, help="Live mode: most episodes per policy (the cap).")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Live mode: seed of episode 0.")
@click.option("--batch-size", "-b", type=click.IntRange(min=1), default=16, show_default=True, help="Live mode: env slots per policy.")
@click.option("--stop-when", default=None, help="Live mode: 'decided' stops when the anytime-valid paired test decides.")
@click.option("--return-bounds", default=None, metavar="LO,HI", help="Live mode: bounds of an episode return (paired returns test).")
def compare(runs: tuple[str, ...], alpha: float, margin: float | None, fail_if_worse: bool, output_dir: Path,
            n_boot: int, confidence: float, policy_a: str | None, policy_b: str | None, env: str | None,
            env_kwargs: tuple[str, ...], n_episodes: int, seed: int, batch_size: int, stop_when: str | None,
            return_bounds: str | None) -> None:
    """Compare two policies on the same episodes: RUN_A (baseline) and RUN_B (candidate).

    RUN_A and RUN_B are run folders or sweep cells SWEEP_DIR::POLICY[::ENV]. Or run both live:
    --policy-a P --policy-b Q --env E [--stop-when decided]. Exit codes: 0 done, 2 bad input,
    3 --fail-if-worse and B is significantly worse somewhere.
    """
    options = dict(alpha=alpha, margin=margin, fail_if_worse=fail_if_worse, confidence=confidence, n_boot=n_boot)
    live = any(v is not None for v in (policy_a, policy_b, env))
    try:
        if live:
            from fasteval.doors.compare_live import run_live

            if runs:
                raise UserInputError("compare: give either two run folders or --policy-a/--policy-b/--env, not both.")
            doc = run_live(policy_a, policy_b, env, env_kwargs, n_episodes=n_episodes, seed=seed, batch_size=batch_size,
                           stop_when=stop_when, return_bounds=return_bounds, **options)
        else:
            if len(runs) != 2:
                raise UserInputError(f"compare: expected two runs, RUN_A and RUN_B, got {len(runs)}. "
                                     f"Example: fasteval compare runs/baseline runs/candidate")
            if stop_when or return_bounds:
                raise UserInputError("compare: --stop-when and --return-bounds are for live comparisons (--policy-a/--policy-b/--env).")
            doc = build_document(load_side(runs[0], "A"), load_side(runs[1], "B"), **options)
        json_path, md_path = write_outputs(doc, output_dir)
    except UserInputError as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    click.echo(render_table(doc))
    click.echo(f"wrote {json_path} and {md_path}")
    sys.exit(doc["overall"]["exit_code"])

