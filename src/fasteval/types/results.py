"""Evaluation results, by their parts (a short re-export; the names live in three modules):

* :mod:`fasteval.types.episode_table`: the per-episode table (:class:`EpisodeTable`, its fields,
  :func:`merge_episodes`);
* :mod:`fasteval.types.eval_result`: the result and its aggregates (:class:`EvalResult`,
  :func:`aggregate`);
* :mod:`fasteval.types.json_writer`: the streamed, atomic JSON writer (:func:`write_json_atomic`).
"""

from fasteval.types.episode_table import (COLUMN_DTYPES, EPISODE_FIELDS, NUMBER_FIELDS, TASK_FIELDS, EpisodeTable,
                                          merge_episodes)
from fasteval.types.eval_result import (STATUS_COMPLETE, STATUS_FAILED, STATUS_INTERRUPTED, STATUS_RUNNING, EarlierSegments,
                                         EvalResult, FrozenDict, aggregate, has_success_signal)
from fasteval.types.json_writer import write_json_atomic

__all__ = ["STATUS_COMPLETE", "STATUS_FAILED", "STATUS_INTERRUPTED", "STATUS_RUNNING", "EarlierSegments", "FrozenDict",
           "has_success_signal",
           "COLUMN_DTYPES", "EPISODE_FIELDS", "NUMBER_FIELDS", "TASK_FIELDS", "EpisodeTable", "EvalResult",
           "aggregate", "merge_episodes", "write_json_atomic"]
