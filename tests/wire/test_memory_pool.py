"""The node's bound on request bytes read and queued (``queued.max.request.bytes``): waiters go first come first
served, and a request larger than the whole pool is still read when it is alone."""

from __future__ import annotations

from collections.abc import Callable

from wire.memory_pool import MemoryPool, pool_of


def test_a_reservation_that_does_not_fit_waits_for_a_release_in_order() -> None:
    pool = MemoryPool(100)
    assert pool.try_reserve(60)
    assert not pool.try_reserve(60)
    order: list[str] = []

    def waiter(name: str, size: int) -> Callable[[], bool]:
        def granted() -> bool:
            if pool.try_reserve(size):
                order.append(name)
                return True
            return False
        return granted

    first, second = waiter("first", 60), waiter("second", 30)
    pool.wait(first)
    pool.wait(second)
    pool.release(10)  # 50 reserved: the first's 60 does not fit, and the second's 30 does not jump the queue
    assert order == [] and pool.waiting == 2
    pool.release(50)
    assert order == ["first", "second"] and pool.reserved == 90 and pool.waiting == 0


def test_a_request_larger_than_the_pool_is_read_alone() -> None:
    pool = MemoryPool(100)
    assert pool.try_reserve(500)
    assert not pool.try_reserve(1)
    pool.release(500)
    assert pool.try_reserve(1)


def test_minus_one_is_unbounded_as_in_kafka() -> None:
    pool = pool_of(-1)
    assert pool.try_reserve(10**12) and pool.try_reserve(10**12)


def test_waits_and_their_time_are_counted_when_they_end() -> None:
    now = [0.0]
    pool = MemoryPool(100, clock=lambda: now[0])
    assert pool.try_reserve(100)
    granted, gone = (lambda: pool.try_reserve(50)), (lambda: False)
    pool.wait(granted)
    pool.wait(gone)
    assert (pool.waits, pool.wait_seconds) == (2, 0.0)  # a wait still going counts only once it ends
    now[0] = 2.0
    pool.release(100)  # the first is granted after 2 s; the second still waits
    assert (pool.waiting, pool.wait_seconds) == (1, 2.0)
    now[0] = 5.0
    pool.cancel(gone)  # its connection went away after 5 s
    assert (pool.waiting, pool.waits, pool.wait_seconds) == (0, 2, 7.0)
