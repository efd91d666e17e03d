"""Options a run would ignore, said in one line each on stderr (issue 42).

The run goes ahead: each of these gives the same results with or without the option, so a refusal would stop a
run that does what was asked. What the user hoped for is named, with the way to get it:

* ``--workers N`` with ``--vectorization sync``: the envs step in this process; no worker is started;
* ``--stack-weights`` with one policy: there is nothing to stack;
* the same checkpoint (the same folder, by its real path, or the same reference) given twice: it runs as two
  policies on the same seeds, twice the work for an A/A check.
"""

from __future__ import annotations

import os
from typing import Any

PREFIX = "fasteval: warning: "


def _key(ref: Any) -> Any:
    if isinstance(ref, (str, os.PathLike)):
        text = os.fspath(ref)
        return os.path.realpath(text) if os.path.exists(text) else text
    return id(ref)


def ignored_option_lines(spec: Any) -> list[str]:
    """One line per option of ``spec`` that has no effect on this run (see the module docstring)."""
    lines = []
    if spec.workers is not None and spec.vectorization == "sync":
        lines.append(f"{PREFIX}--workers {spec.workers} has no effect with --vectorization sync (the envs step in this "
                     f"process); add --vectorization async to step them in worker processes.")
    if spec.stack_weights and spec.n_policies == 1:
        lines.append(f"{PREFIX}--stack-weights has no effect with one policy (it runs several checkpoints of one "
                     f"architecture as one call); give --policy more than once to use it.")
    seen: dict[Any, int] = {}
    for ref in spec.policies:
        seen[_key(ref)] = seen.get(_key(ref), 0) + 1
    for ref in spec.policies:
        count = seen.pop(_key(ref), 0)
        if count > 1:
            lines.append(f"{PREFIX}the policy {ref} is given {count} times; it runs {count} times on the same seeds "
                         f"(an A/A check, {count}x the work). Give each checkpoint once unless that is what you want.")
    return lines
