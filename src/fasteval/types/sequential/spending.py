"""Error-spending functions: how much of an error budget a truncated design may have spent by
information fraction t (Lan & DeMets, "Discrete sequential boundaries for clinical trials",
Biometrika 1983; Hwang, Shih & DeCani, Statistics in Medicine 1990; Kim & DeMets 1987 for the
power family).

A spending function ``A(t)`` for ``t`` in [0, 1] is nondecreasing with ``A(0) = 0`` and
``A(1) = total``. A group-sequential test that, at its j-th look (fraction ``t_j``), has spent at
most ``A(t_j)`` of its type-I error, counted exactly under the null, keeps its overall type-I
error at most ``A(1) = total`` whatever the looks were (:mod:`.group_sequential` computes the
exact binomial boundaries that do so). The same functions spend the type-II error of a futility
bound (``beta`` spending).

Families (``Spending(family, param)``):

==================  ==========================================================  ==============
``power``           ``total * t ** rho`` (``rho = 1``: about Pocock's boundary;   ``param`` = rho
                    ``rho = 3``: about O'Brien-Fleming's)                          (default 1)
``obrien-fleming``  Lan-DeMets O'Brien-Fleming type:                               none
                    ``2 (1 - Phi(z_{1 - total/2} / sqrt(t)))``
``pocock``          Lan-DeMets Pocock type: ``total * log(1 + (e - 1) t)``         none
``hsd``             Hwang-Shih-DeCani: ``total (1 - exp(-g t)) / (1 - exp(-g))``  ``param`` = g
                    (g = 0: linear; g = -4: about O'Brien-Fleming; g = 1: Pocock)  (default -4)
==================  ==========================================================  ==============

Edge cases: ``t`` is clipped to [0, 1]; ``A(t) = total`` exactly at ``t >= 1`` (all of the
budget is spent by the cap) and 0 at ``t <= 0``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np

FAMILIES = ("power", "obrien-fleming", "pocock", "hsd")
_DEFAULT_PARAM = {"power": 1.0, "hsd": -4.0}


@dataclass(frozen=True)
class Spending:
    """A spending function: ``family`` (one of :data:`FAMILIES`) and its parameter (``rho`` of
    ``power``, ``gamma`` of ``hsd``; None for the default, and for the two parameter-free ones)."""

    family: str = "power"
    param: float | None = None

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"spending: expected a family in {', '.join(FAMILIES)}, got {self.family!r}.")
        if self.family in ("obrien-fleming", "pocock"):
            if self.param is not None:
                raise ValueError(f"spending {self.family}: takes no parameter, got {self.param!r}.")
            return
        value = _DEFAULT_PARAM[self.family] if self.param is None else self.param
        try:
            value = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"spending {self.family}: expected a number, got {self.param!r}.") from None
        if not math.isfinite(value) or (self.family == "power" and value <= 0):
            raise ValueError(f"spending {self.family}: expected a finite number{' > 0' if self.family == 'power' else ''}, "
                             f"got {self.param!r}.")
        object.__setattr__(self, "param", value)

    def at(self, t: float, total: float) -> float:
        """``A(t)`` at one fraction ``t`` (clipped to [0, 1]) out of ``total`` (in (0, 1))."""
        t = min(max(float(t), 0.0), 1.0)
        if not 0.0 < float(total) < 1.0:
            raise ValueError(f"spending: the error budget must lie in (0, 1), got {total!r}.")
        if t >= 1.0:
            return float(total)
        if t <= 0.0:
            return 0.0
        if self.family == "power":
            out = total * t ** self.param
        elif self.family == "pocock":
            out = total * math.log1p((math.e - 1.0) * t)
        elif self.family == "hsd":
            g = self.param
            out = total * t if g == 0 else total * (-math.expm1(-g * t)) / (-math.expm1(-g))
        else:
            z = NormalDist().inv_cdf(1.0 - total / 2.0)
            out = math.erfc(z / math.sqrt(t) / math.sqrt(2.0))  # 2 (1 - Phi(z / sqrt(t)))
        return min(out, float(total))

    def cumulative(self, t: Any, total: float) -> np.ndarray:
        """:meth:`at` over an array of fractions (same shape as ``t``)."""
        t = np.asarray(t, dtype=np.float64)
        return np.array([self.at(v, total) for v in t.reshape(-1)]).reshape(t.shape)

    def label(self) -> str:
        """A short name: ``power(rho=1)``, ``obrien-fleming``, ``hsd(gamma=-4)``."""
        if self.family == "power":
            return f"power(rho={self.param:g})"
        if self.family == "hsd":
            return f"hsd(gamma={self.param:g})"
        return self.family

    def to_dict(self) -> dict[str, Any]:
        return {"family": self.family, "param": self.param}
