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


def _max_attempts(timeout: float, interval: float, attempts: int | None) -> int:
    if attempts is not None:
        if attempts < 1:
            raise ValueError(f"attempts must be at least 1, got {attempts}")
        return attempts
    # One attempt per interval over the timeout, plus the first one: the time bound is reached first unless the
    # clock or the sleeps misbehave, and the count bound keeps the loop finite even then.
    return math.ceil(timeout / interval) + 1


def _failure(what: str | Callable[[], str], timeout: float, elapsed: float, tries: int, *, last: object,
             error: BaseException | None) -> AssertionError:
    description = what() if callable(what) else what
    if error is not None:
        outcome = f"last attempt raised {type(error).__name__}: {error}"
    else:
        text = repr(last)
        outcome = f"last value {text if len(text) <= 2000 else text[:2000] + '...'}"
    return AssertionError(
        f"{description}: not within {timeout:g} s (gave up after {tries} attempts in {elapsed:.1f} s); {outcome}"
    )


def _check_arguments(timeout: float, interval: float) -> None:
    # A condition that blocks by itself (a consumer's poll) still takes a small interval: 0 would spin through the
    # count bound at once whenever the condition returns quickly.
    if timeout <= 0 or interval <= 0:
        raise ValueError(f"timeout and interval must be positive, got {timeout} and {interval}")


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
    _check_arguments(timeout, interval)
    limit = _max_attempts(timeout, interval, attempts)
    started = time.monotonic()
    deadline = started + timeout
    last: object = None
    error: BaseException | None = None
    tries = 0
    while True:
        tries += 1
        try:
            value = condition()
        except retry_on as exc:
            error = exc
        else:
            error, last = None, value
            if value is not None and (until(value) if until is not None else value):
                return value
        if tries >= limit or time.monotonic() >= deadline:
            raise _failure(what, timeout, time.monotonic() - started, tries, last=last, error=error) from error
        time.sleep(max(0.0, min(interval, deadline - time.monotonic())))


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
    _check_arguments(timeout, interval)
    limit = _max_attempts(timeout, interval, attempts)
    loop = asyncio.get_running_loop()
    started = loop.time()
    deadline = started + timeout
    last: object = None
    error: BaseException | None = None
    tries = 0
    while True:
        tries += 1
        try:
            value = condition()
            if isinstance(value, Awaitable):
                value = await value
        except retry_on as exc:
            error = exc
        else:
            error, last = None, value
            if value is not None and (until(value) if until is not None else value):
                return value
        if tries >= limit or loop.time() >= deadline:
            raise _failure(what, timeout, loop.time() - started, tries, last=last, error=error) from error
        await asyncio.sleep(max(0.0, min(interval, deadline - loop.time())))
