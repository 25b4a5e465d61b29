"""An append on its way through either WAL mode, from the call to its acknowledgement.

Both modes take appends the same way: the caller's future is created at the call, the capacity gate admits the
append in call order, admission gives it its WAL position (the next offset, advanced by its encoded size), and the
append is settled exactly once when its bytes are durable or the WAL fails. Only what "durable" means differs (one
fdatasync'd group in file mode, one uploaded object and every earlier one in s3 mode), so that stays in file.py and
s3.py and the rest lives here.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from storage.stream_record_batch import StreamRecordBatch
from storage.wal import record as walrecord
from storage.wal.base import WALRecord
from storage.wal.capacity import CapacityGate


@dataclass(slots=True)
class PendingAppend:
    batch: StreamRecordBatch
    future: asyncio.Future[WALRecord] = field(repr=False)
    offset: int = 0  # set on admission
    next_offset: int = 0

    @classmethod
    def submit(cls, gate: CapacityGate[PendingAppend], batch: StreamRecordBatch) -> PendingAppend:
        """Queues ``batch`` at the gate as it is called (the order appends are made in is the order they get
        offsets in); await ``future`` for the acknowledgement."""
        pending = cls(batch, asyncio.get_running_loop().create_future())
        gate.submit(pending, walrecord.record_size(batch), pending.future)
        return pending

    @property
    def size(self) -> int:
        """Bytes the append takes in the WAL once placed."""
        return self.next_offset - self.offset

    def place(self, offset: int, size: int) -> int:
        """Gives the admitted append its position; returns the offset the next admitted append gets."""
        self.offset = offset
        self.next_offset = offset + size
        return self.next_offset

    def acknowledge(self) -> None:
        """The append is durable; a caller that was cancelled meanwhile is left alone."""
        if not self.future.done():
            self.future.set_result(WALRecord(self.offset, self.next_offset, self.batch))

    def fail(self, error: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(error)
