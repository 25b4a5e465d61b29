"""The local metadata log's group commit: appends made while a write runs go to disk together after it, each its
own batch, in the order they were made; a group whose write fails fails every append in it, and the log then
takes no more writes, unless the disk was full: that write is undone and the log goes on."""

from __future__ import annotations

import asyncio
import errno
import os
import uuid
from pathlib import Path

import pytest

from metadata import log as metadata_log
from metadata.cluster_records import TopicRecord
from metadata.log import LOG_DIR_NAME, LocalMetadataLog, MetadataLogError, MetadataLogFullError, read_metadata


def _topic(i: int) -> TopicRecord:
    return TopicRecord(name=f"t{i}", topic_id=str(uuid.UUID(int=i + 1)))


def _names(tmp_path: Path) -> list[str]:
    """The topic names in the log, in its order."""
    batches = read_metadata(tmp_path / LOG_DIR_NAME).batches
    return [r.name for b in batches for r in b.records if isinstance(r, TopicRecord)]


def _open(tmp_path: Path) -> LocalMetadataLog:
    log = LocalMetadataLog.open(tmp_path)
    log.recover()
    return log


async def test_concurrent_appends_are_written_in_call_order_with_fewer_fsyncs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = _open(tmp_path)
    await log.append([_topic(0)])  # offset 0
    fsyncs = 0
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        nonlocal fsyncs
        fsyncs += 1
        real_fsync(fd)

    monkeypatch.setattr("metadata.log.os.fsync", counting_fsync)
    sizes = [1 + i % 3 for i in range(60)]
    batches = [[_topic(1000 * i + j) for j in range(size)] for i, size in enumerate(sizes)]
    last_offsets = await asyncio.gather(*(log.append(batch) for batch in batches))

    expected, end = [], 0
    for size in sizes:
        end += size
        expected.append(end)
    assert last_offsets == expected  # consecutive offsets, in the order the appends were made
    assert 1 <= fsyncs < len(batches) // 2  # while the first write ran, the others queued behind it together
    log.close()

    recovered = read_metadata(tmp_path / LOG_DIR_NAME)
    assert [b.records for b in recovered.batches[1:]] == [tuple(batch) for batch in batches]
    assert [b.last_offset for b in recovered.batches[1:]] == expected

    reopened = _open(tmp_path)
    assert await reopened.append([_topic(99)]) == end + 1  # appends follow the recovered ones
    reopened.close()


async def test_a_failed_group_fails_every_append_in_it_and_stops_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = _open(tmp_path)
    assert await log.append([_topic(0)]) == 0

    def failing_fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr("metadata.log.os.fsync", failing_fsync)
    results = await asyncio.gather(*(log.append([_topic(i)]) for i in range(1, 11)), return_exceptions=True)
    assert all(isinstance(r, MetadataLogError) for r in results), results
    monkeypatch.undo()
    with pytest.raises(MetadataLogError, match="accepts no writes"):
        await log.append([_topic(11)])
    log.close()

    # Nothing acknowledged was lost, and nothing refused is replayed as acknowledged: a restart keeps the intact
    # batches (the failed group's bytes may have reached the file, as after any failed fsync).
    recovered = _open(tmp_path)
    assert await recovered.append([_topic(12)]) >= 1
    recovered.close()


async def test_an_append_cancelled_while_queued_is_not_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = _open(tmp_path)
    entered, release = asyncio.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()
    real_fsync = os.fsync

    def slow_fsync(fd: int) -> None:  # holds the first group's write until the test lets it go
        loop.call_soon_threadsafe(entered.set)
        asyncio.run_coroutine_threadsafe(release.wait(), loop).result(timeout=10)
        real_fsync(fd)

    monkeypatch.setattr("metadata.log.os.fsync", slow_fsync)
    first = asyncio.create_task(log.append([_topic(0)]))
    await asyncio.wait_for(entered.wait(), 10)  # the first group is being written
    queued = [asyncio.create_task(log.append([_topic(i)])) for i in (1, 2, 3)]
    await asyncio.sleep(0)  # all three queued behind it
    queued[1].cancel()
    monkeypatch.setattr("metadata.log.os.fsync", real_fsync)
    release.set()
    assert await first == 0
    assert [await queued[0], await queued[2]] == [1, 2]
    assert queued[1].cancelled()
    log.close()
    names = _names(tmp_path)
    assert names == ["t0", "t1", "t3"]  # the cancelled append took its records back: no gap, nothing unapplied


class _Unregistered(TopicRecord):
    """A record type no registry knows: encoding it fails (a programming error, not a disk one)."""


async def test_a_record_that_cannot_be_encoded_fails_its_own_append_alone(tmp_path: Path) -> None:
    log = _open(tmp_path)
    results = await asyncio.gather(
        log.append([_topic(0)]),
        log.append([_topic(1)]),
        log.append([_Unregistered(name="bad", topic_id=str(uuid.UUID(int=99)))]),
        log.append([_topic(2)]),
        return_exceptions=True,
    )
    assert list(results[:2]) == [0, 1] and results[3] == 2
    assert isinstance(results[2], ValueError) and "not a registered metadata record" in str(results[2])
    assert await log.append([_topic(3)]) == 3  # the log goes on: nothing failed on disk
    log.close()
    names = _names(tmp_path)
    assert names == ["t0", "t1", "t2", "t3"]


async def test_an_append_that_finds_the_disk_full_is_undone_and_the_log_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ENOSPC part way through a group's write: the file is cut back to where it ended, that group's appends fail
    with the retriable MetadataLogFullError, their offsets are given back, and once there is room the log takes
    writes again, with no gap and nothing of the refused group in it (Kafka would halt the process here)."""
    log = _open(tmp_path)
    assert await log.append([_topic(0)]) == 0
    real_append = metadata_log._append_frame

    def full_disk(fd: int, frame: bytes) -> None:
        real_append(fd, frame[: len(frame) // 2])  # as a real full disk: part of the group reached the file
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(metadata_log, "_append_frame", full_disk)
    results = await asyncio.gather(*(log.append([_topic(i)]) for i in range(1, 6)), return_exceptions=True)
    assert all(isinstance(r, MetadataLogFullError) for r in results), results
    assert "No space left on device" in str(results[0])
    assert log.next_offset == 1
    monkeypatch.undo()

    assert await log.append([_topic(6)]) == 1  # room again: the refused group's offsets are reused
    log.close()
    assert _names(tmp_path) == ["t0", "t6"]
    reopened = _open(tmp_path)  # and the file holds no torn tail to cut
    assert await reopened.append([_topic(7)]) == 2
    reopened.close()
