"""One behaviour contract for every object store: memory, local directory and S3 (moto's real HTTP server).

Anything the engine relies on (atomic put, byte ranges, tails, conditional create, listing, deletion, errors
for missing keys) must hold on every backend, or a bug would only show up in production on S3.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from storage.config import BucketURL, StorageConfig, parse_bucket_url
from storage.errors import ObjectExistsError, ObjectNotFoundError, ObjectStoreError
from storage.objectstore.base import MULTIPART_THRESHOLD, ObjectStore
from storage.objectstore.factory import drop_memory_store, open_object_store
from storage.objectstore.local import LocalObjectStore
from storage.objectstore.memory import MemoryObjectStore
from storage.objectstore.s3 import S3ObjectStore

BACKENDS = ["memory", "local", "s3"]


@pytest.fixture(params=BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ObjectStore]:
    backend: ObjectStore
    if request.param == "memory":
        backend = MemoryObjectStore(f"contract-{id(request)}")
    elif request.param == "local":
        backend = LocalObjectStore(tmp_path / "bucket")
    else:
        url: BucketURL = request.getfixturevalue("s3_bucket_url")
        backend = open_object_store(url, StorageConfig())
    try:
        yield backend
    finally:
        await backend.close()


def _payload(size: int, seed: int = 0) -> bytes:
    # Position-dependent bytes, so a range from the wrong offset can never compare equal by accident.
    block = hashlib.sha256(seed.to_bytes(8, "big")).digest() * 8
    return (block * (size // len(block) + 1))[:size]


async def test_put_then_get_returns_the_same_bytes_and_overwrite_replaces(store: ObjectStore) -> None:
    data = _payload(10_000)
    await store.put("a/b/c", data)
    assert await store.get("a/b/c") == data
    assert await store.size("a/b/c") == len(data)
    await store.put("a/b/c", b"short")
    assert await store.get("a/b/c") == b"short"


async def test_ranged_get_returns_exactly_the_half_open_range(store: ObjectStore) -> None:
    data = _payload(5000, seed=1)
    await store.put("r", data)
    assert await store.get("r", 100, 228) == data[100:228]
    assert await store.get("r", 4990) == data[4990:]
    assert await store.get("r", 0, 1) == data[:1]
    assert await store.get("r", 4000, 9000) == data[4000:]  # an end past the object is cut at its end
    assert await store.get("r", 5000) == b""
    assert await store.get("r", 7000, 8000) == b""
    assert await store.get("r", 10, 10) == b""


async def test_get_tail_returns_the_last_bytes_and_the_total_size(store: ObjectStore) -> None:
    data = _payload(3000, seed=2)
    await store.put("t", data)
    assert await store.get_tail("t", 100) == (data[-100:], 3000)
    assert await store.get_tail("t", 3000) == (data, 3000)
    assert await store.get_tail("t", 10_000) == (data, 3000)
    await store.put("empty", b"")
    assert await store.get_tail("empty", 48) == (b"", 0)
    assert await store.get("empty") == b""


async def test_missing_keys_raise_not_found_naming_key_and_store(store: ObjectStore) -> None:
    calls = [store.get("no/such"), store.get("no/such", 5, 10), store.get_tail("no/such", 8), store.size("no/such")]
    for call in calls:
        with pytest.raises(ObjectNotFoundError) as info:
            await call
        assert info.value.key == "no/such"
        assert "no/such" in str(info.value) and store.name in str(info.value)


async def test_delete_removes_given_keys_and_ignores_missing_ones(store: ObjectStore) -> None:
    for key in ("d/1", "d/2", "d/3"):
        await store.put(key, key.encode())
    await store.delete(["d/1", "d/3", "d/never-existed"])
    assert [info.key for info in await store.list("d/")] == ["d/2"]
    with pytest.raises(ObjectNotFoundError):
        await store.get("d/1")
    await store.delete([])
    assert await store.get("d/2") == b"d/2"


async def test_list_returns_keys_with_prefix_sorted_with_sizes(store: ObjectStore) -> None:
    keys = ["x/b/2", "x/a", "x/b/1", "y/a", "xa"]
    for i, key in enumerate(keys):
        await store.put(key, b"." * (i + 1))
    listed = await store.list("x/")
    assert [(i.key, i.size) for i in listed] == [("x/a", 2), ("x/b/1", 3), ("x/b/2", 1)]
    assert [i.key for i in await store.list("x")] == ["x/a", "x/b/1", "x/b/2", "xa"]
    assert [i.key for i in await store.list("x/b/")] == ["x/b/1", "x/b/2"]
    assert await store.list("nothing/") == []
    assert len(await store.list("")) == len(keys)


async def test_if_none_match_refuses_to_overwrite(store: ObjectStore) -> None:
    await store.put("lock", b"first", if_none_match=True)
    with pytest.raises(ObjectExistsError) as info:
        await store.put("lock", b"second", if_none_match=True)
    assert info.value.key == "lock"
    assert await store.get("lock") == b"first"


async def test_concurrent_conditional_puts_have_exactly_one_winner(store: ObjectStore) -> None:
    async def attempt(i: int) -> int | None:
        try:
            await store.put("race", f"writer-{i}".encode(), if_none_match=True)
        except ObjectExistsError:
            return None
        return i

    results = await asyncio.gather(*(attempt(i) for i in range(8)))
    winners = [r for r in results if r is not None]
    assert len(winners) == 1
    assert await store.get("race") == f"writer-{winners[0]}".encode()


async def test_stats_count_requests_and_bytes(store: ObjectStore) -> None:
    before_puts, before_gets = store.stats.puts, store.stats.gets
    await store.put("s", b"12345")
    await store.get("s", 1, 3)
    assert store.stats.puts == before_puts + 1
    assert store.stats.gets >= before_gets + 1
    assert store.stats.bytes_put >= 5 and store.stats.bytes_got >= 2


@pytest.mark.parametrize("store", ["local", "s3"], indirect=True)
async def test_object_above_multipart_threshold_round_trips(store: ObjectStore) -> None:
    data = _payload(MULTIPART_THRESHOLD + 1024 * 1024 + 17, seed=3)
    await store.put("big/object", data)
    assert await store.size("big/object") == len(data)
    boundary = 16 * 1024 * 1024  # where the first part ends with the default part size
    assert await store.get("big/object", boundary - 100, boundary + 100) == data[boundary - 100 : boundary + 100]
    got = await store.get("big/object")
    assert hashlib.sha256(got).digest() == hashlib.sha256(data).digest()
    tail, size = await store.get_tail("big/object", 4096)
    assert (tail, size) == (data[-4096:], len(data))
    if isinstance(store, S3ObjectStore):
        # create + 3 parts + complete: the object really went up in parts.
        assert store.stats.puts >= 5


async def test_mem_urls_share_one_bucket_per_name() -> None:
    url = BucketURL(0, "mem", "shared-contract")
    try:
        first = open_object_store(url, StorageConfig())
        second = open_object_store(url, StorageConfig())
        await first.put("k", b"v")
        assert await second.get("k") == b"v"
        drop_memory_store("shared-contract")
        third = open_object_store(url, StorageConfig())
        assert await third.list("") == []
    finally:
        drop_memory_store("shared-contract")


async def test_file_url_with_relative_path_resolves_against_working_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    store = open_object_store(parse_bucket_url("0@file://data/objects"), StorageConfig())
    await store.put("k/1", b"v")
    assert (tmp_path / "data" / "objects" / "k" / "1").read_bytes() == b"v"


async def test_put_of_parts_stores_them_back_to_back_as_one_object(store: ObjectStore) -> None:
    data = _payload(70_000, seed=9)
    parts = [data[:33], data[33:65_569], b"", data[65_569:]]  # as ObjectBuilder hands them over: headers, payloads
    before = store.stats.bytes_put
    await store.put("parts/one", parts)
    assert await store.get("parts/one") == data
    assert await store.size("parts/one") == len(data)
    assert await store.get("parts/one", 30, 40) == data[30:40]  # a range across a part boundary
    assert store.stats.bytes_put - before == len(data)
    with pytest.raises(ObjectExistsError):
        await store.put("parts/one", [b"x"], if_none_match=True)
    assert await store.get("parts/one") == data


async def test_large_object_of_many_parts_round_trips_byte_for_byte(store: ObjectStore) -> None:
    # The local store writes and flushes large objects a step at a time; parts cross step boundaries, one part is
    # bigger than a step, and there are more tiny parts than one writev call takes.
    data = _payload(1_300_000, seed=11)
    bounds = sorted({*range(0, 3000, 2), 300_001, 700_000, 700_001, 1_299_999, len(data)})
    parts = [data[a:b] for a, b in itertools.pairwise(bounds)]
    assert len(parts) > 1024
    await store.put("parts/large", parts)
    assert await store.get("parts/large") == data
    await store.put("whole/large", data)
    assert await store.get("whole/large") == data
    assert await store.get("whole/large", 262_100, 262_200) == data[262_100:262_200]


@pytest.fixture
async def second_bucket(
    store: ObjectStore, request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[ObjectStore]:
    """Another bucket of the same kind as ``store`` (on S3: of the same server), as the S3 WAL's bucket is beside
    the data bucket."""
    other: ObjectStore
    if isinstance(store, MemoryObjectStore):
        other = MemoryObjectStore(f"contract-other-{id(request)}")
    elif isinstance(store, LocalObjectStore):
        other = LocalObjectStore(tmp_path / "other-bucket")
    else:
        url: BucketURL = request.getfixturevalue("s3_bucket_url")
        other = open_object_store(url, StorageConfig())
    try:
        yield other
    finally:
        await other.close()


async def test_copy_stores_the_source_object_under_the_new_key_and_leaves_the_source(
    store: ObjectStore, second_bucket: ObjectStore
) -> None:
    data = _payload(300_000, seed=5)
    await second_bucket.put("wal/1/00", data)
    assert store.copies_from(second_bucket) and store.copies_from(store)
    await store.copy(second_bucket, "wal/1/00", "data/7")
    await store.copy(store, "data/7", "data/8")
    assert await store.get("data/7") == data
    assert await store.get("data/8", 1000, 2000) == data[1000:2000]
    await second_bucket.delete(["wal/1/00"])
    assert await store.get("data/7") == data  # a copy, not a reference to the source
    assert store.stats.copies == 2


async def test_copy_of_a_missing_key_raises_not_found_and_other_backends_cannot_be_copied_from(
    store: ObjectStore, second_bucket: ObjectStore, tmp_path: Path
) -> None:
    with pytest.raises(ObjectNotFoundError):
        await store.copy(second_bucket, "no/such/key", "data/9")
    foreign: ObjectStore = (
        LocalObjectStore(tmp_path / "foreign") if isinstance(store, MemoryObjectStore) else MemoryObjectStore("foreign")
    )
    assert not store.copies_from(foreign)
    with pytest.raises(ObjectStoreError):
        await store.copy(foreign, "k", "data/10")
