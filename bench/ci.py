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
    """'yes' when the interval's upper end is under `limit`, else 'NO' (or 'unknown')."""
    _, _, hi = median_ci(values)
    if hi is None:
        return "unknown"
    return "yes" if hi < limit else "NO"


def read_pingpong(path):
    """{(link, size): [{p50, p99, max, n}, ...]} from lines `LINK SIZE p50 NS p99 NS max NS n N`."""
    pp = {}
    for line in open(path):
        f = line.split()
        pp.setdefault((f[0], int(f[1])), []).append(
            {"p50": int(f[3]), "p99": int(f[5]), "max": int(f[7]), "n": int(f[9])})
    return pp


def pingpong_table(pp, pairs, names, target=None):
    """A markdown table of round trips, link A against link B per size and pair (blocks taken
    in pairs, A's block over B's next to it): p50/p99/max in us, ratios with 95 % intervals;
    with `target`, whether A's p50 ratio is under it and whether A's overall max is lower."""
    med = lambda xs: sorted(xs)[len(xs) // 2]
    us = lambda v: f"{v / 1e3:.2f}" if v < 1e5 else f"{v / 1e3:.0f}"
    head = f"| size | wait | {names[0]} p50 / p99 / max | {names[1]} p50 / p99 / max | p50 ratio [95 %] |"
    head += f" target <= {target} met? |" if target else ""
    head += " p99 ratio [95 %] | max ratio per block [95 %] | lower max overall? |"
    print(head)
    print("|---" * (head.count("|") - 1) + "|")
    for size in sorted({k[1] for k in pp}):
        for a, b, what in pairs:
            A, B = pp.get((a, size), []), pp.get((b, size), [])
            k = min(len(A), len(B))
            if k == 0:
                continue
            A, B = A[:k], B[:k]
            col = lambda X: " / ".join(us(v) for v in (
                med([x["p50"] for x in X]), med([x["p99"] for x in X]), max(x["max"] for x in X)))
            r = lambda key: [x[key] / y[key] for x, y in zip(A, B)]
            lower = "yes" if max(x["max"] for x in A) < max(y["max"] for y in B) else "NO"
            row = f"| {size} B | {what} | {col(A)} | {col(B)} | {fmt_ci(r('p50'), 3)} |"
            row += f" {met(r('p50'), target)} |" if target else ""
            row += f" {fmt_ci(r('p99'), 3)} | {fmt_ci(r('max'), 3)} | {lower} |"
            print(row)
    print(f"(blocks per link and size: {min(len(v) for v in pp.values())}; "
          f"round trips per block: median {med([x['n'] for v in pp.values() for x in v])})")
