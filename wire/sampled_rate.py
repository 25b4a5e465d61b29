"""A rate over sampled windows, as Kafka's ``Rate`` over a ``SampledStat``: the measure of client quotas
(``broker.quotas``) and of connection creation rates (``wire.connection_limits``), hence here in ``wire``, below both.

Values are summed into ``samples`` windows of ``window_s`` seconds each (``quota.window.num`` x
``quota.window.size.seconds``); a window starts when the first value after the previous one's end arrives, and
windows older than all of them together are forgotten. The rate is the sum over the windows kept, divided by the time
since the oldest one began, but never by less than ``samples - 1`` windows: that is Kafka's guard against a burst
at start (one big request in an empty window) counting as an enormous rate, and it is what lets a new client send
up to that many windows' worth of quota before it is first throttled.

A negative value gives back part of what was recorded before (a charge the work it paid for did not happen): it is
taken off the newest windows, never taking one below 0 nor opening a window of its own. A give-back that arrives
after its charge's window was forgotten therefore takes off what later windows hold at most, and never becomes
credit for what comes next.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class _Sample:
    start: float
    value: float = 0.0


@dataclass(slots=True)
class SampledRate:
    samples: int
    window_s: float
    _windows: list[_Sample] = field(default_factory=list)

    def record(self, value: float, now: float) -> None:
        """Adds ``value`` at ``now``; a negative ``value`` is given back (the module docstring)."""
        self._purge(now)
        if value < 0:
            owed = -value
            for sample in reversed(self._windows):
                taken = min(sample.value, owed)
                sample.value -= taken
                owed -= taken
                if owed <= 0:
                    break
            return
        if not self._windows or now - self._windows[-1].start >= self.window_s:
            self._windows.append(_Sample(now))
            if len(self._windows) > self.samples:
                del self._windows[0]
        self._windows[-1].value += value

    def _purge(self, now: float) -> None:
        horizon = self.samples * self.window_s
        while self._windows and now - self._windows[0].start >= horizon:
            del self._windows[0]

    def window_size(self, now: float) -> float:
        """The time the rate is measured over, in seconds (Kafka's ``Rate.windowSize``)."""
        self._purge(now)
        elapsed = now - self._windows[0].start if self._windows else 0.0
        full = int(elapsed // self.window_s)
        floor = self.samples - 1
        if full < floor:
            elapsed += (floor - full) * self.window_s
        return elapsed

    def rate(self, now: float) -> float:
        """Units per second over the kept windows."""
        size = self.window_size(now)
        total = sum(s.value for s in self._windows)
        return total / size if size > 0 else 0.0

    def throttle_s(self, quota: float, now: float, max_s: float) -> float:
        """How long the client must wait for the rate to fall back to ``quota`` (Kafka's
        ``QuotaUtils.throttleTime``: the excess over the quota, as a share of the quota, times the window),
        at most ``max_s``; 0 while within the quota. A quota of 0 (or less) allows nothing: ``max_s``, as Kafka
        bounds the infinite throttle it computes for it."""
        observed = self.rate(now)
        if observed <= quota:
            return 0.0
        if quota <= 0:
            return max_s
        return min((observed - quota) / quota * self.window_size(now), max_s)
