"""A file WAL read back from the start of the process (issue 25, ``storage.wal.early_read``): the WAL that opens
the directory takes over the read and its lock, and recovers exactly what it would have read itself; a directory
another WAL holds is not read early, and a read nobody takes gives its lock back."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from storage.config import BucketURL, StorageConfig
from storage.errors import WALError
from storage.wal import early_read
from storage.wal import recovery as wal_recovery
from storage.wal.base import WALRecord
from storage.wal.file import FileWAL
from tests.storage.test_wal_file import batch, flip_bits, open_wal, segment_files, write


def config_for(path: Path, cache: int = 1 << 30) -> StorageConfig:
    return dataclasses.replace(StorageConfig(), wal_url=BucketURL(0, "file", str(path)), wal_cache_size=cache)


async def recover_claimed(path: Path, **kwargs: int) -> tuple[FileWAL, list[WALRecord]]:
    wal = FileWAL(path, **kwargs)
    await wal.start()
    return wal, [rec async for rec in wal.recover()]


@pytest.mark.parametrize("cache", [1, 5000, 1 << 30])
async def test_the_wal_takes_over_the_read_and_recovers_every_record_across_segments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache: int
) -> None:
    """Whatever the read may hold ahead (``cache``: one read's records at a time up to all of them), and with
    bodies read on their own or not."""
    monkeypatch.setattr(wal_recovery, "LARGE_BODY", 2000)
    monkeypatch.setattr(wal_recovery, "READ_CHUNK", 4096)
    written = await write(tmp_path, [batch(i % 3, i, [5, 900, 3000][i % 3]) for i in range(60)],
                          segment_size=16 * 1024)
    assert len(segment_files(tmp_path)) > 2
    read = early_read.start(config_for(tmp_path, cache))
    assert read is not None
    wal, recovered = await recover_claimed(tmp_path, segment_size=16 * 1024)
    assert early_read.claim(tmp_path) is None  # taken
    extra = await wal.append(batch(7, 0))
    await wal.close()
    assert recovered == written
    assert extra.offset == written[-1].next_offset
    _, again = await open_wal(tmp_path, segment_size=16 * 1024)
    assert [r.batch for r in again] == [r.batch for r in written] + [batch(7, 0)]


async def test_a_torn_and_damaged_wal_read_early_keeps_the_same_intact_prefix(tmp_path: Path) -> None:
    written = await write(tmp_path, [batch(1, i, 200) for i in range(30)])
    (segment,) = segment_files(tmp_path)
    base = int(segment.stem)
    damaged = written[20]
    flip_bits(segment, damaged.offset - base + 40, 0x01)
    early_read.start(config_for(tmp_path))
    wal, recovered = await recover_claimed(tmp_path)
    await wal.close()
    assert recovered == written[:20]
    _, again = await open_wal(tmp_path)  # the damaged tail was cut off for good
    assert again == written[:20]


async def test_a_directory_another_wal_holds_is_not_read_early(tmp_path: Path) -> None:
    await write(tmp_path, [batch(1, i) for i in range(3)])
    holder, _ = await open_wal(tmp_path)
    try:
        early_read.start(config_for(tmp_path))
        second = FileWAL(tmp_path)
        with pytest.raises(WALError, match="already open by another WAL instance"):
            await second.start()
    finally:
        await holder.close()


async def test_a_read_no_wal_takes_releases_its_lock(tmp_path: Path) -> None:
    written = await write(tmp_path, [batch(1, i) for i in range(3)])
    read = early_read.start(config_for(tmp_path, cache=1))
    assert read is not None
    early_read.abandon(read)
    wal, recovered = await open_wal(tmp_path)  # neither claimed nor locked any more
    await wal.close()
    assert recovered == written


async def test_only_a_file_wal_is_read_early(tmp_path: Path) -> None:
    config = dataclasses.replace(StorageConfig(), wal_url=BucketURL(0, "mem", "wal"))
    assert early_read.start(config) is None
    assert not os.listdir(tmp_path)


async def test_a_wal_appending_before_recovering_or_closed_at_once_drops_the_read(tmp_path: Path) -> None:
    """Only ``recover()`` uses the read: an append first finds the end by its own scan, and a WAL closed before
    recovering stops the read; either way the records are all there for the next start."""
    written = await write(tmp_path, [batch(1, i, 300) for i in range(20)])
    early_read.start(config_for(tmp_path, cache=1))
    wal = FileWAL(tmp_path)
    await wal.start()
    extra = await wal.append(batch(2, 0))
    await wal.close()
    assert extra.offset == written[-1].next_offset
    early_read.start(config_for(tmp_path, cache=1))
    wal = FileWAL(tmp_path)
    await wal.start()
    await wal.close()
    _, again = await open_wal(tmp_path)
    assert [r.batch for r in again] == [r.batch for r in written] + [batch(2, 0)]


async def test_a_directory_released_after_the_read_failed_to_lock_it_opens_normally(tmp_path: Path) -> None:
    """A restart racing the previous process's exit: the early read found the lock held, the process then exited."""
    written = await write(tmp_path, [batch(1, i) for i in range(3)])
    holder, _ = await open_wal(tmp_path)
    early_read.start(config_for(tmp_path))
    await holder.close()
    wal, recovered = await recover_claimed(tmp_path)
    await wal.close()
    assert recovered == written
