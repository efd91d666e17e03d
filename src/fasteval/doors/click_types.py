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

from fasteval.types.spec import DEVICES


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


class FiniteFloatRange(click.FloatRange):
    """A ``click.FloatRange`` whose value must also be finite (no ``nan``, ``inf``, ``-inf``)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number: expected a number in the range {self._describe_range()}.",
                      param, ctx)
        return number
