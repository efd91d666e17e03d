"""Inputs for the HTML report tests, made the way users make them: a CLI run folder (known-answer
env, with videos), a suite folder, a sweep with a failing policy, and a comparison document; plus
a reader that pulls the tables' cells (text and ``data-value``) out of a page."""

from __future__ import annotations

import json
import math
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import gymnasium as gym
from click.testing import CliRunner

from fasteval.doors.cli import main
from fasteval.testing import KNOWN_ANSWER_ID
from fasteval.testing.envs import KnownAnswerEnv

PARITY = "fasteval.testing.policies:ParityPolicy"
FAULTY = "fasteval.testing.faulty:FaultyEnv"
RUN_ARGS = ["--env", KNOWN_ANSWER_ID, "--policy", PARITY, "-n", "24", "-b", "5", "--seed", "3", "--videos", "4",
            "--video-select", "first"]
FAULT_SEEDS = (4, 9)


class NoSignalEnv(gym.Wrapper):
    """The known-answer env without ``info["is_success"]`` (as MuJoCo's envs): its videos are named
    ``ep<i>_seed<s>.mp4``, with no outcome. Renders tiny 8x8 frames."""

    def __init__(self, **kwargs: Any):
        super().__init__(KnownAnswerEnv(**kwargs))

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, terminated, truncated, {k: v for k, v in info.items() if k != "is_success"}


def make_no_signal_env(**kwargs: Any) -> NoSignalEnv:
    return NoSignalEnv(**kwargs)


NO_SIGNAL_ENV = "tests.report_fixtures:make_no_signal_env"


def cli(*args: str) -> Any:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result


def make_run(folder: Path, *extra: str) -> Path:
    """A CLI run of the known-answer env with videos (exit 0), written to ``folder``."""
    result = cli(*RUN_ARGS, *extra, "-o", str(folder))
    assert result.exit_code == 0, result.output
    return folder


def make_faulty_run(folder: Path) -> Path:
    """A CLI run in which the episodes of seeds :data:`FAULT_SEEDS` fail for good (exit 1)."""
    result = cli("--env", FAULTY, "--env-kwarg", f"fault_seeds={list(FAULT_SEEDS)}", "--policy", PARITY, "-n", "12",
                 "-b", "4", "--retries", "0", "-o", str(folder))
    assert result.exit_code == 1, result.output
    return folder


SWEEP = {
    "name": "report-test",
    "episodes": 8,
    "seeds": [0, 100],
    "policies": [{"name": "zero", "ref": "zero"}, {"name": "parity", "ref": PARITY},
                 {"name": "broken", "ref": "tests.helpers:refuses_to_load"}],
    "envs": [{"name": "known", "id": KNOWN_ANSWER_ID}, {"name": "cartpole", "id": "CartPole-v1"}],
    "options": {"batch_size": 4, "device": "cpu"},
}


def make_sweep(folder: Path) -> dict[str, Any]:
    """The sweep above, run here (one process), without its Markdown report; returns its outcome."""
    from fasteval.doors.sweep import LocalExecutor, SweepSpec, run_sweep

    return run_sweep(SweepSpec.from_dict(SWEEP), folder, executor=LocalExecutor(1), report=False)


def compare_document() -> dict[str, Any]:
    """A ``fasteval.compare/1`` document (compare-schema.md) for a live two-task comparison."""
    k = list(range(1, 121))
    better = [math.exp(0.04 * i) for i in k]
    return {
        "schema": "fasteval.compare/1", "mode": "live",
        "a": {"label": "A", "source": None, "policy": "zero", "env": KNOWN_ANSWER_ID, "seed": 0, "n_episodes": 120},
        "b": {"label": "B", "source": None, "policy": PARITY, "env": KNOWN_ANSWER_ID, "seed": 0, "n_episodes": 120},
        "alpha": 0.05, "margin": None, "correction": "holm", "n_boot": 2000, "boot_seed": 0, "confidence": 0.95,
        "tasks": [
            {"task_group": "g", "task_id": 0, "task": "push", "n_pairs": 120, "primary": "success",
             "success": {"a_successes": 40, "b_successes": 70, "a_rate": 40 / 120, "b_rate": 70 / 120, "diff": 0.25,
                         "diff_ci": [0.14, 0.36], "only_a": 5, "only_b": 35, "n_discordant": 40, "p_value": 1.2e-6,
                         "p_holm": 2.4e-6},
             "return": {"a_mean": -3.5, "b_mean": -2.25, "diff": 1.25, "diff_ci": [0.5, 2.0], "signed_rank_statistic": 512.0,
                        "p_value": 0.001, "p_holm": 0.002, "prob_improvement": 0.66, "prob_improvement_ci": [0.58, 0.73]},
             "non_inferiority": None, "verdict": "better", "p_holm": 2.4e-6},
            {"task_group": "g", "task_id": 1, "task": "reach", "n_pairs": 120, "primary": "return", "success": None,
             "return": {"a_mean": 1.0, "b_mean": 0.9, "diff": -0.1, "diff_ci": [-0.4, 0.2], "signed_rank_statistic": 3000.0,
                        "p_value": 0.51, "p_holm": 0.51, "prob_improvement": 0.48, "prob_improvement_ci": [0.4, 0.56]},
             "non_inferiority": None, "verdict": "no difference", "p_holm": 0.51},
        ],
        "overall": {"verdict": "better", "n_tasks": 2, "n_better": 1, "n_worse": 0, "any_worse": False,
                    "non_inferior": None, "fail_if_worse": True, "exit_code": 0},
        "sequential": {"rule": "decided", "confidence": 0.95, "cap": 1000, "k": 120, "reason": "rule", "decision": "better",
                       "e_value_better": better[-1], "e_value_worse": 0.03, "threshold": 40.0,
                       "method": "betting e-process on discordant pairs", "n_computed_past_stop": 3,
                       "computed_past_stop": [120, 121, 122],
                       "trajectory": {"k": k, "e_value_better": better, "e_value_worse": [1.0 / b for b in better]}},
    }


# -- reading a page ----------------------------------------------------------------------------------

class Tables(HTMLParser):
    """``tables[id] = [{"attrs": tr data-*, "cells": [(text, data-value or None)]}]`` for every table."""

    def __init__(self, html: str):
        super().__init__()
        self.tables: dict[str, list[dict[str, Any]]] = {}
        self.headers: dict[str, list[str]] = {}
        self._table: str | None = None
        self._row: dict[str, Any] | None = None
        self._cell: list[Any] | None = None
        self._in_th = False
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "table":
            self._table = a.get("id")
            self.tables[self._table] = []
            self.headers[self._table] = []
        elif tag == "tr" and self._table is not None:
            self._row = {"attrs": {k[5:]: v for k, v in a.items() if k.startswith("data-")}, "cells": []}
        elif tag == "td" and self._row is not None:
            self._cell = ["", a.get("data-value")]
        elif tag == "th":
            self._in_th = True
            self.headers[self._table].append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self._table = None
        elif tag == "tr" and self._row is not None:
            if self._row["cells"]:
                self.tables[self._table].append(self._row)
            self._row = None
        elif tag == "td" and self._cell is not None:
            self._row["cells"].append((self._cell[0].strip(), self._cell[1]))
            self._cell = None
        elif tag == "th":
            self._in_th = False

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell[0] += data
        elif self._in_th and self._table is not None:
            self.headers[self._table][-1] += data

    def column(self, table: str, header: str) -> list[tuple[str, str | None]]:
        i = self.headers[table].index(header)
        return [row["cells"][i] for row in self.tables[table]]


def value(cell: tuple[str, str | None]) -> float | None:
    """A cell's exact number (``data-value``); ``None`` for a cell without one."""
    raw = cell[1]
    return None if raw in (None, "") else float(raw)


def load(path: Path) -> Any:
    return json.loads(Path(path).read_text())
