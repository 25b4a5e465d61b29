"""The file-mode WAL: framing, group commit, ordered acks, torn-tail recovery, trim, backpressure (issue 2 item 3)."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import logging
import os
import random
import shutil
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.errors import WALError
from storage.stream_record_batch import StreamRecordBatch
from storage.wal import inline_writes
from storage.wal import record as walrecord
from storage.wal import recovery as wal_recovery
from storage.wal.base import WALRecord
from storage.wal.file import FileWAL
from storage.wal.record import RecordScanner, StopReason
from storage.wal.segments import CHECKPOINT_NAME, Segment


def batch(stream: int, offset: int, size: int = 100) -> StreamRecordBatch:
    seed = hashlib.sha256(f"{stream}:{offset}".encode()).digest()
    payload = (seed * (size // len(seed) + 1))[:size]
    return StreamRecordBatch(stream, 3, offset, 2, payload)


async def open_wal(
    path: Path, *, segment_size: int = 64 << 20, capacity: int = 1 << 30
) -> tuple[FileWAL, list[WALRecord]]:
    wal = FileWAL(path, segment_size=segment_size, capacity=capacity)
    await wal.start()
    return wal, [rec async for rec in wal.recover()]


async def write(path: Path, batches: list[StreamRecordBatch], **kwargs: int) -> list[WALRecord]:
    wal, _ = await open_wal(path, **kwargs)
    try:
        return list(await asyncio.gather(*(wal.append(b) for b in batches)))
    finally:
        await wal.close()


def segment_files(path: Path, pattern: str = "*.wal") -> list[Path]:
    return sorted(path.glob(pattern))


def flip_bits(path: Path, position: int, mask: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)[0]
        f.seek(position)
        f.write(bytes([byte ^ mask]))


# ----------------------------------------------------------------------------------------------- record framing


def test_scanner_reads_back_encoded_records_and_says_where_each_kind_of_damage_stops_it() -> None:
    batches = [batch(s, s * 10, 50 + s) for s in range(5)]
    buf = walrecord.encode_records(batches, 1000)
    records, stop = walrecord.scan(buf, 1000)
    assert [r.batch for r in records] == batches
    assert records[0].offset == 1000 and records[-1].next_offset == 1000 + len(buf)
    assert stop.reason is StopReason.END and stop.position == len(buf)
    assert bytes(buf[:80]) == bytes(walrecord.encode_records(batches[:1], 1000))[:80]

    second = records[1].offset - 1000
    cases = {
        StopReason.TRUNCATED_HEADER: bytes(buf[: second + 10]),
        StopReason.TRUNCATED_BODY: bytes(buf[: second + 30]),
        StopReason.BAD_MAGIC: bytes(buf[:second]) + b"\0" * (len(buf) - second),
    }
    for reason, data in cases.items():
        got, stop = walrecord.scan(data, 1000)
        assert [r.batch for r in got] == batches[:1], reason
        assert stop.reason is reason and stop.position == second and stop.offset == 1000 + second
    flipped_header = bytearray(buf)
    flipped_header[second + 5] ^= 0x01
    assert walrecord.scan(flipped_header, 1000)[1].reason is StopReason.BAD_HEADER_CRC
    flipped_body = bytearray(buf)
    flipped_body[second + 60] ^= 0x80
    assert walrecord.scan(flipped_body, 1000)[1].reason is StopReason.BAD_BODY_CRC
    # Intact bytes placed at the wrong logical position are not replayed.
    moved, stop = walrecord.scan(buf, 2000)
    assert moved == [] and stop.reason is StopReason.BAD_POSITION
    assert "WAL offset 2000" in stop.describe("seg")


batches_strategy = st.lists(
    st.builds(
        StreamRecordBatch,
        stream_id=st.integers(0, 2**63 - 1),
        epoch=st.integers(0, 2**63 - 1),
        base_offset=st.integers(0, 2**62),
        count=st.integers(1, 2**31 - 1),
        payload=st.binary(max_size=600),
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=60, deadline=None)
@given(batches=batches_strategy, base=st.integers(0, 2**50), data=st.data())
def test_any_prefix_of_encoded_records_scans_to_exactly_the_whole_records_in_it(
    batches: list[StreamRecordBatch], base: int, data: st.DataObject
) -> None:
    buf = bytes(walrecord.encode_records(batches, base))
    records, stop = walrecord.scan(buf, base)
    assert [r.batch for r in records] == batches and stop.reason is StopReason.END
    assert records[0].offset == base and records[-1].next_offset == base + len(buf)
    cut = data.draw(st.integers(0, len(buf)), label="cut")
    prefix, stop = walrecord.scan(buf[:cut], base)
    assert prefix == [r for r in records if r.next_offset - base <= cut]
    assert stop.position == (prefix[-1].next_offset - base if prefix else 0)


def test_scanner_skips_records_below_the_trim_point_without_decoding_them() -> None:
    batches = [batch(1, i) for i in range(4)]
    buf = walrecord.encode_records(batches, 0)
    first_two = walrecord.record_size(batches[0]) * 2
    scanner = RecordScanner(buf, 0, skip_below=first_two)
    assert [r.batch for r in scanner] == batches[2:]
    assert scanner.stop is not None and scanner.stop.reason is StopReason.END


# ----------------------------------------------------------------------------------------------- append/recover


async def test_records_come_back_in_append_order_with_offsets_continuous_across_segments(tmp_path: Path) -> None:
    rng = random.Random(1)
    batches = [batch(i % 7, i, rng.randrange(1, 3000)) for i in range(300)]
    written = await write(tmp_path, batches, segment_size=16 * 1024)
    assert len(segment_files(tmp_path)) > 5
    wal, recovered = await open_wal(tmp_path, segment_size=16 * 1024)
    await wal.close()
    assert [r.batch for r in recovered] == batches
    assert recovered == written
    assert recovered[0].offset == 0
    for prev, cur in itertools.pairwise(recovered):
        assert cur.offset == prev.next_offset
    # Each segment file is named by the logical offset of its first record.
    starts = {r.offset for r in recovered}
    assert all(int(p.stem) in starts for p in segment_files(tmp_path))


async def test_concurrent_appends_share_one_write_and_are_acknowledged_in_append_order(tmp_path: Path) -> None:
    wal, _ = await open_wal(tmp_path)
    acked: list[int] = []

    async def one(i: int) -> None:
        rec = await wal.append(batch(i, i, 500))
        acked.append(rec.offset)

    await asyncio.gather(*(one(i) for i in range(200)))
    groups_for_burst = wal.stats.groups
    for i in range(5):  # one at a time: each is its own group
        await wal.append(batch(0, 1000 + i))
    await wal.close()
    assert acked == sorted(acked) and len(set(acked)) == 200
    assert groups_for_burst <= 5, f"200 concurrent appends took {groups_for_burst} write+fsync groups"
    assert wal.stats.groups == groups_for_burst + 5


async def test_writes_begun_returns_once_the_writer_holds_the_append_before_it_is_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(inline_writes, "INLINE_GROUP_BYTES", 0)  # every group on the writer thread
    wal, _ = await open_wal(tmp_path)
    await wal.writes_begun()  # nothing appended: nothing to wait for
    write_group = wal._writer.write_group
    release = threading.Event()

    def held(parts: Sequence[bytes], offset: int) -> Segment | None:
        release.wait(30)  # the writer thread has the group and sits on it until the test lets it write
        return write_group(parts, offset)

    wal._writer.write_group = held  # type: ignore[method-assign]
    appended = asyncio.ensure_future(wal.append(batch(1, 0)))
    await asyncio.sleep(0)  # the append reaches the WAL
    await asyncio.wait_for(wal.writes_begun(), 30)
    assert not appended.done()  # taken up, not durable
    release.set()
    record = await appended
    await wal.writes_begun()  # durable: at once
    await wal.close()
    _, recovered = await open_wal(tmp_path)
    assert recovered == [record]


async def test_writes_begun_does_not_wait_on_a_failed_wal(tmp_path: Path) -> None:
    wal, _ = await open_wal(tmp_path)
    (tmp_path / "00000000000000000000.wal").mkdir()  # the first group's segment cannot be created
    appended = asyncio.ensure_future(wal.append(batch(1, 0)))
    await asyncio.sleep(0)
    await asyncio.wait_for(wal.writes_begun(), 30)
    with pytest.raises(WALError):
        await appended
    await asyncio.wait_for(wal.writes_begun(), 30)
    await wal.close()


async def test_appends_made_before_recovery_wait_for_it_and_keep_their_call_order(tmp_path: Path) -> None:
    first = await write(tmp_path, [batch(1, i) for i in range(10)])
    wal = FileWAL(tmp_path)
    await wal.start()
    later = list(await asyncio.gather(*(wal.append(batch(2, i, 10 + 50 * (i % 3))) for i in range(20))))
    await wal.close()
    assert later[0].offset == first[-1].next_offset
    assert [r.batch for r in later] == [batch(2, i, 10 + 50 * (i % 3)) for i in range(20)]
    assert all(a.next_offset == b.offset for a, b in itertools.pairwise(later))
    _, recovered = await open_wal(tmp_path)
    assert recovered == first + later


async def test_a_second_wal_on_the_same_directory_is_refused(tmp_path: Path) -> None:
    wal, _ = await open_wal(tmp_path)
    other = FileWAL(tmp_path)
    with pytest.raises(WALError, match=str(tmp_path)):
        await other.start()
    await wal.close()
    again, _ = await open_wal(tmp_path)  # the lock is released on close
    await again.close()


async def test_a_failed_segment_write_fails_the_appends_with_an_error_naming_the_segment(tmp_path: Path) -> None:
    wal, _ = await open_wal(tmp_path)
    blocker = tmp_path / "00000000000000000000.wal"
    blocker.mkdir()  # the segment the first group needs cannot be created
    with pytest.raises(WALError, match=str(blocker)):
        await wal.append(batch(1, 0))
    with pytest.raises(WALError, match=str(blocker)):  # nothing more is accepted after a failed write
        await wal.append(batch(1, 1))
    await wal.close()


async def test_append_after_close_fails_clearly(tmp_path: Path) -> None:
    wal, _ = await open_wal(tmp_path)
    await wal.close()
    with pytest.raises(WALError, match="closed"):
        await wal.append(batch(1, 0))


# ----------------------------------------------------------------------------------------------- torn tails


async def test_recovery_after_truncation_anywhere_returns_exactly_the_intact_prefix(tmp_path: Path) -> None:
    rng = random.Random(7)
    batches = [batch(i % 3, i, rng.randrange(1, 400)) for i in range(40)]
    original = tmp_path / "original"
    written = await write(original, batches)
    (segment,) = segment_files(original)
    size = segment.stat().st_size
    boundaries = [r.next_offset for r in written]
    cuts = {0, 1, 23, 24, 25, size - 1, *(b + d for b in boundaries[:5] for d in (-1, 0, 1))}
    cuts |= {rng.randrange(size) for _ in range(25)}
    for cut in sorted(c for c in cuts if 0 <= c < size):
        trial = tmp_path / f"cut-{cut}"
        shutil.copytree(original, trial)
        os.truncate(trial / segment.name, cut)
        wal, recovered = await open_wal(trial)
        intact = [r for r in written if r.next_offset <= cut]
        assert recovered == intact, f"cut at byte {cut}"
        # New appends follow the intact prefix directly, and survive the next restart.
        extra = await wal.append(batch(9, cut))
        await wal.close()
        assert extra.offset == (intact[-1].next_offset if intact else 0)
        _, again = await open_wal(trial)
        assert [r.batch for r in again] == [r.batch for r in intact] + [batch(9, cut)]
        shutil.rmtree(trial)


async def test_recovery_reads_in_chunks_records_that_straddle_them_or_outgrow_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Recovery reads a segment a chunk at a time, each read starting where the last whole record ended: a record
    cut by a chunk's end, or bigger than a chunk, comes back whole, and a tail torn inside such a record is cut."""
    monkeypatch.setattr(wal_recovery, "READ_CHUNK", 1000)
    rng = random.Random(5)
    batches = [batch(i % 4, i, rng.choice([10, 300, 999, 1000, 2500, 7000])) for i in range(120)]
    original = tmp_path / "original"
    written = await write(original, batches, segment_size=64 * 1024)
    assert len(segment_files(original)) > 2
    wal, recovered = await open_wal(original, segment_size=64 * 1024)
    await wal.close()
    assert recovered == written
    big = next(r for r in reversed(written) if r.batch.size == 7000)
    last = segment_files(original)[-1]
    base = int(last.stem)
    assert big.offset >= base, "the last segment holds a record bigger than a chunk"
    os.truncate(last, big.offset - base + 5000)  # torn inside it, past the first chunk of it
    wal, recovered = await open_wal(original, segment_size=64 * 1024)
    await wal.close()
    assert recovered == [r for r in written if r.next_offset <= big.offset]


async def test_recovery_stops_at_a_flipped_byte_without_losing_earlier_records(tmp_path: Path) -> None:
    rng = random.Random(11)
    batches = [batch(i % 4, i, rng.randrange(1, 300)) for i in range(30)]
    original = tmp_path / "original"
    written = await write(original, batches)
    (segment,) = segment_files(original)
    size = segment.stat().st_size
    for position in sorted({rng.randrange(size) for _ in range(30)} | {0, 20, 23, size - 1}):
        trial = tmp_path / f"flip-{position}"
        shutil.copytree(original, trial)
        flip_bits(trial / segment.name, position, 1 << rng.randrange(8))
        _, recovered = await open_wal(trial)
        damaged = next(r for r in written if r.offset <= position < r.next_offset)
        assert recovered == [r for r in written if r.next_offset <= damaged.offset], f"flip at byte {position}"
        shutil.rmtree(trial)


async def test_corruption_in_an_older_segment_keeps_its_prefix_and_sets_later_segments_aside(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    batches = [batch(1, i, 900) for i in range(30)]
    written = await write(tmp_path, batches, segment_size=4096)
    files = segment_files(tmp_path)
    assert len(files) >= 4
    victim = files[1]
    flip_bits(victim, 40, 0xFF)
    caplog.set_level(logging.ERROR)
    wal, recovered = await open_wal(tmp_path, segment_size=4096)
    first_bad = int(victim.stem)
    assert recovered == [r for r in written if r.next_offset <= first_bad]
    assert str(victim) in caplog.text
    assert len(segment_files(tmp_path, "*.discarded")) == len(files) - 2
    extra = await wal.append(batch(2, 0))
    await wal.close()
    assert extra.offset == first_bad
    _, again = await open_wal(tmp_path, segment_size=4096)
    assert [r.batch for r in again] == [r.batch for r in recovered] + [batch(2, 0)]


async def test_a_missing_segment_ends_recovery_at_the_gap_and_names_the_segment(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    written = await write(tmp_path, [batch(1, i, 900) for i in range(20)], segment_size=4096)
    files = segment_files(tmp_path)
    files[1].unlink()
    caplog.set_level(logging.ERROR)
    wal, recovered = await open_wal(tmp_path, segment_size=4096)
    await wal.close()
    assert recovered == [r for r in written if r.next_offset <= int(files[1].stem)]
    assert str(files[2]) in caplog.text


# ----------------------------------------------------------------------------------------------- trim, reset


async def test_trim_is_persisted_deletes_whole_segments_and_survives_restart(tmp_path: Path) -> None:
    wal, _ = await open_wal(tmp_path, segment_size=4096)
    written = [await wal.append(batch(1, i, 700)) for i in range(40)]
    before = segment_files(tmp_path)
    used = wal.used_bytes
    cut = written[25].offset
    await wal.trim(cut)
    after = segment_files(tmp_path)
    assert len(after) < len(before)
    assert all(int(p.stem) <= cut for p in after[:1])
    assert wal.used_bytes == used - cut
    with pytest.raises(WALError, match="durable"):
        await wal.trim(written[-1].next_offset + 1)
    await wal.trim(written[3].offset)  # going backwards is a no-op
    await wal.close()

    wal, recovered = await open_wal(tmp_path, segment_size=4096)
    assert recovered == written[25:]
    assert wal.used_bytes == written[-1].next_offset - cut
    nxt = await wal.append(batch(2, 0))
    assert nxt.offset == written[-1].next_offset
    await wal.close()
    assert (tmp_path / CHECKPOINT_NAME).exists()


async def test_trimming_everything_then_restarting_keeps_offsets_moving_forward(tmp_path: Path) -> None:
    wal, _ = await open_wal(tmp_path, segment_size=2048)
    written = [await wal.append(batch(1, i, 500)) for i in range(12)]
    await wal.trim(written[-1].next_offset)
    assert wal.used_bytes == 0
    await wal.close()
    wal, recovered = await open_wal(tmp_path, segment_size=2048)
    assert recovered == []
    rec = await wal.append(batch(1, 99))
    await wal.close()
    assert rec.offset == written[-1].next_offset


async def test_reset_discards_everything_and_later_offsets_do_not_reuse_old_ones(tmp_path: Path) -> None:
    wal, _ = await open_wal(tmp_path, segment_size=4096)
    written = [await wal.append(batch(1, i, 800)) for i in range(12)]
    await wal.reset()
    assert segment_files(tmp_path) == [] and wal.used_bytes == 0
    rec = await wal.append(batch(2, 0))
    await wal.close()
    assert rec.offset == written[-1].next_offset
    wal, recovered = await open_wal(tmp_path, segment_size=4096)
    await wal.close()
    assert recovered == [rec]


async def test_a_corrupt_trim_checkpoint_replays_from_the_oldest_segment(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    wal, _ = await open_wal(tmp_path)
    written = [await wal.append(batch(1, i)) for i in range(5)]
    await wal.trim(written[2].offset)
    await wal.close()
    (tmp_path / CHECKPOINT_NAME).write_bytes(b"garbage")
    caplog.set_level(logging.ERROR)
    wal, recovered = await open_wal(tmp_path)
    await wal.close()
    assert recovered == written
    assert CHECKPOINT_NAME in caplog.text


async def test_recycled_segments_hold_stale_bytes_that_recovery_never_replays(tmp_path: Path) -> None:
    wal, _ = await open_wal(tmp_path, segment_size=8192)
    old = [await wal.append(batch(1, i, 1500)) for i in range(40)]
    await wal.trim(old[-1].next_offset)  # everything: trimmed segments become spares, stale records and all
    assert wal.stats.segments_recycled > 0
    new = [await wal.append(batch(2, i, 700)) for i in range(9)]
    assert wal.stats.segments_preallocated > 0
    await wal.close()
    # The newest segment is a recycled file: past the new records it still holds old, intact-looking records.
    newest = segment_files(tmp_path)[-1]
    assert newest.stat().st_size >= 4096
    wal, recovered = await open_wal(tmp_path, segment_size=8192)
    assert recovered == new
    more = await wal.append(batch(3, 0))
    await wal.close()
    assert more.offset == new[-1].next_offset
    _, again = await open_wal(tmp_path, segment_size=8192)
    assert again == [*new, more]


async def test_a_clean_stop_on_a_recycled_segment_is_not_reported_as_a_torn_tail(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A stopping node uploads and trims everything; past its last record the recycled segment still holds the old
    records' bytes. That is where the log ends, not damage: a WARNING there at every restart would cry wolf."""
    wal, _ = await open_wal(tmp_path, segment_size=8192)
    old = [await wal.append(batch(1, i, 1500)) for i in range(40)]
    await wal.trim(old[-1].next_offset)
    new = [await wal.append(batch(2, i, 700)) for i in range(3)]
    await wal.trim(new[-1].next_offset)  # all uploaded, as a clean stop leaves it
    await wal.close()
    caplog.set_level(logging.DEBUG, logger=wal_recovery.__name__)
    wal, recovered = await open_wal(tmp_path, segment_size=8192)
    await wal.close()
    assert recovered == []
    ends = [r for r in caplog.records if "at byte" in r.getMessage()]
    assert ends and "bad record magic" in ends[0].getMessage(), caplog.text  # the old bytes, mid-record
    assert all(r.levelno < logging.WARNING for r in caplog.records), caplog.text


# ----------------------------------------------------------------------------------------------- backpressure


async def test_a_full_wal_makes_appends_wait_until_trim_frees_space(tmp_path: Path) -> None:
    size = walrecord.record_size(batch(1, 0, 1000))
    wal, _ = await open_wal(tmp_path, capacity=3 * size)
    written = [await wal.append(batch(1, i, 1000)) for i in range(3)]
    blocked = asyncio.create_task(wal.append(batch(1, 3, 1000)))
    behind = asyncio.create_task(wal.append(batch(1, 4, 10)))  # small, but must not overtake
    done, _ = await asyncio.wait({blocked, behind}, timeout=0.3)
    assert not done, "appends beyond capacity must wait, not fail or proceed"
    assert wal.used_bytes == 3 * size
    await wal.trim(written[2].offset)  # frees two records: the big waiter fits first, then the small one
    fourth = await asyncio.wait_for(blocked, 5)
    fifth = await asyncio.wait_for(behind, 5)
    assert fourth.offset == written[-1].next_offset and fifth.offset == fourth.next_offset
    await wal.close()


async def test_paced_preallocation_rolls_onto_zero_filled_files_and_recovers_them(tmp_path: Path) -> None:
    """With nothing to recycle (no trims), the writer zero-fills the next segment while the WAL idles between
    group commits, so later rolls land on preallocated files; a half-filled spare never outlives the WAL, and
    recovery reads exactly the records, not the zeros after them."""
    segment = 256 * 1024
    wal, _ = await open_wal(tmp_path, segment_size=segment)
    written = []
    for i in range(60):  # a modest rate: the WAL idles between appends, which is when the filler takes its steps
        written.append(await wal.append(batch(1, i, 20_000)))
        await asyncio.sleep(0.005)
    assert wal.stats.segments_created >= 4
    assert wal.stats.segments_preallocated >= wal.stats.segments_created - 2
    await wal.close()
    assert not segment_files(tmp_path, "spare-*.tmp")
    wal, recovered = await open_wal(tmp_path, segment_size=segment)
    more = await wal.append(batch(2, 0))
    await wal.close()
    assert recovered == written
    assert more.offset == written[-1].next_offset


async def test_lone_small_appends_do_not_each_queue_behind_a_zero_fill_step(tmp_path: Path) -> None:
    """A share consumer's acknowledgements are lone small appends a round trip apart, so the WAL idles between
    them. The paced zero-fill steps in only once enough bytes were written to owe it a step of its minimum size,
    not in every gap (where the next append would wait for 128 KiB of zeros to be synced), and the spare is still
    ready when the segment rolls."""
    segment = 256 * 1024
    wal, _ = await open_wal(tmp_path, segment_size=segment)
    for i in range(150):  # 300 KB: one roll
        await wal.append(batch(1, i, 2000))
        await asyncio.sleep(0.003)  # longer than the idle spell after which the filler may step in
    assert wal.stats.segments_created == 2
    assert wal.stats.segments_preallocated == 1
    assert wal.stats.fill_steps <= 3
    await wal.close()


async def test_trimmed_segments_are_kept_for_reuse_while_the_capacity_has_room(tmp_path: Path) -> None:
    wal, _ = await open_wal(tmp_path, segment_size=8192, capacity=1 << 20)
    old = [await wal.append(batch(1, i, 1500)) for i in range(60)]
    await wal.trim(old[-1].next_offset)
    recycled = wal.stats.segments_recycled
    assert recycled > 4  # more than the fixed minimum: the next segments all roll onto recycled files
    assert len(segment_files(tmp_path, "*.wal-spare")) >= recycled
    created, preallocated = wal.stats.segments_created, wal.stats.segments_preallocated
    new = [await wal.append(batch(2, i, 1500)) for i in range(30)]
    assert wal.stats.segments_created - created >= 4
    assert wal.stats.segments_preallocated - preallocated == wal.stats.segments_created - created
    await wal.close()
    _, recovered = await open_wal(tmp_path, segment_size=8192, capacity=1 << 20)
    assert recovered == new


async def test_a_small_capacity_bounds_the_segments_kept_for_reuse(tmp_path: Path) -> None:
    wal, _ = await open_wal(tmp_path, segment_size=8192, capacity=5 * 8192)
    for round_ in range(3):
        written = [await wal.append(batch(round_, i, 1500)) for i in range(20)]
        await wal.trim(written[-1].next_offset)
    await wal.close()
    assert len(segment_files(tmp_path, "*.wal-spare")) <= 5


async def test_spares_kept_for_reuse_survive_a_restart(tmp_path: Path) -> None:
    wal, _ = await open_wal(tmp_path, segment_size=8192, capacity=1 << 20)
    old = [await wal.append(batch(1, i, 1500)) for i in range(60)]
    await wal.trim(old[-1].next_offset)
    await wal.close()
    spares = len(segment_files(tmp_path, "*.wal-spare"))
    assert spares > 4
    wal, recovered = await open_wal(tmp_path, segment_size=8192, capacity=1 << 20)
    assert recovered == []
    new = [await wal.append(batch(2, i, 1500)) for i in range(40)]
    assert wal.stats.segments_created > 4
    assert wal.stats.segments_preallocated == wal.stats.segments_created
    await wal.close()
    _, again = await open_wal(tmp_path, segment_size=8192, capacity=1 << 20)
    assert again == new
