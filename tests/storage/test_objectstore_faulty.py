"""The fault-injecting wrapper: faults fire when and as often as configured, reproducibly, and heal() ends them."""

from __future__ import annotations

import time

import pytest

from storage.errors import ObjectNotFoundError, ObjectStoreError
from storage.objectstore.faulty import FaultyObjectStore
from storage.objectstore.memory import MemoryObjectStore


async def _outcomes(store: FaultyObjectStore, calls: int) -> list[bool]:
    results = []
    for i in range(calls):
        try:
            await store.put(f"k{i}", b"v")
        except ObjectStoreError:
            results.append(False)
        else:
            results.append(True)
    return results


async def test_probabilistic_faults_are_reproducible_with_a_seed() -> None:
    bucket = MemoryObjectStore()
    first = FaultyObjectStore(bucket, seed=42)
    second, other = (FaultyObjectStore(MemoryObjectStore(), seed=s) for s in (42, 43))
    for store in (first, second, other):
        store.fail("put", ObjectStoreError, probability=0.3)
    a, b, c = [await _outcomes(s, 200) for s in (first, second, other)]
    assert a == b
    assert a != c
    assert 30 <= a.count(False) <= 90  # about 30% of 200
    assert first.injected["put"] == a.count(False)
    # A failed put never reached the store.
    stored = set(bucket.keys())
    assert stored == {f"k{i}" for i, ok in enumerate(a) if ok}


async def test_fail_after_n_calls_then_heal() -> None:
    store = FaultyObjectStore(MemoryObjectStore())
    await store.put("key", b"value")
    store.fail_after(2, TimeoutError, op="get")
    assert await store.get("key") == b"value"
    assert await store.get("key") == b"value"
    for _ in range(3):
        with pytest.raises(TimeoutError, match="injected fault on get"):
            await store.get("key")
    assert await store.size("key") == 5  # other operations are unaffected
    store.heal()
    assert await store.get("key") == b"value"


async def test_fault_for_all_operations_with_a_limited_count() -> None:
    store = FaultyObjectStore(MemoryObjectStore())
    error = ObjectStoreError("injected 503 SlowDown")
    store.fail(None, error, times=2)
    with pytest.raises(ObjectStoreError) as first:
        await store.list("")
    assert first.value is error
    with pytest.raises(ObjectStoreError):
        await store.put("a", b"1")
    await store.put("a", b"1")
    assert await store.get("a") == b"1"
    assert sum(store.injected.values()) == 2


async def test_fault_after_the_request_lands_reports_failure_but_keeps_the_write() -> None:
    store = FaultyObjectStore(MemoryObjectStore())
    store.fail("put", ConnectionResetError, when="after", times=1)
    with pytest.raises(ConnectionResetError):
        await store.put("landed", b"data")
    assert await store.get("landed") == b"data"


async def test_missing_keys_still_surface_the_inner_error() -> None:
    store = FaultyObjectStore(MemoryObjectStore())
    with pytest.raises(ObjectNotFoundError):
        await store.get("absent")


async def test_added_latency_delays_only_the_chosen_operation() -> None:
    store = FaultyObjectStore(MemoryObjectStore())
    await store.put("k", b"v")
    store.add_latency(0.05, op="get")
    started = time.monotonic()
    await store.get("k")
    assert time.monotonic() - started >= 0.05
    started = time.monotonic()
    await store.size("k")
    assert time.monotonic() - started < 0.05
    store.heal()
    started = time.monotonic()
    await store.get("k")
    assert time.monotonic() - started < 0.05


def test_bad_fault_settings_are_rejected() -> None:
    store = FaultyObjectStore(MemoryObjectStore())
    with pytest.raises(ValueError, match="probability"):
        store.fail("put", ObjectStoreError, probability=1.5)
    with pytest.raises(ValueError, match="unknown operation"):
        store.fail("gte", ObjectStoreError)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="latency"):
        store.add_latency(-1)
