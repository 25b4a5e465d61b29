"""The S3-mode WAL: batching, ordered acks, node-epoch fencing, recovery by listing, trim (issue 2 item 3)."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import itertools
import logging
from collections.abc import Sequence
from pathlib import Path

import pytest

from storage.config import BucketURL, StorageConfig, parse_bucket_url
from storage.errors import ObjectStoreError, WALError, WALFencedError, WALUnavailableError
from storage.objectstore.base import ObjectData, ObjectInfo, ObjectStore
from storage.objectstore.faulty import FaultyObjectStore
from storage.objectstore.memory import MemoryObjectStore
from storage.stream_record_batch import StreamRecordBatch
from storage.wal import record as walrecord
from storage.wal import s3_format
from storage.wal.base import WALRecord
from storage.wal.factory import open_failover_wal, open_wal
from storage.wal.file import FileWAL
from storage.wal.s3 import S3WAL
from storage.wal.s3_format import WALObjectKey, object_key, plan_recovery

NS = "_fjord_test"
PREFIX = s3_format.node_prefix(NS, 1)


def batch(stream: int, offset: int, size: int = 200) -> StreamRecordBatch:
    seed = hashlib.sha256(f"{stream}:{offset}".encode()).digest()
    return StreamRecordBatch(stream, 1, offset, 1, (seed * (size // 32 + 1))[:size])


def make_wal(
    store: ObjectStore,
    epoch: int,
    *,
    batch_interval_ms: int = 20,
    max_bytes_in_batch: int = 8 << 20,
    capacity: int = 1 << 30,
) -> S3WAL:
    return S3WAL(
        store,
        namespace=NS,
        node_id=1,
        node_epoch=epoch,
        batch_interval_ms=batch_interval_ms,
        max_bytes_in_batch=max_bytes_in_batch,
        capacity=capacity,
    )


async def open_s3_wal(store: ObjectStore, epoch: int, **kwargs: int) -> tuple[S3WAL, list[WALRecord]]:
    wal = make_wal(store, epoch, **kwargs)
    await wal.start()
    return wal, [rec async for rec in wal.recover()]


def data_objects(store: MemoryObjectStore, epoch: int | None = None) -> list[WALObjectKey]:
    names = store.keys()
    keys = [s3_format.parse_object_key(k, PREFIX) for k in names]
    return [k for k in keys if k is not None and not k.empty and (epoch is None or k.epoch == epoch)]


# ----------------------------------------------------------------------------------------------- recovery plan


def test_plan_takes_a_contiguous_chain_from_the_trim_point_and_sets_everything_else_aside() -> None:
    def obj(epoch: int, start: int, end: int) -> WALObjectKey:
        return object_key(NS, 1, epoch, start, end)

    objects = [
        obj(1, 0, 100), obj(1, 100, 200), obj(1, 200, 300),  # epoch 1's log
        obj(1, 300, 400),  # landed after epoch 2 took over at 300: fenced
        obj(2, 300, 300), obj(2, 300, 350),  # epoch 2's marker and first object
        obj(2, 400, 450),  # beyond a gap: not part of the log
    ]
    plan = plan_recovery(objects, trim=150)
    assert plan.chain == [obj(1, 100, 200), obj(1, 200, 300), obj(2, 300, 300), obj(2, 300, 350)]
    assert plan.start == 150 and plan.end == 350 and plan.gap_at == 350
    assert plan.fenced == [obj(1, 300, 400)]
    assert plan.trimmed == [obj(1, 0, 100)]
    assert plan.orphaned == [obj(2, 400, 450)]
    # Without a trim point the log starts at the oldest object; with everything trimmed the newest object stays.
    assert plan_recovery(objects[:3], None).chain == objects[:3]
    everything = plan_recovery(objects[:3], trim=300)
    assert everything.chain == [] and everything.end == 300 and everything.trimmed == objects[:2]


# ----------------------------------------------------------------------------------------------- append/recover


async def test_records_round_trip_through_objects_and_a_newer_epoch_replays_them_in_order() -> None:
    store = MemoryObjectStore()
    wal, recovered = await open_s3_wal(store, epoch=1)
    assert recovered == []
    first = list(await asyncio.gather(*(wal.append(batch(i % 5, i)) for i in range(40))))
    second = list(await asyncio.gather(*(wal.append(batch(9, i, 5000)) for i in range(10))))
    await wal.close()
    written = first + second
    for prev, cur in itertools.pairwise(written):
        assert cur.offset == prev.next_offset
    assert len(data_objects(store, 1)) >= 2

    wal, recovered = await open_s3_wal(store, epoch=2)
    assert recovered == written
    nxt = await wal.append(batch(1, 1000))
    await wal.close()
    assert nxt.offset == written[-1].next_offset
    _, again = await open_s3_wal(store, epoch=3)
    assert again == [*written, nxt]


async def test_a_restart_with_the_same_epoch_recovers_and_continues(caplog: pytest.LogCaptureFixture) -> None:
    store = MemoryObjectStore()
    wal, _ = await open_s3_wal(store, epoch=5)
    written = [await wal.append(batch(1, i)) for i in range(6)]
    await wal.close()
    caplog.set_level(logging.WARNING)
    wal, recovered = await open_s3_wal(store, epoch=5)
    assert recovered == written
    assert "same epoch" in caplog.text
    more = await wal.append(batch(1, 6))
    await wal.close()
    assert more.offset == written[-1].next_offset
    _, again = await open_s3_wal(store, epoch=5)
    assert again == [*written, more]


async def test_appends_within_the_interval_share_one_object() -> None:
    store = MemoryObjectStore()
    wal, _ = await open_s3_wal(store, epoch=1, batch_interval_ms=100)
    await asyncio.gather(*(wal.append(batch(1, i)) for i in range(30)))
    assert wal.stats.objects == 1
    await wal.close()
    (only,) = data_objects(store)
    header = s3_format.ObjectHeader.decode(await store.get(only.key), only.key)
    assert (header.node_id, header.node_epoch, header.start_offset) == (1, 1, 0)


async def test_a_full_batch_is_written_without_waiting_for_the_interval() -> None:
    store = MemoryObjectStore()
    per_record = walrecord.record_size(batch(1, 0, 1000))
    wal, _ = await open_s3_wal(store, epoch=1, batch_interval_ms=60_000, max_bytes_in_batch=3 * per_record)
    acked = await asyncio.wait_for(asyncio.gather(*(wal.append(batch(1, i, 1000)) for i in range(9))), 5)
    assert len(acked) == 9 and wal.stats.objects == 3
    await wal.close()


class SlowFirstUpload:
    """Fault injection on a real store: the first WAL data object's PUT is delayed so a later one lands first."""

    def __init__(self, inner: MemoryObjectStore, delay: float) -> None:
        self.inner = inner
        self.stats = inner.stats
        self._delay = delay
        self._delayed = False
        self.put_order: list[str] = []

    @property
    def name(self) -> str:
        return self.inner.name

    async def put(self, key: str, data: ObjectData, *, if_none_match: bool = False) -> None:
        parsed = s3_format.parse_object_key(key, PREFIX)
        if parsed is not None and not parsed.empty and not self._delayed:
            self._delayed = True
            await asyncio.sleep(self._delay)
        await self.inner.put(key, data, if_none_match=if_none_match)
        self.put_order.append(key)

    async def get(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        return await self.inner.get(key, start, end)

    async def get_tail(self, key: str, length: int) -> tuple[bytes, int]:
        return await self.inner.get_tail(key, length)

    async def size(self, key: str) -> int:
        return await self.inner.size(key)

    async def delete(self, keys: Sequence[str]) -> None:
        await self.inner.delete(keys)

    async def list(self, prefix: str) -> list[ObjectInfo]:
        return await self.inner.list(prefix)

    async def close(self) -> None:
        await self.inner.close()


async def test_acks_are_released_in_append_order_even_when_a_later_upload_lands_first() -> None:
    store = SlowFirstUpload(MemoryObjectStore(), delay=0.3)
    per_record = walrecord.record_size(batch(1, 0, 1000))
    wal, _ = await open_s3_wal(store, epoch=1, batch_interval_ms=60_000, max_bytes_in_batch=2 * per_record)
    acked: list[int] = []

    async def one(i: int) -> None:
        rec = await wal.append(batch(1, i, 1000))
        acked.append(rec.offset)

    await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(6))), 5)
    await wal.close()
    data_puts = [k for k in store.put_order if (p := s3_format.parse_object_key(k, PREFIX)) and not p.empty]
    assert data_puts != sorted(data_puts), "the delayed first object should have landed last"
    assert acked == sorted(acked)


# ----------------------------------------------------------------------------------------------- fencing


async def test_a_newer_epoch_fences_the_old_writer_and_never_recovers_what_it_wrote_afterwards() -> None:
    store = MemoryObjectStore()
    old, _ = await open_s3_wal(store, epoch=1, batch_interval_ms=30)
    acked = [await old.append(batch(1, i)) for i in range(5)]
    pending = [asyncio.create_task(old.append(batch(1, 100 + i))) for i in range(3)]  # in the open batch

    new, recovered = await open_s3_wal(store, epoch=2)
    assert recovered == acked
    results = await asyncio.gather(*pending, return_exceptions=True)
    assert all(isinstance(r, WALFencedError) for r in results), results
    # The fenced writer's object did reach the bucket; recovery must still not take it.
    late = [o for o in data_objects(store, 1) if o.start >= acked[-1].next_offset]
    assert late, "the old writer's post-takeover object should exist in the bucket"
    with pytest.raises(WALFencedError):
        await old.append(batch(1, 200))
    with pytest.raises(WALFencedError):
        await old.trim(acked[1].offset)
    assert old.fenced
    await old.close()

    mine = [await new.append(batch(2, i)) for i in range(3)]
    await new.close()
    _, third = await open_s3_wal(store, epoch=3)
    assert third == acked + mine
    assert data_objects(store, 1) == [o for o in data_objects(store, 1) if o.end <= acked[-1].next_offset]

    stale = make_wal(store, epoch=2)
    with pytest.raises(WALFencedError, match="epoch 3"):
        await stale.start()


async def test_objects_a_fenced_writer_lands_after_the_takeover_stay_ignored_by_every_later_owner() -> None:
    store = MemoryObjectStore()
    old, _ = await open_s3_wal(store, epoch=1)
    acked = [await old.append(batch(1, i)) for i in range(3)]
    new, _ = await open_s3_wal(store, epoch=2)
    # The stale writer's PUT lands after the new owner started (and cleaned up): only its own check fences it.
    with pytest.raises(WALFencedError):
        await old.append(batch(1, 50))
    await old.close()
    assert any(o.start == acked[-1].next_offset for o in data_objects(store, 1))
    mine = [await new.append(batch(2, i)) for i in range(2)]
    await new.trim(mine[-1].next_offset)  # trims everything, markers included (but the newest object)
    await new.close()
    _, recovered = await open_s3_wal(store, epoch=3)
    assert recovered == []


# ----------------------------------------------------------------------------------------------- trim, reset, damage


async def test_trim_persists_deletes_objects_below_it_and_survives_restart() -> None:
    store = MemoryObjectStore()
    wal, _ = await open_s3_wal(store, epoch=1)
    written = [await wal.append(batch(1, i, 300)) for i in range(10)]
    objects_before = len(data_objects(store))
    assert objects_before == 10
    await wal.trim(written[6].offset)
    assert len(data_objects(store)) == 4
    assert wal.used_bytes == written[-1].next_offset - written[6].offset
    with pytest.raises(WALError, match="durable"):
        await wal.trim(written[-1].next_offset + 10)
    await wal.close()
    wal, recovered = await open_s3_wal(store, epoch=2)
    assert recovered == written[6:]
    await wal.reset()
    after = await wal.append(batch(3, 0))
    await wal.close()
    assert after.offset == written[-1].next_offset
    _, recovered = await open_s3_wal(store, epoch=3)
    assert recovered == [after]


async def test_a_corrupt_object_loses_only_its_own_records(caplog: pytest.LogCaptureFixture) -> None:
    store = MemoryObjectStore()
    wal, _ = await open_s3_wal(store, epoch=1)
    written = [await wal.append(batch(1, i)) for i in range(4)]
    await wal.close()
    victim = data_objects(store)[1]
    data = bytearray(await store.get(victim.key))
    data[-5] ^= 0x10
    await store.put(victim.key, bytes(data))
    caplog.set_level(logging.ERROR)
    _, recovered = await open_s3_wal(store, epoch=2)
    assert recovered == [written[0], *written[2:]]
    assert victim.key in caplog.text


async def test_a_missing_object_ends_the_log_at_the_gap(caplog: pytest.LogCaptureFixture) -> None:
    store = MemoryObjectStore()
    wal, _ = await open_s3_wal(store, epoch=1)
    written = [await wal.append(batch(1, i)) for i in range(4)]
    await wal.close()
    await store.delete([data_objects(store)[2].key])
    caplog.set_level(logging.ERROR)
    wal, recovered = await open_s3_wal(store, epoch=2)
    assert recovered == written[:2]
    assert "missing" in caplog.text
    nxt = await wal.append(batch(2, 0))
    await wal.close()
    assert nxt.offset == written[1].next_offset
    _, again = await open_s3_wal(store, epoch=3)
    assert again == [*written[:2], nxt]


async def test_a_full_wal_makes_appends_wait_until_trim() -> None:
    store = MemoryObjectStore()
    size = walrecord.record_size(batch(1, 0))
    wal, _ = await open_s3_wal(store, epoch=1, capacity=2 * size)
    written = [await wal.append(batch(1, i)) for i in range(2)]
    blocked = asyncio.create_task(wal.append(batch(1, 2)))
    done, _ = await asyncio.wait({blocked}, timeout=0.2)
    assert not done
    await wal.trim(written[1].offset)
    rec = await asyncio.wait_for(blocked, 5)
    assert rec.offset == written[-1].next_offset
    await wal.close()


async def test_a_failed_upload_is_retried_until_s3_answers_and_nothing_is_acknowledged_meanwhile(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "storage.wal.s3")
    store = FaultyObjectStore(MemoryObjectStore())
    wal = S3WAL(store, namespace=NS, node_id=1, node_epoch=1, batch_interval_ms=20, unwritable_max_ms=300)
    await wal.start()
    ok = await wal.append(batch(1, 0))
    store.fail("put", ObjectStoreError("injected 503"))
    waiting = [asyncio.create_task(wal.append(batch(1, i))) for i in (1, 2)]
    done, _ = await asyncio.wait(waiting, timeout=0.6)
    assert not done, "an append was settled while S3 refused every write"
    refusal = wal.refusal()
    assert isinstance(refusal, WALUnavailableError)  # past unwritable_max_ms: new appends are refused, retriably
    assert wal.unwritable_seconds >= 0.3
    store.heal()
    acked = [await asyncio.wait_for(task, 5) for task in waiting]
    assert wal.refusal() is None
    assert await asyncio.wait_for(wal.append(batch(1, 3)), 5)
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING and "cannot write to S3" in r.message]
    assert len(warnings) == 1 and not any(r.exc_info for r in caplog.records)
    assert any("S3 writable again" in r.message for r in caplog.records)
    await wal.close()
    _, recovered = await open_s3_wal(store.inner, epoch=2)
    assert recovered[:3] == [ok, *acked]


async def test_start_and_recovery_wait_for_s3_instead_of_failing() -> None:
    store = FaultyObjectStore(MemoryObjectStore(), seed=5)
    wal, _ = await open_s3_wal(store, epoch=1)
    acked = [await wal.append(batch(1, i)) for i in range(3)]
    await wal.close()
    store.fail(None, ObjectStoreError("injected 503"), probability=0.5)  # a SlowDown storm
    store.fail("get", ObjectStoreError("injected 503"), times=3)  # the first reads all fail
    restarted = make_wal(store, 2)
    await asyncio.wait_for(restarted.start(), 20)
    assert [rec async for rec in restarted.recover()] == acked
    assert store.injected["get"] >= 3 and restarted.unwritable_seconds > 0
    store.heal()
    await restarted.close()


async def test_a_fence_still_fails_the_waiting_appends() -> None:
    store = FaultyObjectStore(MemoryObjectStore())
    wal, _ = await open_s3_wal(store, epoch=1)
    store.fail("put", ObjectStoreError("injected 503"))
    waiting = asyncio.create_task(wal.append(batch(1, 0)))
    await asyncio.sleep(0.1)  # let the upload fail once
    newer, _ = await open_s3_wal(store.inner, epoch=2)
    store.heal()
    with pytest.raises(WALFencedError):
        await asyncio.wait_for(waiting, 5)
    await newer.close()
    await wal.close()


# ----------------------------------------------------------------------------------------------- factory and real S3


async def test_open_wal_picks_the_mode_from_the_wal_url(tmp_path: Path) -> None:
    file_config = StorageConfig(wal_url=parse_bucket_url(f"0@file://{tmp_path}/wal", "s3.wal.path"))
    assert isinstance(open_wal(file_config), FileWAL)
    mem_url = parse_bucket_url("0@mem://wal-factory-test?batchInterval=5", "s3.wal.path", wal=True)
    mem_config = StorageConfig(wal_url=mem_url)
    store = MemoryObjectStore()
    wal = open_wal(mem_config, lambda url, config: store)
    assert isinstance(wal, S3WAL)
    await wal.start()
    rec = await asyncio.wait_for(wal.append(batch(1, 0)), 2)
    await wal.close()
    names = store.keys()
    assert rec.offset == 0 and any(k.startswith("wal/_fjord_fjord/0/") for k in names)


class _CountedCloses(MemoryObjectStore):
    closes = 0

    async def close(self) -> None:
        self.closes += 1


async def test_a_failover_wal_borrows_the_nodes_own_wal_store() -> None:
    """A failover opens no S3 client of its own: the dead node's WAL is read through this node's WAL store (the
    same shared bucket), which closing the failover's WAL leaves open for this node's appends."""
    store = _CountedCloses()
    config = StorageConfig(wal_url=parse_bucket_url("0@mem://wal-factory-test?batchInterval=5", "s3.wal.path",
                                                    wal=True))
    dead = open_wal(dataclasses.replace(config, node_id=7, node_epoch=1), lambda url, config: store)
    await dead.start()
    acked = await asyncio.wait_for(dead.append(batch(1, 0)), 2)
    await dead.close()  # it owned its store: closed
    own = open_wal(config, lambda url, config: store)
    await own.start()
    failover = open_failover_wal(config, 7, 2, own_wal=own)
    assert failover.store is store
    await failover.start()
    assert [rec async for rec in failover.recover()] == [acked]
    await failover.close()
    assert store.closes == 1
    await asyncio.wait_for(own.append(batch(2, 0)), 2)
    await own.close()


async def test_fencing_and_recovery_against_a_real_s3_server(s3_bucket_url: BucketURL) -> None:
    config = StorageConfig(
        wal_url=dataclasses.replace(s3_bucket_url, params={**s3_bucket_url.params, "batchInterval": "20"}),
        node_id=4,
        node_epoch=1,
    )
    old = open_wal(config)
    await old.start()
    acked = list(await asyncio.gather(*(old.append(batch(i % 3, i, 4000)) for i in range(30))))
    new = open_wal(dataclasses.replace(config, node_epoch=2))
    await new.start()
    recovered = [rec async for rec in new.recover()]
    assert recovered == acked
    with pytest.raises(WALFencedError):
        await old.append(batch(1, 99))
    await old.close()
    await new.trim(acked[10].offset)
    more = await new.append(batch(5, 0))
    await new.close()
    last = open_wal(dataclasses.replace(config, node_epoch=3))
    await last.start()
    assert [rec async for rec in last.recover()] == [*acked[10:], more]
    await last.close()
