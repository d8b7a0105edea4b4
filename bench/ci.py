"""Shared statistics of the bench scripts: a median with its 95 % interval.

The interval is distribution-free (order statistics of the sample: the ranks between which
the median lies with at least 95 % probability, from the binomial distribution), so it
needs no assumption about how the machine's noise is shaped. A target counts as met only
when the interval's upper end is under it.
"""
import math


def median_ci(values, confidence=0.95):
    """(median, low, high) of `values`; low/high are None with fewer than 6 values."""
    xs = sorted(values)
    n = len(xs)
    if n == 0:
        raise ValueError("no values")
    med = xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2
    # Largest k with P(Binomial(n, 1/2) < k) <= (1 - confidence) / 2.
    tail, k, cum = (1 - confidence) / 2, 0, 0.0
    for j in range(n + 1):
        cum += math.comb(n, j) / 2 ** n
        if cum > tail:
            k = j
            break
    if k < 1:
        return med, None, None
    return med, xs[k - 1], xs[n - k]


def fmt_ci(values, digits=2):
    """'1.02 [0.97, 1.08]' (or just the median when there are too few values)."""
    med, lo, hi = median_ci(values)
    if lo is None:
        return f"{med:.{digits}f} (too few runs for an interval)"
    return f"{med:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


def met(values, limit):
    """'yes' when the interval's upper end is at most `limit`, else 'NO' (or 'unknown')."""
    _, _, hi = median_ci(values)
    if hi is None:
        return "unknown"
    return "yes" if hi <= limit else "NO"
