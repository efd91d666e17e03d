"""``fasteval bench``: warm-up, repeated timed runs of the engine, a stage breakdown, a machine header.

* :mod:`fasteval.doors.bench.harness`: runs a spec through :class:`~fasteval.run.engine.Engine`
  (the same engine as the CLI; no rollout code here), one cell or a grid of cells;
* :mod:`fasteval.doors.bench.machine`: the machine header (CPU, cores, GPU, library versions);
* :mod:`fasteval.doors.bench.report`: the JSON document (its terminal report: :mod:`fasteval.render.bench_text`);
* :mod:`fasteval.doors.bench.cli`: the ``fasteval bench`` command.
"""

from fasteval.doors.bench.harness import BenchCell, BenchGrid, RepeatSample, bench_cell, bench_grid
from fasteval.doors.bench.machine import machine_info

__all__ = ["BenchCell", "BenchGrid", "RepeatSample", "bench_cell", "bench_grid", "machine_info"]
