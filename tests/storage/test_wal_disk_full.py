"""A file WAL whose disk fills up (``storage.wal.disk_full``): appends wait unacknowledged instead of failing the
WAL, are written in order once there is room, and survive a restart; a trim frees the disk even when its
checkpoint's temporary file cannot be made, and deletes the live segment once everything written is covered.

The full disk is injected on top of real files: the segment writer's synced write (and, for the checkpoint, the
atomic replace) raises ENOSPC while :class:`FullDisk` says so, as a real full disk makes them fail.
"""

from __future__ import annotations

import asyncio
import errno
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from storage import durable
from storage.errors import WALError
from storage.wal import segments as wal_segments
from storage.wal.base import WALRecord
from storage.wal.file import FileWAL
from storage.wal.segments import CHECKPOINT_NAME
from testkit.waiting import eventually_async
from tests.storage.test_wal_file import batch, open_wal, segment_files

WAIT_S = 10.0


class FullDisk:
    """While ``full``, every write into a segment fails as a full disk fails it; counts the failures."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.full = False
        self.failed_writes = 0
        real = wal_segments.write_durably

        def write_durably(fd: int, parts: Sequence[bytes | memoryview], position: int) -> None:
            if self.full:
                self.failed_writes += 1
                # As a full disk leaves it: part of the group written before the kernel ran out of blocks.
                os.pwrite(fd, bytes(parts[0])[:7], position)
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            real(fd, parts, position)

        monkeypatch.setattr(wal_segments, "write_durably", write_durably)


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> Iterator[FullDisk]:
    yield FullDisk(monkeypatch)


def appended(wal: FileWAL, stream: int, count: int) -> list[asyncio.Task[WALRecord]]:
    return [asyncio.create_task(wal.append(batch(stream, i, 300))) for i in range(count)]


async def until_failed(disk: FullDisk, writes: int, what: str) -> None:
    await eventually_async(lambda: disk.failed_writes >= writes or None, timeout=WAIT_S, what=what)


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0.01)


async def test_appends_wait_on_a_full_disk_and_are_written_in_order_once_there_is_room(
    tmp_path: Path, disk: FullDisk
) -> None:
    wal, _ = await open_wal(tmp_path)
    told: list[int] = []
    wal.on_disk_full = lambda: told.append(1)
    first = await asyncio.gather(*appended(wal, 1, 5))
    disk.full = True
    waiting = appended(wal, 2, 20)
    await until_failed(disk, 2, "the write tried again on the full disk")
    await settle()
    assert not any(task.done() for task in waiting), "an append was settled while the disk was full"
    assert told == [1], "the engine is told once per episode, to upload what the WAL holds"
    assert wal.unwritable and wal.refusal() is None  # fjord_wal_unwritable is 1; new appends are taken and wait

    more = appended(wal, 3, 5)  # appends made during the episode queue behind the waiting ones
    disk.full = False
    records = await asyncio.wait_for(asyncio.gather(*waiting, *more), WAIT_S)
    assert not wal.unwritable and wal.unwritable_seconds > 0
    offsets = [r.offset for r in [*first, *records]]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    assert [r.batch for r in records] == [batch(2, i, 300) for i in range(20)] + [batch(3, i, 300) for i in range(5)]
    await wal.close()

    reopened, recovered = await open_wal(tmp_path)
    assert [r.batch for r in recovered] == [r.batch for r in [*first, *records]]
    await reopened.close()


async def test_a_trim_covering_everything_written_deletes_the_live_segment_on_a_full_disk(
    tmp_path: Path, disk: FullDisk
) -> None:
    """A disk smaller than one segment holds only the live one: the trim that uploads allow must delete it, and the
    waiting group starts the next segment where the written records end."""
    wal, _ = await open_wal(tmp_path)
    written = await asyncio.gather(*appended(wal, 1, 10))
    end = written[-1].next_offset
    disk.full = True
    waiting = appended(wal, 2, 3)
    await until_failed(disk, 1, "a write on the full disk")
    await settle()
    await wal.trim(end)
    assert segment_files(tmp_path) == [], "the live segment, all of it trimmed, was kept on a full disk"
    disk.full = False
    records = await asyncio.wait_for(asyncio.gather(*waiting), WAIT_S)
    assert records[0].offset == end
    assert [p.name for p in segment_files(tmp_path)] == [f"{end:020d}.wal"]
    await wal.close()

    reopened, recovered = await open_wal(tmp_path)
    assert [r.batch for r in recovered] == [batch(2, i, 300) for i in range(3)]
    await reopened.close()


async def test_the_trim_checkpoint_is_written_in_place_when_its_temporary_file_cannot_be_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wal, _ = await open_wal(tmp_path, segment_size=4096)
    records = await asyncio.gather(*appended(wal, 1, 30))
    await wal.trim(records[5].offset)  # the first trim makes the checkpoint file (the engine trims after uploads)
    checkpoint_before = (tmp_path / CHECKPOINT_NAME).stat().st_ino

    def no_room(path: Path, data: bytes, **_: Any) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(wal_segments, "write_atomically", no_room)
    trim_to = records[20].offset
    await wal.trim(trim_to)
    await wal.close()
    assert (tmp_path / CHECKPOINT_NAME).stat().st_ino == checkpoint_before  # the same file, written over

    reopened, recovered = await open_wal(tmp_path, segment_size=4096)
    assert [r.batch for r in recovered] == [r.batch for r in records[20:]]
    await reopened.close()


async def test_a_wal_closed_while_its_disk_is_full_fails_the_waiting_appends(tmp_path: Path, disk: FullDisk) -> None:
    wal, _ = await open_wal(tmp_path)
    disk.full = True
    waiting = appended(wal, 1, 3)
    await until_failed(disk, 1, "a write on the full disk")
    await asyncio.wait_for(wal.close(), WAIT_S)
    for task in waiting:
        with pytest.raises(WALError):
            await task


@pytest.mark.parametrize("error", [errno.EIO, errno.EROFS])
async def test_other_write_errors_still_fail_the_wal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: int
) -> None:
    """Only a full disk is waited out: after an I/O error the file's state is unknown, and nothing more may be
    acknowledged."""
    wal, _ = await open_wal(tmp_path)

    def broken(fd: int, parts: Sequence[bytes | memoryview], position: int) -> None:
        raise OSError(error, os.strerror(error))

    monkeypatch.setattr(wal_segments, "write_durably", broken)
    with pytest.raises(WALError, match=os.strerror(error)):
        await asyncio.wait_for(wal.append(batch(1, 0)), WAIT_S)
    with pytest.raises(WALError):
        await asyncio.wait_for(wal.append(batch(1, 1)), WAIT_S)
    await wal.close()


def test_overwrite_in_place_keeps_the_file_and_its_length(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint"
    path.write_bytes(b"a" * 24)
    inode = path.stat().st_ino
    durable.overwrite_in_place(path, b"b" * 24)
    assert path.read_bytes() == b"b" * 24 and path.stat().st_ino == inode


async def test_a_segment_rolled_onto_by_a_write_the_full_disk_refused_is_kept_track_of(
    tmp_path: Path, disk: FullDisk
) -> None:
    """The write that fails may be the first into a new segment: once written it is one of the WAL's segments
    (a trim deletes it), and a covering trim during the episode deletes it before the group rolls again."""
    wal, _ = await open_wal(tmp_path, segment_size=4096)
    first = await asyncio.gather(*appended(wal, 1, 12))  # 300-byte payloads: a few segments, the last one part full
    disk.full = True
    rolling = asyncio.create_task(wal.append(batch(2, 0, 3900)))  # does not fit the live segment: rolls first
    await until_failed(disk, 1, "the write into the new segment")
    await settle()
    await wal.trim(first[-1].next_offset)  # covers everything written: every segment goes, the new one too
    assert segment_files(tmp_path) == []
    disk.full = False
    record = await asyncio.wait_for(rolling, WAIT_S)
    assert record.offset == first[-1].next_offset
    more = await asyncio.gather(*appended(wal, 3, 30))  # rolls on past it
    await wal.trim(more[-1].offset)
    assert [s.base_offset for s in wal.segments] == [int(p.stem) for p in segment_files(tmp_path)]
    await wal.close()

    reopened, recovered = await open_wal(tmp_path, segment_size=4096)
    assert [r.batch for r in recovered] == [more[-1].batch]
    await reopened.close()


async def test_a_live_segment_trimmed_before_the_disk_filled_goes_when_a_write_finds_it_full(
    tmp_path: Path, disk: FullDisk
) -> None:
    """The upload and its trim may come before the write that finds the disk full (nothing more will be
    uploaded then): the flusher itself deletes the trimmed live segment before it waits for room."""
    wal, _ = await open_wal(tmp_path)
    written = await asyncio.gather(*appended(wal, 1, 10))
    end = written[-1].next_offset
    await wal.trim(end)
    assert [p.name for p in segment_files(tmp_path)] == [f"{0:020d}.wal"]  # the live segment stays on a roomy disk
    disk.full = True
    waiting = appended(wal, 2, 3)
    await until_failed(disk, 1, "a write on the full disk")
    await eventually_async(lambda: f"{0:020d}.wal" not in {p.name for p in segment_files(tmp_path)} or None,
                           timeout=WAIT_S, what="the trimmed live segment deleted")
    disk.full = False
    records = await asyncio.wait_for(asyncio.gather(*waiting), WAIT_S)
    assert records[0].offset == end
    await wal.close()
    reopened, recovered = await open_wal(tmp_path)
    assert [r.batch for r in recovered] == [batch(2, i, 300) for i in range(3)]
    await reopened.close()
