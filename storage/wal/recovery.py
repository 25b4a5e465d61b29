"""Recovery of the ``file`` WAL: finding the intact prefix of its segments and making the directory match it.

A scan runs from the trim point and stops at the first torn or corrupt record; the intact prefix is kept, the tail
is cut off (truncated), and appends continue at the end of the prefix in a fresh segment. A sealed segment is
scanned only up to where the next segment begins, so a preallocated tail is never read as data; a sealed segment
that ends early sets every later segment aside (``DISCARDED_SUFFIX``) rather than replaying records after a gap.
Kept apart from :class:`~storage.wal.file.FileWAL` because it only reads what a crash left behind: the appending
side never runs during it.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from storage.config import MiB
from storage.durable import fsync_dir
from storage.errors import WALError
from storage.wal import record as walrecord
from storage.wal.base import WALRecord
from storage.wal.record import RecordScanner, StopReason
from storage.wal.segments import DISCARDED_SUFFIX, Segment

logger = logging.getLogger(__name__)

READ_CHUNK = 8 * MiB
_NEVER = 1 << 62  # a skip_below that skips every record (validation-only scans)


@dataclass(frozen=True, slots=True)
class _SegmentEnd:
    length: int  # bytes of the segment holding intact records
    complete: bool  # a sealed segment held every byte up to the next segment


class SegmentScan:
    """One pass over the segments from the trim point: :meth:`records` yields the intact records (decoded, or only
    validated), and once it is exhausted ``end`` is the offset the intact log ends at and :func:`finish_recovery_sync`
    can make the directory match it."""

    def __init__(self, segments: list[Segment], trim: int, *, decode: bool) -> None:
        self.trim = trim
        self.decode = decode
        #: Segments wholly below the trim point (the next one starts at or before it): deleted.
        self.trimmed = [s for i, s in enumerate(segments[:-1]) if segments[i + 1].base_offset <= trim]
        self.live = segments[len(self.trimmed) :]
        self.end = self.live[0].base_offset if self.live else trim
        self.kept = 0  # segments holding the intact log (the last of them possibly cut short)

    async def records(self) -> AsyncIterator[WALRecord]:
        live = self.live
        for index, segment in enumerate(live):
            following = live[index + 1] if index + 1 < len(live) else None
            complete = True
            async for item in _scan_segment(segment, self.trim, self.decode, following):
                if isinstance(item, WALRecord):
                    yield item
                    continue
                self.end = segment.base_offset + item.length
                self.kept = index + 1
                complete = item.complete
            if not complete:
                break


class _ChunkReader:
    """Reads a segment front to back in ``READ_CHUNK`` pieces, one piece ahead: as soon as a piece is handed out,
    the read of the next one starts in a worker thread (``pread`` releases the GIL), so reading the next 8 MiB
    overlaps scanning the current one on the event loop instead of following it. Each read starts where the
    previous one ended, so a short read costs nothing but another read; an empty piece means the segment (or the
    ``limit`` a sealed segment must not read past) has ended. Owns ``fd``: :meth:`close` closes it once no read is
    running in a thread any more."""

    __slots__ = ("_fd", "_limit", "_loop", "_offset", "_pending")

    def __init__(self, fd: int, limit: int | None) -> None:
        self._fd = fd
        self._limit = limit
        self._offset = 0
        self._loop = asyncio.get_running_loop()
        self._pending: asyncio.Future[bytes] | None = None
        self._start()

    def _start(self) -> None:
        want = READ_CHUNK if self._limit is None else min(READ_CHUNK, self._limit - self._offset)
        if want > 0:
            self._pending = self._loop.run_in_executor(None, os.pread, self._fd, want, self._offset)

    async def next(self) -> bytes:
        pending = self._pending
        if pending is None:
            return b""
        # Shielded: a cancelled recovery must not forget a read still running on the fd (close() waits for it).
        chunk = await asyncio.shield(pending)
        self._pending = None
        if chunk:
            self._offset += len(chunk)
            self._start()
        return chunk

    def close(self) -> None:
        pending, self._pending = self._pending, None
        if pending is None or pending.done():
            if pending is not None and not pending.cancelled():
                pending.exception()  # a read-ahead nobody waited for: its error does not matter any more
            os.close(self._fd)
            return

        def close_after(read: asyncio.Future[bytes]) -> None:
            if not read.cancelled():
                read.exception()
            os.close(self._fd)

        pending.add_done_callback(close_after)


def _missing(partial: bytes | bytearray) -> int:
    """Bytes still missing from a record whose start ``partial`` is; only called once a scan of ``partial`` stopped
    as truncated, so a whole header in it has passed its CRC and length checks."""
    if len(partial) < walrecord.HEADER_SIZE:
        return walrecord.HEADER_SIZE - len(partial)
    _magic, body_length, *_ = walrecord.HEADER.unpack_from(partial)
    return int(walrecord.HEADER_SIZE + body_length - len(partial))


async def _scan_segment(
    segment: Segment, trim: int, decode: bool, following: Segment | None
) -> AsyncIterator[WALRecord | _SegmentEnd]:
    """Yields the segment's intact records, then where they end. A sealed segment (one with a ``following``
    segment) must be intact up to exactly where that one starts; the last segment ends wherever its records stop.
    Reads in chunks (one read ahead, :class:`_ChunkReader`) so recovery memory stays bounded by two chunks (plus
    the largest record)."""
    where = f"WAL segment {segment.path}"
    limit = None if following is None else following.base_offset - segment.base_offset

    def scanner_at(buf: bytes | bytearray | memoryview, position: int) -> RecordScanner:
        return RecordScanner(
            buf,
            segment.base_offset + position,
            where=where,
            skip_below=trim if decode else _NEVER,
            verify_skipped_bodies=not decode,
        )

    try:
        fd = await asyncio.to_thread(os.open, segment.path, os.O_RDONLY)
    except OSError as exc:
        raise WALError(f"{where}: cannot open for recovery: {exc.strerror}") from exc
    reader = _ChunkReader(fd, limit)
    try:
        consumed = 0  # bytes of the segment holding the intact records scanned so far
        # The start of a record the previous chunk cut off (at ``consumed``): completed from the next chunk and
        # scanned on its own, so only that record's bytes are copied, never the chunk.
        partial: bytearray | None = None
        stop = walrecord.ScanStop(StopReason.END, 0, segment.base_offset)  # an empty segment
        while True:
            chunk = await reader.next()
            if not chunk:
                break  # the segment ends (a record still cut off is a torn tail)
            view = memoryview(chunk)
            start = 0  # bytes of ``view`` already used to complete ``partial``
            while partial is not None and start < len(view):
                taken = view[start : start + _missing(partial)]
                partial += taken
                start += len(taken)
                scanner = scanner_at(partial, consumed)
                for rec in scanner:
                    yield rec
                assert scanner.stop is not None
                stop = scanner.stop
                del scanner  # its view of ``partial`` would stop the bytearray from growing
                if stop.reason is StopReason.END:
                    consumed += len(partial)
                    partial = None
                elif not stop.reason.truncated:
                    break  # the cut record is corrupt
            if partial is not None and not stop.reason.truncated:
                break
            if partial is not None:
                continue  # a record longer than this chunk: the next one has more of it
            scanner = scanner_at(view[start:], consumed)
            for rec in scanner:
                yield rec
            assert scanner.stop is not None
            stop = scanner.stop
            consumed += scanner.position
            if stop.reason.truncated:
                partial = bytearray(view[start + scanner.position :])
            elif stop.reason is not StopReason.END:
                break
        if limit is None:
            _log_tail(where, stop)
            yield _SegmentEnd(consumed, complete=True)
        elif consumed == limit:
            yield _SegmentEnd(consumed, complete=True)
        else:
            reason = stop.describe(where) if stop.reason is not StopReason.END else f"{where}: ends at byte {consumed}"
            assert following is not None
            logger.error(
                "%s, but the next segment %s starts at offset %d; recovery keeps the %d intact bytes before "
                "it and sets later segments aside", reason, following.path, following.base_offset, consumed,
            )
            yield _SegmentEnd(consumed, complete=False)
    except OSError as exc:
        raise WALError(f"{where}: read failed during recovery: {exc.strerror}") from exc
    finally:
        reader.close()


def _log_tail(where: str, stop: walrecord.ScanStop) -> None:
    """Where the newest segment's records end is normal; only a torn or damaged record there is news."""
    if stop.reason is StopReason.END:
        return
    if (stop.reason is StopReason.BAD_MAGIC and stop.detail.endswith("0x00000000")) or (
        stop.reason is StopReason.BAD_POSITION
    ):
        logger.debug("%s: end of the log in a preallocated segment", stop.describe(where))
    else:
        logger.warning("%s; cutting off the torn tail", stop.describe(where))


def finish_recovery_sync(directory: Path, scan: SegmentScan) -> list[Segment]:
    """Makes ``directory`` match the log ``scan`` recovered, and returns the segments kept: trimmed segments
    deleted, segments after a corrupt one set aside, the last intact segment cut at the end of its records. New
    appends then start a fresh segment, so nothing written before the crash beyond that end can ever be read again.
    Blocking: runs in the WAL's writer thread."""
    trimmed, live, kept, end, trim = scan.trimmed, scan.live, scan.kept, scan.end, scan.trim
    for segment in trimmed:
        segment.path.unlink(missing_ok=True)
    for segment in live[kept:]:
        aside = segment.path.with_name(segment.path.name + DISCARDED_SUFFIX)
        logger.error("WAL segment %s follows a corrupt record; set aside as %s", segment.path, aside.name)
        os.replace(segment.path, aside)
    keep = live[:kept]
    if keep and end < trim:
        # Everything left is below the trim point: start afresh at it.
        for segment in keep:
            segment.path.unlink(missing_ok=True)
        keep = []
    if keep:
        last = keep[-1]
        length = end - last.base_offset
        try:
            if length == 0:
                last.path.unlink()
                keep.pop()
            elif last.path.stat().st_size > length:
                os.truncate(last.path, length)
                with open(last.path, "rb") as f:
                    os.fsync(f.fileno())
        except OSError as exc:
            raise WALError(f"WAL segment {last.path}: cannot cut off the tail at byte {length}: {exc}") from exc
    fsync_dir(directory)
    return keep
