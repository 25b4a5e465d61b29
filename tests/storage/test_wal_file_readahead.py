"""File WAL recovery reading one step ahead while it scans the current one (issue 25): a record cut by a read's end,
or one whose body is large (``LARGE_BODY``), has its body read on its own, and torn tails, corrupt bytes and sealed
segments that end early are handled exactly as when every read started at the last whole record."""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import pytest

from storage.wal import recovery as wal_recovery
from storage.wal.base import WALRecord
from storage.wal.file import FileWAL
from testkit.waiting import eventually_async
from tests.storage.test_wal_file import batch, flip_bits, open_wal, segment_files, write

# Chunk sizes below, at and above a WAL header (24 bytes) and a record's headers (57 bytes).
CHUNKS = [13, 24, 57, 100, 333, 4096]
#: Bodies read on their own from this size: the shipped size (none of these records) and most of these records.
LARGE_BODIES = [wal_recovery.LARGE_BODY, 100]


async def small_records(path: Path) -> list[WALRecord]:
    rng = random.Random(7)
    return await write(path, [batch(i % 3, i, rng.choice([1, 20, 90, 150, 400])) for i in range(8)])


async def one_segment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int, large_body: int = wal_recovery.LARGE_BODY
) -> tuple[Path, list[WALRecord], Path, int, int]:
    """A WAL of :func:`small_records` in one segment, recovered ``chunk`` bytes at a time from here on (bodies of
    ``large_body`` bytes or more on their own): its directory, records, segment file, the segment's base offset and
    size."""
    monkeypatch.setattr(wal_recovery, "READ_CHUNK", chunk)
    monkeypatch.setattr(wal_recovery, "LARGE_BODY", large_body)
    original = tmp_path / "original"
    written = await small_records(original)
    (segment,) = segment_files(original)
    return original, written, segment, int(segment.stem), segment.stat().st_size


def cuts(size: int, chunk: int, written: list[WALRecord], base: int) -> list[int]:
    """Every byte around a chunk boundary or a record boundary, and a few others."""
    records = {size} | {r.offset - base for r in written}
    near = {m + d for m in records for d in (-1, 0, 1, 23, 24, 25)}
    near |= {m + d for m in range(0, size, chunk) for d in (-1, 0, 1)}
    near |= set(random.Random(chunk).sample(range(size), 10))
    return sorted(p for p in near if 0 <= p <= size)


@pytest.mark.parametrize("large_body", LARGE_BODIES)
@pytest.mark.parametrize("chunk", CHUNKS)
async def test_a_tail_torn_anywhere_keeps_exactly_the_whole_records_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int, large_body: int
) -> None:
    original, written, segment, base, size = await one_segment(tmp_path, monkeypatch, chunk, large_body)
    for cut in cuts(size, chunk, written, base):
        trial = tmp_path / f"cut-{cut}"
        shutil.copytree(original, trial)
        os.truncate(trial / segment.name, cut)
        wal, recovered = await open_wal(trial)
        await wal.close()
        assert recovered == [r for r in written if r.next_offset - base <= cut], f"cut at byte {cut}"
        # The tail was cut off: a second recovery finds the same records.
        wal, again = await open_wal(trial)
        await wal.close()
        assert again == recovered, f"cut at byte {cut}"
        shutil.rmtree(trial)


@pytest.mark.parametrize("large_body", LARGE_BODIES)
@pytest.mark.parametrize("chunk", CHUNKS)
async def test_a_flipped_byte_anywhere_keeps_exactly_the_records_before_the_damaged_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int, large_body: int
) -> None:
    original, written, segment, base, size = await one_segment(tmp_path, monkeypatch, chunk, large_body)
    for position in cuts(size - 1, chunk, written, base):
        trial = tmp_path / f"flip-{position}"
        shutil.copytree(original, trial)
        flip_bits(trial / segment.name, position, 0x10)
        wal, recovered = await open_wal(trial)
        await wal.close()
        damaged = next(r for r in written if r.offset - base <= position < r.next_offset - base)
        assert recovered == [r for r in written if r.next_offset <= damaged.offset], f"flip at byte {position}"
        shutil.rmtree(trial)


@pytest.mark.parametrize("chunk", [13, 100, 1000])
async def test_a_sealed_segment_ending_inside_a_record_cut_by_a_chunk_sets_later_segments_aside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    monkeypatch.setattr(wal_recovery, "READ_CHUNK", chunk)
    written = await write(tmp_path, [batch(1, i, 700) for i in range(20)], segment_size=4096)
    files = segment_files(tmp_path)
    assert len(files) >= 3
    victim = files[1]
    base = int(victim.stem)
    second = next(r for r in written if r.offset > base)  # the victim's second record
    os.truncate(victim, second.offset - base + 300)  # inside it: its start is in one chunk, its end would be later
    wal, recovered = await open_wal(tmp_path, segment_size=4096)
    await wal.close()
    assert recovered == [r for r in written if r.next_offset <= second.offset]
    assert len(segment_files(tmp_path, "*.discarded")) == len(files) - 2


@pytest.mark.parametrize("large_body", LARGE_BODIES)
async def test_records_much_bigger_than_a_chunk_come_back_whole_across_segments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, large_body: int
) -> None:
    monkeypatch.setattr(wal_recovery, "READ_CHUNK", 100)
    monkeypatch.setattr(wal_recovery, "LARGE_BODY", large_body)
    rng = random.Random(3)
    written = await write(
        tmp_path, [batch(i % 2, i, rng.choice([5, 950, 3000])) for i in range(40)], segment_size=16 * 1024
    )
    assert len(segment_files(tmp_path)) > 2
    wal, recovered = await open_wal(tmp_path, segment_size=16 * 1024)
    await wal.close()
    assert recovered == written


def open_fds_of(path: Path) -> int:
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == str(path):
                count += 1
        except OSError:
            continue  # closed meanwhile (the listing's own fd)
    return count


async def test_stopping_recovery_early_closes_the_segment_once_its_read_ahead_is_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader that stops after the first record leaves a read ahead running: the segment's file is closed once
    that read ends (never under it), and the WAL still finds its end for the next append."""
    monkeypatch.setattr(wal_recovery, "READ_CHUNK", 512)
    written = await small_records(tmp_path)
    (segment,) = segment_files(tmp_path)
    wal = FileWAL(tmp_path)
    await wal.start()
    records = wal.recover()
    assert await anext(records) == written[0]
    await records.aclose()  # type: ignore[attr-defined]
    await eventually_async(lambda: open_fds_of(segment.resolve()) == 0, timeout=10, what="the segment closed")
    extra = await wal.append(batch(9, 0))
    await wal.close()
    assert extra.offset == written[-1].next_offset
    _, again = await open_wal(tmp_path)
    assert [r.batch for r in again] == [r.batch for r in written] + [batch(9, 0)]
