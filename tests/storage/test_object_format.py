"""Object format: what the builder writes, the parsers read back, and corruption is named, not misread."""

from __future__ import annotations

import struct

import pytest

from storage.errors import CorruptObjectError
from storage.objects import format as fmt
from storage.stream_record_batch import StreamRecordBatch


def _batches(stream_id: int, start: int, n: int, size: int = 100) -> list[StreamRecordBatch]:
    return [StreamRecordBatch(stream_id, 0, start + i * 2, 2, bytes([i % 251]) * size) for i in range(n)]


def _read_all(data: bytes) -> tuple[list[fmt.IndexEntry], list[StreamRecordBatch]]:
    footer = fmt.parse_footer(data[-fmt.FOOTER_SIZE :], len(data), "obj")
    entries = fmt.parse_index(data[footer.index_position : footer.index_position + footer.index_length], footer, "obj")
    out: list[StreamRecordBatch] = []
    for entry in entries:
        out.extend(fmt.parse_block(data[entry.position : entry.position + entry.size], entry, "obj"))
    return entries, out


def test_layout_sizes_match_design() -> None:
    assert fmt.BLOCK_HEADER_SIZE == 10
    assert fmt.INDEX_ENTRY_SIZE == 36
    assert fmt.FOOTER_SIZE == 48


def test_round_trip_splits_blocks_by_stream_and_size() -> None:
    batches = _batches(3, 4, 2) + _batches(4, 100, 30, size=1000) + _batches(5, 0, 1)
    data = fmt.build_object(batches, block_size=10_000)
    entries, decoded = _read_all(data)
    assert decoded == batches
    assert [e.stream_id for e in entries] == [3, 4, 4, 4, 5]
    assert entries[1].start_offset == 100 and entries[1].record_count == 10
    assert entries[-1].end_offset == 2
    footer_magic = struct.unpack(">Q", data[-8:])[0]
    assert footer_magic == 0x88E241B785F4CFF7


def test_find_blocks_locates_offset_inside_a_block_and_stops_at_budget() -> None:
    batches = _batches(7, 0, 40, size=1000)
    data = fmt.build_object(batches, block_size=5000)
    entries, _ = _read_all(data)
    found = fmt.find_blocks(entries, 7, 13, 80, max_bytes=1)
    assert len(found) == 1 and found[0].start_offset <= 13 < found[0].end_offset
    assert fmt.find_blocks(entries, 8, 0, 10, 1 << 20) == []
    assert fmt.find_blocks(entries, 7, 80, 90, 1 << 20) == []


def test_truncated_object_is_reported_with_its_name() -> None:
    data = fmt.build_object(_batches(1, 0, 5))
    with pytest.raises(CorruptObjectError, match="obj-9"):
        fmt.parse_footer(data[:-3], len(data) - 3, "obj-9")


def test_corrupt_block_is_reported_not_misread() -> None:
    data = bytearray(fmt.build_object(_batches(1, 0, 5)))
    data[0] = 0x11  # block magic
    footer = fmt.parse_footer(bytes(data[-48:]), len(data), "obj")
    entries = fmt.parse_index(bytes(data[footer.index_position : -48]), footer, "obj")
    with pytest.raises(CorruptObjectError, match="magic"):
        list(fmt.parse_block(bytes(data[: entries[0].size]), entries[0], "obj"))


def test_object_key_uses_reversed_hex_prefix() -> None:
    key = fmt.object_key(68, "_fjord_c1")
    assert key == "44000000/_fjord_c1/68"
    assert fmt.object_id_from_key(key) == 68
    assert fmt.object_id_from_key("reservation/x") is None
