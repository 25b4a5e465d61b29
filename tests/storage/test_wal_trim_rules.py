"""Both WAL modes refuse to trim past what they acknowledged and treat an older trim as a no-op (storage/wal/state.py),
over a real directory and an in-memory object store."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage.errors import WALError
from storage.objectstore.memory import MemoryObjectStore
from storage.stream_record_batch import StreamRecordBatch
from storage.wal.file import FileWAL
from storage.wal.s3 import S3WAL


@pytest.mark.parametrize("mode", ["file", "s3"])
async def test_trim_only_moves_forward_within_the_acknowledged_prefix(mode: str, tmp_path: Path) -> None:
    wal: FileWAL | S3WAL
    if mode == "file":
        wal = FileWAL(tmp_path / "wal")
    else:
        wal = S3WAL(MemoryObjectStore(), namespace="_fjord_test", node_id=1, node_epoch=1, batch_interval_ms=5)
    await wal.start()
    try:
        assert [r async for r in wal.recover()] == []
        first = await wal.append(StreamRecordBatch(7, 1, 0, 1, b"a" * 100))
        second = await wal.append(StreamRecordBatch(7, 1, 1, 1, b"b" * 100))
        assert wal.durable_offset == second.next_offset

        with pytest.raises(WALError, match=f"cannot trim to offset {second.next_offset + 1}"):
            await wal.trim(second.next_offset + 1)
        assert wal.trim_offset == 0

        await wal.trim(first.next_offset)
        assert wal.trim_offset == first.next_offset
        await wal.trim(first.offset)  # older than the trim point: nothing changes
        assert wal.trim_offset == first.next_offset
        assert wal.used_bytes == second.next_offset - first.next_offset
    finally:
        await wal.close()
