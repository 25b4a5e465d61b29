"""When a moving partition's source may let go: once the producers that wrote lately were told where it goes and
their requests in flight have arrived (broker/partition/departure.py), on a clock the test moves."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

from broker.partition.departure import LIMIT_S, QUIET_S, RECENT_S, STRAGGLE_S, Writers, tell_producers


class Connection:
    """A stand-in for a client connection's state: only its identity (and weak reference) matters."""


def test_a_partition_nobody_wrote_to_lately_lets_go_at_once() -> None:
    writers = Writers()
    assert writers.wait(100.0) is None
    old = Connection()
    writers.appended(old, 100.0)
    assert writers.wait(100.0 + RECENT_S + 0.01) is None


def test_a_recent_producer_holds_the_source_until_an_answer_tells_it() -> None:
    writers, producer = Writers(), Connection()
    writers.appended(producer, 10.0)
    assert writers.wait(10.2) == QUIET_S  # not told yet: asked again shortly
    writers.appended(producer, 10.21)
    writers.told(producer, 10.215)
    assert writers.wait(10.216) == pytest.approx(10.21 + QUIET_S - 10.216)
    assert writers.wait(10.21 + QUIET_S) is None


def test_requests_in_flight_when_told_hold_the_source_until_they_stop_arriving() -> None:
    writers, producer = Writers(), Connection()
    writers.appended(producer, 5.0)
    writers.told(producer, 5.0)
    writers.appended(producer, 5.01)  # sent before the producer read its answer
    assert writers.wait(5.015) == pytest.approx(5.01 + QUIET_S - 5.015)
    assert writers.wait(5.01 + QUIET_S) is None


def test_a_producer_that_ignores_the_hint_does_not_keep_the_source() -> None:
    writers, producer = Writers(), Connection()
    writers.told(producer, 1.0)
    writers.appended(producer, 1.0 + STRAGGLE_S + 0.01)  # told long ago and still here: it reads no such hint
    assert writers.wait(1.0 + STRAGGLE_S + 0.011) is None


def test_every_recent_producer_must_be_told() -> None:
    writers, told, untold = Writers(), Connection(), Connection()
    writers.appended(told, 2.0)
    writers.told(told, 2.0)
    writers.appended(untold, 1.9)
    assert writers.wait(2.0 + QUIET_S) == QUIET_S
    writers.appended(untold, 2.05)
    writers.told(untold, 2.05)
    assert writers.wait(2.05 + QUIET_S) is None


def test_a_closed_connection_is_forgotten() -> None:
    writers, producer = Writers(), Connection()
    writers.appended(producer, 3.0)
    del producer
    assert writers.wait(3.0) is None


@dataclass
class _Moving:
    writers: Writers = field(default_factory=Writers)


def test_the_wait_is_bounded_for_a_producer_that_never_comes_back() -> None:
    loop_clock = [50.0]
    moving = _Moving()
    producer = Connection()
    moving.writers.appended(producer, 49.9)

    async def advance(delay: float) -> None:  # a clock the test moves instead of waiting
        loop_clock[0] += delay

    waited = asyncio.run(tell_producers([moving], lambda: loop_clock[0], advance))
    assert waited == pytest.approx(LIMIT_S)


def test_the_wait_ends_when_the_last_producer_has_been_told() -> None:
    loop_clock = [7.0]
    moving = _Moving()
    producer = Connection()
    moving.writers.appended(producer, 6.99)

    async def advance(delay: float) -> None:
        loop_clock[0] += delay
        if loop_clock[0] >= 7.05 and moving.writers.wait(loop_clock[0]) == QUIET_S:
            moving.writers.appended(producer, loop_clock[0])  # its next append is answered with the hint
            moving.writers.told(producer, loop_clock[0])

    waited = asyncio.run(tell_producers([moving], lambda: loop_clock[0], advance))
    assert 0.05 <= waited < LIMIT_S
