"""The file WAL writes a small group on the event loop and larger or slow ones on its writer thread
(``storage.wal.inline_writes``): a small append's acknowledgement must not wait for a thread on a busy machine, and
a slow disk must not hold the loop."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from storage.stream_record_batch import StreamRecordBatch
from storage.wal import inline_writes
from storage.wal.base import WALRecord
from storage.wal.file import FileWAL
from storage.wal.segments import Segment

#: How long the test below holds the writer thread (a bound on the test, not a figure it measures).
_HELD_S = 20.0


def batch(offset: int, size: int = 1000) -> StreamRecordBatch:
    return StreamRecordBatch(7, 3, offset, 1, bytes([offset % 251]) * size)


async def opened(path: Path, *, first: bool = True) -> FileWAL:
    """A started and recovered WAL; ``first``: with one record appended already (its segment created)."""
    wal = FileWAL(path)
    await wal.start()
    async for _ in wal.recover():
        pass
    if first:
        await wal.append(batch(0))
    return wal


def writers(wal: FileWAL, slow: list[float] | None = None) -> list[int]:
    """Records the thread each group is written on; a write takes ``slow[0]`` seconds longer while ``slow`` holds
    one (a slow disk, injected)."""
    seen: list[int] = []
    write_group = wal._writer.write_group

    def recorded(parts: Sequence[bytes], offset: int) -> Segment | None:
        if slow:
            time.sleep(slow[0])
        seen.append(threading.get_ident())
        return write_group(parts, offset)

    wal._writer.write_group = recorded  # type: ignore[method-assign]
    return seen


async def test_a_small_append_does_not_wait_for_the_writer_thread(tmp_path: Path) -> None:
    """On a loaded broker the writer thread waits to be woken, for a core and for the GIL, each time a group goes
    there and back (a move's closing appends and meta entries took 30-40 ms that way on a busy source). Here the
    thread is held outright: small appends are still acknowledged, the first one (which creates the WAL's first
    segment, as a broker just added to a cluster does in its first partition's open) included."""
    wal = await opened(tmp_path, first=False)
    assert wal._executor is not None
    released = threading.Event()
    wal._executor.submit(released.wait, _HELD_S)  # the writer thread, busy
    try:
        records = await asyncio.wait_for(_append_each(wal, range(20)), _HELD_S / 2)
    finally:
        released.set()
    await wal.close()
    reopened = FileWAL(tmp_path)
    await reopened.start()
    assert [r async for r in reopened.recover()] == records
    await reopened.close()


async def _append_each(wal: FileWAL, offsets: range) -> list[WALRecord]:
    return [await wal.append(batch(i)) for i in offsets]


async def test_a_large_group_is_written_on_the_writer_thread(tmp_path: Path) -> None:
    wal = await opened(tmp_path)
    seen = writers(wal)
    await wal.append(batch(1, inline_writes.INLINE_GROUP_BYTES))  # over the bound once framed
    await wal.append(batch(2))
    await wal.close()
    assert seen[0] != threading.get_ident()
    assert seen[1] == threading.get_ident()


async def test_one_slow_inline_write_keeps_groups_on_the_event_loop(tmp_path: Path) -> None:
    """One write a busy machine preempted is no slow disk: the next groups are still written in place."""
    wal = await opened(tmp_path)
    slow = [inline_writes.INLINE_SLOW_S * 5]
    seen = writers(wal, slow)
    await wal.append(batch(1))
    slow.clear()
    for i in range(2, 6):
        await wal.append(batch(i))
    await wal.close()
    assert seen == [threading.get_ident()] * 5


async def test_slow_inline_writes_send_groups_to_the_writer_thread_for_a_while(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slow or shared disk must not hold the event loop write after write: once the inline writes are slow on
    average, groups go to the thread until the pause is over, and then the loop tries again."""
    monkeypatch.setattr(inline_writes, "INLINE_PAUSE_S", 0.5)
    wal = await opened(tmp_path)
    slow = [inline_writes.INLINE_SLOW_S * 5]
    seen = writers(wal, slow)
    loop_thread = threading.get_ident()
    for i in range(1, 11):
        await wal.append(batch(i))
    slow.clear()
    sent_away = [ident != loop_thread for ident in seen].index(True)  # ValueError: every slow write stayed
    assert 1 <= sent_away <= 4
    assert all(ident != loop_thread for ident in seen[sent_away:])
    await asyncio.sleep(0.5)
    await wal.append(batch(11))  # the pause is over: in place again
    await wal.close()
    assert seen[-1] == loop_thread
