"""Milliseconds per phase of a partition's close or open, for their log lines.

A moved partition's producer waits for the source's close and the target's open; the phases on the "closed ..." and
"opened ..." lines (read by bench/balancer.py) say which await a slow move spent its time in.
"""

from __future__ import annotations

import time


class Phases:
    """Marks the end of each phase; ``str`` gives "name 1.2 ms, ..." in order."""

    def __init__(self) -> None:
        self._last = time.perf_counter()
        self._phases: list[tuple[str, float]] = []

    def mark(self, phase: str) -> None:
        now = time.perf_counter()
        self._phases.append((phase, (now - self._last) * 1000))
        self._last = now

    def __str__(self) -> str:
        return ", ".join(f"{phase} {ms:.1f} ms" for phase, ms in self._phases)
