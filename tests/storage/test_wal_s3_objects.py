"""S3 WAL object versions: v2 objects (the object format after the header) are stream-set objects once copied whole,
and a restart reads a log of v1 objects (an older Fjord's), v2 objects, or both, back exactly as appended."""

from __future__ import annotations

import asyncio
import logging

import pytest

from storage.objects.format import object_key
from storage.objects.reader import ObjectReader
from storage.objectstore.memory import MemoryObjectStore
from storage.wal import s3_format
from storage.wal.base import WALRecord
from storage.wal.s3 import S3WAL
from tests.storage.test_wal_s3 import NS, PREFIX, batch, data_objects


def _wal(store: MemoryObjectStore, epoch: int, version: int = 2) -> S3WAL:
    return S3WAL(store, namespace=NS, node_id=1, node_epoch=epoch, batch_interval_ms=50,
                 object_block_size=1024, object_version=version)


async def _recover(store: MemoryObjectStore, epoch: int) -> list[WALRecord]:
    wal = _wal(store, epoch)
    await wal.start()
    recovered = [rec async for rec in wal.recover()]
    await wal.close()
    return recovered


async def _version(store: MemoryObjectStore, key: str) -> int:
    return s3_format.ObjectHeader.decode(await store.get(key), key).version


async def test_a_v2_wal_object_copied_whole_is_a_stream_set_object_the_reader_reads() -> None:
    wals, data = MemoryObjectStore("wal"), MemoryObjectStore("data")
    wal = _wal(wals, 1)
    await wal.start()
    appended = [batch(stream, offset, 700) for offset in range(6) for stream in (3, 1, 2)]  # interleaved
    written = await asyncio.gather(*(wal.append(b) for b in appended))
    await wal.close()
    [obj] = data_objects(wals, 1)
    assert await _version(wals, obj.key) == 2
    await data.copy(wals, obj.key, object_key(77, NS))

    reader = ObjectReader(data, NS)
    index = await reader.index(77)
    assert [(e.stream_id, e.start_offset) for e in index][:1] == [(1, 0)]  # sorted by stream, then offset
    for stream in (1, 2, 3):
        got = await reader.read_range(77, stream, 0, 6, 1 << 20)
        assert got == [b for b in appended if b.stream_id == stream]
    # A restart still gets every record in append order, each at its own WAL position.
    assert await _recover(wals, 2) == list(written)


async def test_a_log_of_v1_objects_then_v2_objects_recovers_in_append_order() -> None:
    store = MemoryObjectStore()
    old = _wal(store, 1, version=1)  # what a Fjord before v2 wrote
    await old.start()
    first = [await old.append(batch(1, i)) for i in range(3)]
    await old.close()
    new = _wal(store, 2)
    await new.start()
    assert [r async for r in new.recover()] == first
    second = list(await asyncio.gather(*(new.append(batch(s, i)) for i in range(3, 6) for s in (2, 1))))
    await new.close()
    versions = sorted({await _version(store, o.key) for o in data_objects(store)})
    assert versions == [1, 2]
    assert await _recover(store, 3) == first + second


async def test_a_bulk_whose_stream_offsets_are_not_contiguous_is_written_as_v1_and_recovers() -> None:
    store = MemoryObjectStore()
    wal = _wal(store, 1)
    await wal.start()
    written = list(await asyncio.gather(wal.append(batch(1, 0)), wal.append(batch(1, 5)), wal.append(batch(2, 0))))
    await wal.close()
    [obj] = data_objects(store, 1)
    assert await _version(store, obj.key) == 1
    assert await _recover(store, 2) == written


async def test_a_v2_object_whose_position_table_is_damaged_is_skipped_and_later_ones_replay(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = MemoryObjectStore()
    wal = _wal(store, 1)
    await wal.start()
    first = await asyncio.gather(*(wal.append(batch(1, i)) for i in range(3)))
    second = list(await asyncio.gather(*(wal.append(batch(1, i)) for i in range(3, 6))))
    await wal.close()
    damaged = data_objects(store, 1)[0]
    assert first[-1].next_offset == damaged.end
    raw = bytearray(await store.get(damaged.key))
    raw[s3_format.OBJECT_HEADER_SIZE + 4 + 3] ^= 0x40  # the first record's position
    await store.put(damaged.key, bytes(raw))
    with caplog.at_level(logging.ERROR):
        assert await _recover(store, 2) == second
    assert any(damaged.key in r.getMessage() and "skipping the object" in r.getMessage() for r in caplog.records)
    assert PREFIX in damaged.key
