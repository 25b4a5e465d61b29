"""Raft persistence on a real disk: what survives a restart, and how recovery treats torn or corrupt files."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from raft.effects import PersistQuorumState, QuorumState, ResetLog, TrimLogPrefix
from raft.log import EntryKind, LogEntry, SnapshotId
from raft.storage import QUORUM_STATE_FILE, RaftStorage, RaftStorageError, encode_entry


def entries(start: int, count: int, epoch: int = 1) -> list[LogEntry]:
    return [LogEntry(o, epoch, f"entry-{o}".encode() * (1 + o % 3)) for o in range(start, start + count)]


def all_entries(storage_dir: Path, **kwargs: int) -> tuple[RaftStorage, list[LogEntry]]:
    storage = RaftStorage(storage_dir, **kwargs)
    log = storage.recover().log
    return storage, [log.entry(o) for o in range(log.start_offset, log.end_offset)]


def segment_files(storage_dir: Path) -> list[Path]:
    return sorted((storage_dir / "log").glob("*.log"))


def test_everything_flushed_survives_a_restart(tmp_path: Path) -> None:
    storage = RaftStorage(tmp_path)
    recovered = storage.recover()
    assert recovered.quorum_state == QuorumState() and recovered.log.end_offset == 0
    written = [*entries(0, 5, epoch=1), *entries(5, 3, epoch=2), LogEntry(8, 2, b"", EntryKind.LEADER_CHANGE)]
    storage.append(written)
    storage.apply(PersistQuorumState(QuorumState(2, 3, 3)))
    assert storage.flush() == 9
    storage.close()

    again = RaftStorage(tmp_path).recover()
    assert again.quorum_state == QuorumState(2, 3, 3)
    assert [again.log.entry(o) for o in range(9)] == written
    assert again.log.end_offset_for_epoch(1) == (1, 5)


def test_torn_tail_is_cut_and_everything_before_it_kept(tmp_path: Path) -> None:
    storage = RaftStorage(tmp_path)
    storage.recover()
    storage.append(entries(0, 6))
    storage.flush()
    storage.close()
    segment = segment_files(tmp_path)[-1]
    intact_size = segment.stat().st_size
    torn = encode_entry(LogEntry(6, 1, b"never fully written"))
    with open(segment, "ab") as f:
        f.write(torn[: len(torn) // 2])

    storage, recovered = all_entries(tmp_path)
    assert recovered == entries(0, 6)
    assert segment.stat().st_size == intact_size  # the torn bytes are gone from the file
    # The log continues cleanly after the repair, and a second restart sees the new entry.
    storage.append([LogEntry(6, 1, b"rewritten")])
    storage.close()
    _, recovered = all_entries(tmp_path)
    assert recovered[-1] == LogEntry(6, 1, b"rewritten") and len(recovered) == 7


def test_corrupt_entry_ends_recovery_there(tmp_path: Path) -> None:
    storage = RaftStorage(tmp_path)
    storage.recover()
    storage.append(entries(0, 4))
    storage.close()
    segment = segment_files(tmp_path)[-1]
    raw = bytearray(segment.read_bytes())
    third = len(encode_entry(entries(0, 1)[0])) + len(encode_entry(entries(1, 1)[0]))
    raw[third + 25] ^= 0xFF  # a data byte of the third entry
    segment.write_bytes(bytes(raw))

    _, recovered = all_entries(tmp_path)
    assert recovered == entries(0, 2)


def test_segments_roll_and_truncation_crosses_them(tmp_path: Path) -> None:
    storage = RaftStorage(tmp_path, segment_bytes=100)
    storage.recover()
    storage.append(entries(0, 30))
    storage.flush()
    assert len(segment_files(tmp_path)) > 3
    storage.truncate(7)
    storage.append([LogEntry(7, 2, b"new-7"), LogEntry(8, 2, b"new-8")])
    storage.close()

    _, recovered = all_entries(tmp_path, segment_bytes=100)
    assert recovered == [*entries(0, 7), LogEntry(7, 2, b"new-7"), LogEntry(8, 2, b"new-8")]


def test_snapshot_bounds_the_log(tmp_path: Path) -> None:
    storage = RaftStorage(tmp_path, segment_bytes=100)
    storage.recover()
    storage.append(entries(0, 30))
    storage.flush()
    snapshot = SnapshotId(20, 1)
    storage.write_snapshot(snapshot, b"image-at-20")
    storage.apply(TrimLogPrefix(snapshot))
    storage.close()
    # Whole segments below the snapshot are gone from the disk.
    assert all(int(p.stem) <= 20 for p in segment_files(tmp_path)[:1])

    again = RaftStorage(tmp_path, segment_bytes=100).recover()
    assert again.snapshot_data == b"image-at-20"
    assert again.log.snapshot_id == snapshot and again.log.start_offset == 20
    assert [again.log.entry(o) for o in range(20, 30)] == entries(20, 10)


def test_installed_snapshot_replaces_the_log(tmp_path: Path) -> None:
    storage = RaftStorage(tmp_path)
    storage.recover()
    storage.append(entries(0, 5))
    snapshot = SnapshotId(40, 3)
    storage.write_snapshot(snapshot, b"fetched")
    storage.apply(ResetLog(snapshot))
    storage.append([LogEntry(40, 3, b"after")])
    storage.close()

    again = RaftStorage(tmp_path).recover()
    assert again.log.start_offset == 40 and again.log.end_offset == 41
    assert again.log.entry(40) == LogEntry(40, 3, b"after")
    assert again.snapshot_data == b"fetched"


def test_snapshot_with_a_bad_crc_is_ignored_for_an_older_good_one(tmp_path: Path) -> None:
    storage = RaftStorage(tmp_path)
    storage.recover()
    storage.append(entries(0, 10))
    storage.write_snapshot(SnapshotId(5, 1), b"good")
    storage.close()
    good = next((tmp_path / "snapshots").iterdir()).read_bytes()
    bad = bytearray(good.replace(b"good", b"evil"))
    (tmp_path / "snapshots" / f"{8:020d}-{1:010d}.checkpoint").write_bytes(bytes(bad).replace(
        (5).to_bytes(8, "big"), (8).to_bytes(8, "big"), 1))

    again = RaftStorage(tmp_path).recover()
    assert again.log.snapshot_id == SnapshotId(5, 1) and again.snapshot_data == b"good"


def test_quorum_state_write_is_atomic_and_corruption_is_reported(tmp_path: Path) -> None:
    storage = RaftStorage(tmp_path)
    storage.recover()
    storage.write_quorum_state(QuorumState(4, None, 2))
    storage.close()
    # A crash during the next write leaves a temp file behind; the old state still stands.
    (tmp_path / (QUORUM_STATE_FILE + ".tmp")).write_bytes(b'{"leader_ep')
    assert RaftStorage(tmp_path).recover().quorum_state == QuorumState(4, None, 2)
    assert json.loads((tmp_path / QUORUM_STATE_FILE).read_bytes())["voted_id"] == 2

    (tmp_path / QUORUM_STATE_FILE).write_bytes(b"not json")
    with pytest.raises(RaftStorageError, match=QUORUM_STATE_FILE):
        RaftStorage(tmp_path).recover()


def test_append_out_of_sequence_is_refused(tmp_path: Path) -> None:
    storage = RaftStorage(tmp_path)
    storage.recover()
    storage.append(entries(0, 2))
    with pytest.raises(RaftStorageError, match="append at offset 5"):
        storage.append(entries(5, 1))
    storage.close()
    assert os.path.getsize(segment_files(tmp_path)[0]) > 0


def test_diverged_tail_left_by_an_interrupted_snapshot_install_is_dropped(tmp_path: Path) -> None:
    # A follower held entries 0..9 of epoch 1 that the leader's history (epoch 3 at offset 7) replaced; it saved
    # the fetched snapshot and crashed before its log reset reached the disk.
    storage = RaftStorage(tmp_path)
    storage.recover()
    storage.append(entries(0, 10, epoch=1))
    storage.write_snapshot(SnapshotId(8, 3), b"leader-image")
    storage.close()

    storage = RaftStorage(tmp_path)
    recovered = storage.recover()
    assert recovered.log.start_offset == recovered.log.end_offset == 8
    assert recovered.log.last_epoch == 3
    storage.append([LogEntry(8, 3, b"next")])
    storage.close()
    again = RaftStorage(tmp_path).recover()
    assert again.log.entry(8) == LogEntry(8, 3, b"next")
