"""A minimal in-memory WriteAheadLog for engine tests until they can run on the real file WAL.

Its records live in a ``MemoryWALData`` that outlives the WAL object, so a test can drop an engine (a crash)
and build a new one on the same data. Appends are acknowledged in order, like the real WALs.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from storage.record import HEADER_SIZE, StreamRecordBatch
from storage.wal.base import WALRecord


@dataclass
class MemoryWALData:
    records: list[WALRecord] = field(default_factory=list)
    trim_offset: int = 0
    end: int = 0


class MemoryWAL:
    def __init__(self, data: MemoryWALData | None = None, *, delay: float = 0.0) -> None:
        self.data = data if data is not None else MemoryWALData()
        self._delay = delay
        self._lock = asyncio.Lock()
        self.trims: list[int] = []

    async def start(self) -> None:
        return None

    async def recover(self) -> AsyncIterator[WALRecord]:
        for record in list(self.data.records):
            if record.offset >= self.data.trim_offset:
                yield record

    async def append(self, batch: StreamRecordBatch) -> WALRecord:
        async with self._lock:
            if self._delay:
                await asyncio.sleep(self._delay)
            offset = self.data.end
            record = WALRecord(offset, offset + 24 + HEADER_SIZE + batch.size, batch)
            self.data.end = record.next_offset
            self.data.records.append(record)
            return record

    async def trim(self, offset: int) -> None:
        self.trims.append(offset)
        self.data.trim_offset = max(self.data.trim_offset, offset)
        self.data.records = [r for r in self.data.records if r.offset >= self.data.trim_offset]

    async def reset(self) -> None:
        await self.trim(self.data.end)

    async def close(self) -> None:
        return None

    @property
    def used_bytes(self) -> int:
        return self.data.end - self.data.trim_offset
