"""Waiting in tests: :func:`eventually` (blocking) and :func:`eventually_async` poll a condition until it holds.

Every wait in the suite that waits for something to *happen* goes through one of these instead of a hand-written
``while time.monotonic() < deadline`` loop or a fixed ``sleep``: the wait ends as soon as the condition holds, is
bounded both in time and in the number of attempts, and a timeout fails with an ``AssertionError`` that says what
was awaited and what the condition last returned (or raised)::

    eventually(lambda: "ready" in node.log_text(), timeout=10, what="the node to log 'ready'")
    leader = await eventually_async(find_leader, timeout=30, what="one leader")

A condition holds when it returns a truthy value, and that value is returned; with ``until`` the condition's value
is passed to ``until`` instead, so that a timeout reports the last value itself (say an error code) rather than
``False``, and a falsy value such as error code 0 can be the answer. ``None`` always means "not yet" (so a
condition typed ``() -> X | None`` gives an ``X``). A condition also signals "not yet" by raising one of
``retry_on`` (say ``OSError`` while a listener is not up yet); any other exception ends the wait at once and
propagates (a process that exited will never become ready). ``what`` is a description, or a callable building
one when the wait fails (for log text that only matters then).

Sleeps that deliberately let time pass (to show that something does *not* happen, or to age data past a limit)
are not waits for a condition and stay plain sleeps.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

__all__ = ["eventually", "eventually_async"]

T = TypeVar("T")

DEFAULT_INTERVAL_S = 0.05


class _Wait:
    """The bookkeeping of one wait, shared by both flavours (which differ only in how they call and sleep): the
    attempts made, the last value or exception, and the two bounds."""

    def __init__(self, *, timeout: float, interval: float, attempts: int | None, what: str | Callable[[], str],
                 until: Callable[[Any], object] | None, clock: Callable[[], float]) -> None:
        # A condition that blocks by itself (a consumer's poll) still takes a small interval: 0 would spin through
        # the count bound at once whenever the condition returns quickly.
        if timeout <= 0 or interval <= 0:
            raise ValueError(f"timeout and interval must be positive, got {timeout} and {interval}")
        if attempts is not None and attempts < 1:
            raise ValueError(f"attempts must be at least 1, got {attempts}")
        # One attempt per interval over the timeout, plus the first one: the time bound is reached first unless the
        # clock or the sleeps misbehave, and the count bound keeps the loop finite even then.
        self._limit = attempts if attempts is not None else math.ceil(timeout / interval) + 1
        self._timeout, self._interval, self._what, self._until, self._clock = timeout, interval, what, until, clock
        self._started = clock()
        self._deadline = self._started + timeout
        self._tries = 0
        self._last: object = None
        self._error: BaseException | None = None

    def holds(self, value: object) -> bool:
        """Records an attempt that returned ``value``; whether the wait is over."""
        self._tries += 1
        self._error, self._last = None, value
        return value is not None and bool(self._until(value) if self._until is not None else value)

    def raised(self, error: BaseException) -> None:
        """Records an attempt that raised one of ``retry_on``."""
        self._tries += 1
        self._error = error

    def pause(self) -> float:
        """Seconds to sleep before the next attempt; AssertionError when a bound is reached."""
        now = self._clock()
        if self._tries >= self._limit or now >= self._deadline:
            raise self._failure(now - self._started) from self._error
        return max(0.0, min(self._interval, self._deadline - now))

    def _failure(self, elapsed: float) -> AssertionError:
        description = self._what() if callable(self._what) else self._what
        if self._error is not None:
            outcome = f"last attempt raised {type(self._error).__name__}: {self._error}"
        else:
            text = repr(self._last)
            outcome = f"last value {text if len(text) <= 2000 else text[:2000] + '...'}"
        return AssertionError(f"{description}: not within {self._timeout:g} s (gave up after {self._tries} attempts "
                              f"in {elapsed:.1f} s); {outcome}")


def eventually(
    condition: Callable[[], T | None],
    *,
    timeout: float,
    what: str | Callable[[], str],
    interval: float = DEFAULT_INTERVAL_S,
    until: Callable[[T], object] | None = None,
    retry_on: tuple[type[BaseException], ...] = (),
    attempts: int | None = None,
) -> T:
    """Calls ``condition`` every ``interval`` seconds until it holds and returns its value; raises AssertionError
    naming ``what`` and the last value (or exception) after ``timeout`` seconds or ``attempts`` attempts."""
    wait = _Wait(timeout=timeout, interval=interval, attempts=attempts, what=what, until=until, clock=time.monotonic)
    while True:
        try:
            value = condition()
        except retry_on as exc:
            wait.raised(exc)
        else:
            if wait.holds(value) and value is not None:
                return value
        time.sleep(wait.pause())


@overload
async def eventually_async(
    condition: Callable[[], Awaitable[T | None]],
    *,
    timeout: float,
    what: str | Callable[[], str],
    interval: float = ...,
    until: Callable[[T], object] | None = ...,
    retry_on: tuple[type[BaseException], ...] = ...,
    attempts: int | None = ...,
) -> T: ...


@overload
async def eventually_async(
    condition: Callable[[], T | None],
    *,
    timeout: float,
    what: str | Callable[[], str],
    interval: float = ...,
    until: Callable[[T], object] | None = ...,
    retry_on: tuple[type[BaseException], ...] = ...,
    attempts: int | None = ...,
) -> T: ...


async def eventually_async(
    condition: Callable[[], Any],
    *,
    timeout: float,
    what: str | Callable[[], str],
    interval: float = DEFAULT_INTERVAL_S,
    until: Callable[[Any], object] | None = None,
    retry_on: tuple[type[BaseException], ...] = (),
    attempts: int | None = None,
) -> Any:
    """:func:`eventually` for a coroutine: ``condition`` is a coroutine function or a plain callable (checking
    in-process state), and the pauses between attempts are ``asyncio.sleep`` so that the loop keeps running."""
    wait = _Wait(timeout=timeout, interval=interval, attempts=attempts, what=what, until=until,
                 clock=asyncio.get_running_loop().time)
    while True:
        try:
            value = condition()
            if isinstance(value, Awaitable):
                value = await value
        except retry_on as exc:
            wait.raised(exc)
        else:
            if wait.holds(value):
                return value
        await asyncio.sleep(wait.pause())
