"""Click types the doors share: a policy device, and float ranges that refuse NaN and infinity.

``click.FloatRange`` compares a value with its bounds, and every comparison with NaN is false: ``nan``
passes ``FloatRange(min=0, min_open=True)`` and reached the code behind it (``int(nan * 2**20)`` raised
mid-command). :class:`FiniteFloatRange` refuses it, and ``inf``, as a usage error (exit 2).
"""

from __future__ import annotations

import math
import re
from typing import Any

import click

from fasteval.types.spec import DEVICES, MAX_POLICY_BLOCK

BATCH_BLOCK = "batch"
"""``--policy-block batch``: R is the run's batch size (lerobot-eval's rounding), resolved when the spec is built."""


class Device(click.ParamType):
    """``cpu``, ``cuda``, ``cuda:N`` or ``auto``: what :class:`~fasteval.types.spec.EvalSpec` accepts."""

    name = "device"

    def get_metavar(self, param: click.Parameter, ctx: click.Context) -> str:
        return "[cpu|cuda|cuda:N|auto]"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value).strip()
        if text in DEVICES or re.fullmatch(r"cuda:\d+", text):
            return text
        self.fail(f"{value!r}: expected cpu, cuda, cuda:N (a GPU's index, e.g. cuda:0) or auto.", param, ctx)


DEVICE = Device()


class PolicyBlock(click.ParamType):
    """``--policy-block``: an integer R from 0 (the whole batch) to :data:`MAX_POLICY_BLOCK`, or ``batch``."""

    name = "policy_block"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            text = str(value)
        else:
            text = str(value).strip().lower()
        if text == BATCH_BLOCK:
            return BATCH_BLOCK
        if text.isdigit() and int(text) <= MAX_POLICY_BLOCK:
            return int(text)
        self.fail(f"{value!r}: expected a row count R from 1 to {MAX_POLICY_BLOCK} (blocks of R rows per policy call), "
                  f"0 (the whole batch) or 'batch' (R = -b, lerobot-eval's rounding).", param, ctx)


class FiniteFloatRange(click.FloatRange):
    """A ``click.FloatRange`` whose value must also be finite (no ``nan``, ``inf``, ``-inf``)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number: expected a number in the range {self._describe_range()}.",
                      param, ctx)
        return number
