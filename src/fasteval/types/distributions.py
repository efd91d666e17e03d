"""The few distribution functions fasteval's exact intervals need, in plain Python (no SciPy at run time).

* :func:`betainc`: the regularized incomplete beta function ``I_x(a, b)`` (Lentz's continued fraction,
  Numerical Recipes' ``betacf``, with the symmetry ``I_x(a, b) = 1 - I_{1-x}(b, a)`` where it converges
  faster), to a relative error near 1e-14;
* :func:`beta_ppf`: its inverse in x (Newton's method inside a bisection bracket);
* :func:`clopper_pearson`: the exact binomial interval, also for non-integer counts (an effective
  sample size, :mod:`fasteval.types.stratified`);
* :func:`student_t_ppf`: Student's t quantile, from ``I_x(nu/2, 1/2)``.

Edge cases: ``x <= 0`` gives 0 and ``x >= 1`` gives 1; ``a`` and ``b`` must be > 0. The tests hold
every function to SciPy's on random arguments.
"""

from __future__ import annotations

import math

_EPS = 1e-15
_TINY = 1e-300
_MAX_TERMS = 10_000


def _continued_fraction(a: float, b: float, x: float) -> float:
    """Numerical Recipes' ``betacf``: the continued fraction of ``I_x(a, b)`` (modified Lentz)."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, _MAX_TERMS):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > _TINY else _TINY)
        c = 1.0 + aa / c
        c = c if abs(c) > _TINY else _TINY
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > _TINY else _TINY)
        c = 1.0 + aa / c
        c = c if abs(c) > _TINY else _TINY
        step = d * c
        h *= step
        if abs(step - 1.0) < _EPS:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function ``I_x(a, b) = P(Beta(a, b) <= x)``."""
    if not (a > 0 and b > 0):
        raise ValueError(f"betainc: expected a > 0 and b > 0, got a={a!r}, b={b!r}.")
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return min(1.0, math.exp(log_front) * _continued_fraction(a, b, x) / a)
    return max(0.0, 1.0 - math.exp(log_front) * _continued_fraction(b, a, 1.0 - x) / b)


def beta_ppf(q: float, a: float, b: float) -> float:
    """The ``q`` quantile of Beta(a, b): the x with ``I_x(a, b) = q``. Newton's method on ``I_x`` (its
    derivative is the Beta density), kept inside a bisection bracket that every step narrows, so it
    always converges (to about 1e-15)."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"beta_ppf: expected a probability, got {q!r}.")
    if q == 0.0:
        return 0.0
    if q == 1.0:
        return 1.0
    log_norm = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
    lo, hi = 0.0, 1.0
    x = a / (a + b)
    for _ in range(200):
        f = betainc(a, b, x) - q
        if f < 0:
            lo = x
        else:
            hi = x
        if hi - lo < 1e-15 * max(x, 1e-300) or f == 0.0:
            break
        log_pdf = log_norm + (a - 1.0) * math.log(x) + (b - 1.0) * math.log1p(-x)
        step = f / math.exp(log_pdf) if log_pdf > -700 else math.inf
        nxt = x - step
        if not lo < nxt < hi or abs(step) < 1e-16 * x:  # out of the bracket (or done): bisect instead
            nxt = (lo + hi) / 2.0 if not abs(step) < 1e-16 * x else nxt
        if nxt == x:
            break
        x = nxt
    return x


def clopper_pearson(successes: float, n: float, confidence: float = 0.95) -> tuple[float, float]:
    """The exact (Clopper-Pearson) interval of a binomial proportion: the ``(1 - confidence) / 2`` quantile of
    ``Beta(x, n - x + 1)`` and the ``(1 + confidence) / 2`` quantile of ``Beta(x + 1, n - x)``, 0 at ``x = 0``
    and 1 at ``x = n``. ``x`` and ``n`` may be non-integer (an effective count); ``n <= 0`` gives (0, 1)."""
    if n <= 0:
        return 0.0, 1.0
    x = min(max(float(successes), 0.0), float(n))
    tail = (1.0 - confidence) / 2.0
    low = 0.0 if x <= 0.0 else beta_ppf(tail, x, n - x + 1.0)
    high = 1.0 if x >= n else beta_ppf(1.0 - tail, x + 1.0, n - x)
    return low, high


def student_t_ppf(q: float, nu: float) -> float:
    """The ``q`` quantile of Student's t with ``nu`` > 0 degrees of freedom (``P(T <= t) = q``)."""
    if not 0.0 < q < 1.0:
        raise ValueError(f"student_t_ppf: expected a probability in (0, 1), got {q!r}.")
    if nu <= 0:
        raise ValueError(f"student_t_ppf: expected nu > 0, got {nu!r}.")
    if q == 0.5:
        return 0.0
    tail = min(q, 1.0 - q)  # P(T <= -t) = I_{nu / (nu + t^2)}(nu / 2, 1/2) / 2: solve for x = nu / (nu + t^2)
    x = beta_ppf(2.0 * tail, nu / 2.0, 0.5)
    t = math.sqrt(nu * (1.0 - x) / x) if x > 0 else math.inf
    return t if q > 0.5 else -t
