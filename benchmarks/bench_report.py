"""What the HTML report (``report.html``) costs a 1,000-episode CartPole run (issue 24).

Workload: ``fasteval --policy P --env CartPole-v1 -n 1000 -b 16 --device cpu -o DIR`` in a
subprocess; ``zero`` (about 9 steps an episode: the shortest run, so the largest share for the
report) and the demo MLP (``src/fasteval/assets/cartpole_mlp``, 500 steps an episode). Rows,
interleaved per repeat, medians of ``--repeats``:

* ``CLI --no-report`` / ``CLI --report``: the whole command's wall time, start-up included (only
  when the CLI has the ``--report/--no-report`` switch);
* ``report only``: :func:`fasteval.render.html.write_run_report` on the finished folder, in
  this process (the report's own cost, without subprocess noise);
* ``provenance``: :func:`fasteval.run.provenance.collect_provenance`, in this process (every run
  folder's manifest records it, with or without the report).

Also the size of the page of a synthetic 100,000-episode, 4-task run (limit 5 MB).
Target: the report adds < 5% to the run: ``report only`` / ``CLI --no-report`` (and, where it
exists, ``CLI --report`` / ``CLI --no-report`` - 1).

    python benchmarks/bench_report.py [--episodes 1000] [--repeats 5] [--tiny]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from time import perf_counter

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import check_line, command_line, format_machine, machine_info, markdown_table  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
POLICIES = {"zero": "zero", "demo MLP": str(ROOT / "src" / "fasteval" / "assets" / "cartpole_mlp")}


def has_report_switch() -> bool:
    out = subprocess.run([sys.executable, "-m", "fasteval.doors.cli", "--help"], capture_output=True, text=True).stdout
    return "--no-report" in out


def cli_run(policy: str, n: int, out: Path, report: bool | None) -> float:
    switch = [] if report is None else ["--report" if report else "--no-report"]
    cmd = [sys.executable, "-m", "fasteval.doors.cli", "--policy", policy, "--env", "CartPole-v1", "-n", str(n),
           "-b", "16", "--device", "cpu", "-o", str(out), *switch]
    start = perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return perf_counter() - start


def report_only(folder: Path) -> float:
    from fasteval.render.html import write_run_report

    start = perf_counter()
    write_run_report(folder)
    return perf_counter() - start


def provenance_only() -> float:
    from fasteval.run.provenance import collect_provenance

    start = perf_counter()
    collect_provenance()
    return perf_counter() - start


def big_page_bytes(n: int, folder: Path) -> int:
    """Bytes of the page of a synthetic ``n``-episode, 4-task run (3,000 failed episodes)."""
    from fasteval.render.html import write_run_report
    from fasteval.types.results import EpisodeTable, EvalResult

    rng = np.random.default_rng(0)
    columns = {"episode_ix": np.arange(n), "seed": np.arange(n), "sum_reward": rng.normal(10, 3, n),
               "max_reward": np.ones(n), "length": rng.integers(5, 300, n), "success": rng.random(n) < 0.7,
               "nan_rewards": np.zeros(n, np.int64), "has_success_signal": np.ones(n, bool)}
    table = EpisodeTable(columns, np.arange(n) % 4, [("suite", i, f"task-{i}") for i in range(4)])
    errors = [{"episode_ix": n + i, "seed": n + i, "stage": "step", "step": 3, "attempt": 1, "final": True,
               "error": f"planted {i}", "traceback": "", "task_group": "suite", "task_id": i % 4} for i in range(3000)]
    result = EvalResult(table, eval_s=100.0, meta={"env": "synthetic", "policy": "p"}, errors=errors, n_failed=3000)
    return write_run_report(folder, result.eval_info_document(), manifest={"status": "complete"}).stat().st_size


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--tiny", action="store_true", help="20 episodes, one repeat, zero policy (for the test suite)")
    args = parser.parse_args(argv)
    n, repeats = (20, 1) if args.tiny else (args.episodes, args.repeats)
    policies = {"zero": POLICIES["zero"]} if args.tiny else POLICIES
    switch = has_report_switch()
    rows: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(repeats):
            for name, ref in policies.items():
                for mode in (("CLI --no-report", "CLI --report") if switch else ("CLI",)):
                    out = Path(tmp) / f"{name}-{mode}-{r}".replace(" ", "_")
                    seconds = cli_run(ref, n, out, None if mode == "CLI" else mode == "CLI --report")
                    rows.setdefault((name, mode), []).append(seconds)
                    if mode != "CLI --report":
                        rows.setdefault((name, "report only"), []).append(report_only(out))
                        rows.setdefault((name, "provenance"), []).append(provenance_only())
        size = big_page_bytes(1000 if args.tiny else 100_000, Path(tmp) / "big")
    print(format_machine(machine_info()))
    print("command:", command_line())
    print(f"workload: CartPole-v1, batch 16, {n} episodes; medians of {repeats} interleaved repeats")
    med = {key: statistics.median(v) for key, v in rows.items()}
    base = "CLI --no-report" if switch else "CLI"
    table = []
    for (name, mode), seconds in med.items():
        share = seconds / med[(name, base)]
        table.append([name, mode, f"{seconds:.3f}", f"{100 * share:.2f}%" if mode != base else "100%"])
    print(markdown_table(["policy", "row", "seconds", "vs " + base], table))
    ok = True
    for name in policies:
        share = med[(name, "report only")] / med[(name, base)]
        passed = None if args.tiny else share < 0.05
        ok = ok and passed is not False
        print(check_line(f"{name}: the report adds < 5% to the run (report only / {base})", passed, f"{100 * share:.2f}%"))
        if switch:
            extra = med[(name, "CLI --report")] / med[(name, "CLI --no-report")] - 1
            print(check_line(f"{name}: CLI --report vs --no-report", None if args.tiny else extra < 0.05, f"{100 * extra:+.2f}%"))
    print(check_line(f"page of a {'1,000' if args.tiny else '100,000'}-episode run < 5 MB", size < 5 * 2**20, f"{size / 2**10:.0f} KiB"))
    return 0 if ok and size < 5 * 2**20 else 1


if __name__ == "__main__":
    raise SystemExit(main())
