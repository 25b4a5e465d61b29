"""The one percentile the benches report: the nearest rank.

A bench's p50/p99 is the smallest sample with at least that fraction of the samples at or below it (so a p99 of
fifty kill cycles is their largest but none, and never a value no cycle took). Every bench's table uses this one
definition, so two benches' p99 rows can be read side by side.
"""

from __future__ import annotations

import math
from collections.abc import Iterable


def percentile(values: Iterable[float], fraction: float) -> float:
    """The nearest-rank ``fraction`` percentile (0.5 for p50, 0.99 for p99) of ``values``, which must not be empty."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("a percentile of no samples")
    rank = math.ceil(fraction * len(ordered))
    return ordered[min(len(ordered), max(1, rank)) - 1]
