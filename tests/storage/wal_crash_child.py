"""Child process of tests/storage/test_wal_crash.py: appends to a WAL from many writers until it is SIGKILLed.

Usage: ``python wal_crash_child.py {file|s3} DATA_DIR NODE_EPOCH STREAM_BASE``

It recovers whatever the WAL holds, then runs ``WRITERS`` concurrent appenders (stream ``STREAM_BASE + i`` each,
offsets 0, 1, 2, ...) and a trimmer, and prints one flushed line per event — a line is printed only *after* the
event completed, so every line is a promise the parent can hold the WAL to::

    READY <records recovered>
    A <stream> <offset> <wal offset> <wal next offset>      an acknowledged append
    I <wal offset>                                          a trim about to start (it may complete unreported)
    T <wal offset>                                          a completed trim
"""

from __future__ import annotations

import asyncio
import hashlib
import sys
from pathlib import Path

import uvloop

from storage.objectstore.local import LocalObjectStore
from storage.stream_record_batch import StreamRecordBatch
from storage.wal.base import WriteAheadLog
from storage.wal.file import FileWAL
from storage.wal.s3 import S3WAL

WRITERS = 12
MAX_PAYLOAD = 12_000
TRIM_EVERY_S = 0.03
KEEP_UNTRIMMED = 30  # trim up to the 30th most recent acknowledged record


def payload_for(stream: int, offset: int) -> bytes:
    """Deterministic payload bytes (and size) of a stream's record, so the parent can check every recovered byte."""
    digest = hashlib.blake2b(f"{stream}/{offset}".encode(), digest_size=32).digest()
    size = 1 + int.from_bytes(digest[:4], "big") % MAX_PAYLOAD
    return (digest * (size // len(digest) + 1))[:size]


def batch_for(stream: int, offset: int) -> StreamRecordBatch:
    return StreamRecordBatch(stream, 7, offset, 1, payload_for(stream, offset))


def open_crash_wal(mode: str, data_dir: Path, node_epoch: int) -> WriteAheadLog:
    """The WAL under test, configured identically in the child and in the parent's recovery."""
    if mode == "file":
        return FileWAL(data_dir / "wal", segment_size=256 * 1024)
    if mode == "s3":
        store = LocalObjectStore(data_dir / "objects")
        return S3WAL(store, namespace="_fjord_crash", node_id=1, node_epoch=node_epoch, batch_interval_ms=15,
                     owns_store=True)
    raise SystemExit(f"unknown WAL mode {mode!r}")


def emit(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def main(mode: str, data_dir: Path, node_epoch: int, stream_base: int) -> None:
    wal = open_crash_wal(mode, data_dir, node_epoch)
    await wal.start()
    recovered = [rec async for rec in wal.recover()]
    emit(f"READY {len(recovered)}")
    acked: list[int] = []

    async def writer(stream: int) -> None:
        offset = 0
        while True:
            rec = await wal.append(batch_for(stream, offset))
            acked.append(rec.offset)
            emit(f"A {stream} {offset} {rec.offset} {rec.next_offset}")
            offset += 1

    async def trimmer() -> None:
        trimmed = 0
        while True:
            await asyncio.sleep(TRIM_EVERY_S)
            if len(acked) > KEEP_UNTRIMMED:
                target = acked[-KEEP_UNTRIMMED]
                if target > trimmed:
                    emit(f"I {target}")
                    await wal.trim(target)
                    trimmed = target
                    emit(f"T {target}")

    await asyncio.gather(trimmer(), *(writer(stream_base + i) for i in range(WRITERS)))


if __name__ == "__main__":
    if len(sys.argv) != 5:
        raise SystemExit(__doc__)
    uvloop.run(main(sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])))
