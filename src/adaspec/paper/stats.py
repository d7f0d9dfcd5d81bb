"""Mean, standard deviation and the 95 % t-interval over seeds, plain and for paired differences."""

from __future__ import annotations

import math
import statistics

# two-sided 97.5 % quantiles of Student's t for 1..10 degrees of freedom (beyond: the normal's 1.96 is
# within 6 % of the exact value from 11 on, and we never have that many seeds)
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}


def describe(values: list[float]) -> dict[str, float | int | list[float] | None]:
    """mean, std (n-1), the 95 % interval of the mean (None with one value) and the values themselves."""
    n = len(values)
    mean = statistics.fmean(values)
    std = statistics.stdev(values) if n > 1 else 0.0
    half = T975.get(n - 1, 1.96) * std / math.sqrt(n) if n > 1 else None
    return {
        "mean": mean,
        "std": std,
        "n": n,
        "ci95": [mean - half, mean + half] if half is not None else None,
        "values": list(values),
    }


def paired_difference(a: list[float], b: list[float]) -> dict[str, float | int | list[float] | None]:
    """`describe` of a[i] - b[i]: the seeds pair the two methods (same reference, data order, init)."""
    if len(a) != len(b):
        raise ValueError(f"paired values need equal lengths, got {len(a)} and {len(b)}")
    return describe([x - y for x, y in zip(a, b, strict=True)])


def mean_and_spread(d: dict, sign: str = "") -> str:
    """A `describe` as "mean ± std", or the value alone from one seed (a std of 0.000 there would claim a
    precision); sign="+" for differences."""
    mean = f"{d['mean']:{sign}.3f}"
    return mean if d.get("n") == 1 else f"{mean} ± {d['std']:.3f}"


def interval(d: dict, sign: str = "") -> str:
    """A `describe`'s 95 % interval as " [low, high]", or nothing from one seed; sign="+" for differences."""
    return f" [{d['ci95'][0]:{sign}.3f}, {d['ci95'][1]:{sign}.3f}]" if d["ci95"] else ""
