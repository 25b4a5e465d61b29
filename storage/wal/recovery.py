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
from collections.abc import AsyncIterator, Generator
from dataclasses import dataclass
from pathlib import Path

import crc32c

from storage import stream_record_batch
from storage.config import MiB
from storage.durable import fsync_dir
from storage.errors import WALError
from storage.stream_record_batch import StreamRecordBatch
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

    def steps(self) -> Generator[list[WALRecord], None, None]:
        """The intact records, a read's worth at a time, read synchronously (in a worker thread: :meth:`records`,
        or ``storage.wal.early_read`` from the process's start); ``end`` and ``kept`` follow as it goes."""
        live = self.live
        for index, segment in enumerate(live):
            following = live[index + 1] if index + 1 < len(live) else None
            end = yield from _read_segment(segment, self.trim, self.decode, following)
            self.end = segment.base_offset + end.length
            self.kept = index + 1
            if not end.complete:
                break

    async def records(self) -> AsyncIterator[WALRecord]:
        """:meth:`steps` run in a worker thread one step ahead of the records handed out here (``pread`` and
        CRC-32C of large buffers release the GIL), so recovery memory stays bounded by two reads (plus the records
        the caller keeps)."""
        steps = self.steps()
        loop = asyncio.get_running_loop()
        pending: asyncio.Future[list[WALRecord] | None] | None = loop.run_in_executor(None, next, steps, None)
        try:
            while pending is not None:
                # Shielded: a cancelled recovery must not close the segment under a read still running on it.
                records = await asyncio.shield(pending)
                pending = None if records is None else loop.run_in_executor(None, next, steps, None)
                for record in records or ():
                    yield record
        finally:
            _close_after(steps, pending)


#: A record body this long or longer is read straight into its own buffer (its payload), never copied out of a chunk.
LARGE_BODY = 64 * 1024
#: The first read of a segment, and the next one after a body read on its own: records of small bodies are read
#: this many bytes at a time, twice as many each read (up to ``READ_CHUNK``) while no body is read on its own.
FIRST_READ = 64 * 1024
_HEADERS = walrecord.HEADER_SIZE + stream_record_batch.HEADER_SIZE  # a WAL header and the batch header after it


class _SegmentReader:
    """Reads one segment's records front to back, synchronously (in a worker thread: :meth:`SegmentScan.steps`).

    Records of small bodies come from reads of a few of them at a time (their payloads copied out). A body of
    ``LARGE_BODY`` bytes or more, or one the read ended inside, is read on its own with one ``pread`` whose result
    *is* the payload: a restart recovering hundreds of MiB of producer batches copies each payload once, from the
    page cache into the buffer the LogCache keeps, and that copy (with the first touch of its fresh memory) runs
    in the worker thread. Every record is checked exactly as :class:`~storage.wal.record.RecordScanner` checks it,
    and the scan stops at the first torn or corrupt one; ``consumed`` is then the end of the intact records and
    ``stop`` why they ended. Nothing is read past ``limit`` (a sealed segment's end) or the file's end."""

    __slots__ = ("_base", "_decode", "_end", "_fd", "_sized", "_trim", "_where", "_window", "consumed", "stop")

    def __init__(self, fd: int, segment: Segment, limit: int | None, *, trim: int, decode: bool) -> None:
        self._fd = fd
        self._base = segment.base_offset
        self._end = -1 if limit is None else limit  # the file's size bounds it too: known at the first step
        self._sized = False
        self._trim = trim if decode else _NEVER
        self._decode = decode
        self._where = f"WAL segment {segment.path}"
        self._window = min(FIRST_READ, READ_CHUNK)
        self.consumed = 0  # bytes of the segment holding the intact records read so far
        self.stop: walrecord.ScanStop | None = None

    def step(self) -> list[WALRecord] | None:
        """The next records (possibly none), or None once the segment's records have ended (``stop`` says why)."""
        if self.stop is not None:
            return None
        if not self._sized:
            size = os.fstat(self._fd).st_size
            self._end = size if self._end < 0 else min(self._end, size)
            self._sized = True
        at = self.consumed
        want = min(max(self._window, _HEADERS), self._end - at)
        buf = os.pread(self._fd, want, at) if want > 0 else b""
        if not buf:
            self._stop_at(StopReason.END)
            return None
        records: list[WALRecord] = []
        apart = False  # a body read on its own in this step
        position = 0  # in ``buf``
        while position < len(buf):
            scanner = RecordScanner(
                memoryview(buf)[position:], self._base + at + position, where=self._where, skip_below=self._trim,
                verify_skipped_bodies=not self._decode, large_body=LARGE_BODY,
            )
            records += scanner
            stop = scanner.stop
            assert stop is not None
            position += scanner.position
            self.consumed = at + position
            if stop.reason is StopReason.END:
                break
            if stop.reason is StopReason.TRUNCATED_HEADER and len(buf) == want and at + want < self._end:
                break  # the next read starts at this record (a read holds a whole header unless the file ends)
            if stop.reason is not StopReason.LARGE_BODY and stop.reason is not StopReason.TRUNCATED_BODY:
                self._stop_at(stop.reason, stop.detail)  # where in the segment, not in the read
                break
            read = self._read_apart(memoryview(buf)[position:])
            if read is None:
                break
            end, batch = read
            if batch is not None:
                records.append(WALRecord(self._base + self.consumed, self._base + end, batch))
            apart = True
            position = end - at
            self.consumed = end
        self._window = min(FIRST_READ if apart else self._window * 2, READ_CHUNK)
        return records

    def _read_apart(self, head: memoryview) -> tuple[int, StreamRecordBatch | None] | None:
        """The record at ``consumed`` (its WAL header, checked, at the start of ``head``), its body read on its own:
        where in the segment it ends and its batch (None when it is only checked: below the trim point or a
        validation-only scan), or None when it is torn or corrupt (``stop`` set)."""
        at = self.consumed
        offset = self._base + at
        _magic, body_length, _body_offset, body_crc, _header_crc = walrecord.HEADER.unpack_from(head)
        end = at + walrecord.HEADER_SIZE + body_length
        if end > self._end:
            present = max(0, self._end - at - walrecord.HEADER_SIZE)
            self._stop_at(StopReason.TRUNCATED_BODY, f"{present} of {body_length} body bytes present")
            return None
        if offset < self._trim and self._decode:
            return end, None  # trimmed: only its framing matters, as RecordScanner skips it
        batch_header = bytes(head[walrecord.HEADER_SIZE : _HEADERS])
        if len(batch_header) < stream_record_batch.HEADER_SIZE:
            batch_header = os.pread(self._fd, stream_record_batch.HEADER_SIZE, at + walrecord.HEADER_SIZE)
        length = body_length - stream_record_batch.HEADER_SIZE
        payload = os.pread(self._fd, length, at + _HEADERS)  # the one copy of the payload
        if len(batch_header) + len(payload) < body_length:  # the file ended early after all: torn
            present = len(batch_header) + len(payload)
            self._stop_at(StopReason.TRUNCATED_BODY, f"{present} of {body_length} body bytes present")
            return None
        if crc32c.crc32c(payload, crc32c.crc32c(batch_header)) != body_crc:
            self._stop_at(StopReason.BAD_BODY_CRC)
            return None
        if offset < self._trim:
            return end, None  # a validation-only scan
        magic, stream_id, epoch, base_offset, count, declared = stream_record_batch.HEADER.unpack(batch_header)
        if magic != stream_record_batch.MAGIC:
            self._stop_at(StopReason.BAD_BODY, f"bad StreamRecordBatch magic {magic & 0xFF:#04x}")
            return None
        if declared != length:
            self._stop_at(StopReason.BAD_BODY, f"batch declares {declared} of {length} payload bytes")
            return None
        return end, StreamRecordBatch(stream_id, epoch, base_offset, count, payload)

    def _stop_at(self, reason: StopReason, detail: str = "") -> None:
        self.stop = walrecord.ScanStop(reason, self.consumed, self._base + self.consumed, detail)



def _read_segment(
    segment: Segment, trim: int, decode: bool, following: Segment | None
) -> Generator[list[WALRecord], None, _SegmentEnd]:
    """Yields the segment's intact records a read at a time, and returns where they end. A sealed segment (one with
    a ``following`` segment) must be intact up to exactly where that one starts; the last segment ends wherever its
    records stop."""
    where = f"WAL segment {segment.path}"
    limit = None if following is None else following.base_offset - segment.base_offset
    try:
        fd = os.open(segment.path, os.O_RDONLY)
    except OSError as exc:
        raise WALError(f"{where}: cannot open for recovery: {exc.strerror}") from exc
    try:
        reader = _SegmentReader(fd, segment, limit, trim=trim, decode=decode)
        while (records := reader.step()) is not None:
            yield records
    except OSError as exc:
        raise WALError(f"{where}: read failed during recovery: {exc.strerror}") from exc
    finally:
        os.close(fd)
    consumed, stop = reader.consumed, reader.stop
    assert stop is not None
    if limit is None:
        _log_tail(where, stop, trim)
        return _SegmentEnd(consumed, complete=True)
    if consumed == limit:
        return _SegmentEnd(consumed, complete=True)
    reason = stop.describe(where) if stop.reason is not StopReason.END else f"{where}: ends at byte {consumed}"
    assert following is not None
    logger.error(
        "%s, but the next segment %s starts at offset %d; recovery keeps the %d intact bytes before it and sets "
        "later segments aside", reason, following.path, following.base_offset, consumed,
    )
    return _SegmentEnd(consumed, complete=False)


def _close_after(steps: Generator[list[WALRecord], None, None], pending: asyncio.Future[list[WALRecord] | None] | None
                 ) -> None:
    """Closes ``steps`` (and so the segment it reads) once no step of it runs any more (a step nobody waits for:
    its error does not matter any more)."""
    if pending is None or pending.done():
        if pending is not None and not pending.cancelled():
            pending.exception()
        steps.close()
        return

    def close(step: asyncio.Future[list[WALRecord] | None]) -> None:
        if not step.cancelled():
            step.exception()
        steps.close()

    pending.add_done_callback(close)


def _log_tail(where: str, stop: walrecord.ScanStop, trim: int) -> None:
    """Where the newest segment's records end is normal; only a torn or damaged record there is news. Past the
    last record a preallocated segment holds zeros, and a recycled one its old records, whole (BAD_POSITION) or
    from the middle of one (any magic); a log that ends where it was trimmed (a clean stop uploads and trims
    everything) has nothing torn to report."""
    if stop.reason is StopReason.END:
        return
    if (stop.reason is StopReason.BAD_MAGIC and (stop.detail.endswith("0x00000000") or stop.offset == trim)) or (
        stop.reason is StopReason.BAD_POSITION
    ):
        logger.debug("%s: end of the log in a preallocated or recycled segment", stop.describe(where))
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
