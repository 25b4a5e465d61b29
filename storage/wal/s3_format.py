"""What the S3 WAL keeps in a bucket, and which of it recovery may trust — sans-I/O.

Everything of one node lives under ``wal/<namespace>/<nodeId>/``::

    reservation                                   who owns this node's WAL: (nodeId, nodeEpoch, failover)
    trim                                          the trim point, rewritten on every trim
    probe                                         written and deleted by a restarting broker to see S3 takes writes
    <nodeEpoch:020>/<startOffset:020>-<endOffset:020>[.v2]    one WAL object per flushed batch (.v2: version 2)

Every broker of a cluster writes its WAL objects in the same ``s3.wal.path`` bucket, each under its own node
prefix, so any broker can find a dead one's WAL from its node id alone (*failover*, storage/wal/s3.py).

Zero-padded numbers make a prefix listing come back in epoch then offset order. A WAL object is a 48-byte header
followed by a body holding the records of logical offsets ``[startOffset, endOffset)``::

    magic u32 | version u16 | reserved u16 | nodeId i32 | nodeEpoch i64 | startOffset i64 | bodyLength i64
    | trimOffset i64 | headerCRC u32

The logical offsets are those of WAL records (storage/wal/record.py): each record takes its 24-byte frame plus its
batch, whatever the body's layout. Version 1 bodies are those records, in append order (``bodyLength`` is then
``endOffset - startOffset``). Version 2 bodies hold the same records in Fjord's object format
(storage/objects/format.py), after a table of their WAL positions::

    recordCount u32 | position u32 * recordCount | DataBlock* | IndexBlock | Footer

The batches are sorted by (stream, offset) into data blocks, block positions count from the object's first byte
(header included), and the table gives, in that same order, each record's WAL position relative to
``startOffset``: a restart puts them back in append order, each at its own position, exactly as v1 reads. A v2 WAL
object copied whole *is* a stream-set object (the reader never looks before the first block), so a failover commits
a dead node's WAL objects in place with a server-side copy instead of reading and uploading them again
(storage/failover_copy.py). Its key says it is v2 (``.v2``), so the failover knows from the listing which objects it
may copy and needs only each one's tail (footer and index), never a producer's bytes taken for an index.

Each new owner starts by writing an empty *epoch marker* object ``[E, E)`` at the end ``E`` of the log it found.
That marker is what makes fencing durable: an object of an older epoch that ends after the first object of any
newer epoch was written after the takeover (its writer's reservation check failed, so it was never acknowledged)
and is ignored by every later recovery, even once the marker itself has been trimmed — the newest object is never
deleted, and any older-epoch object ending at or before it lies below the trim point.
"""

from __future__ import annotations

import logging
import re
import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import crc32c

from storage.errors import CorruptObjectError
from storage.objects import format as fmt
from storage.stream_record_batch import StreamRecordBatch
from storage.wal import record as walrecord
from storage.wal.base import WALRecord
from storage.wal.record import RecordScanner, StopReason

logger = logging.getLogger(__name__)

OBJECT_MAGIC = 0x464A574F  # "FJWO"
RESERVATION_MAGIC = 0x464A5752  # "FJWR"
TRIM_MAGIC = 0x464A5754  # "FJWT"
VERSION = 1
OBJECT_VERSIONS = (1, 2)  # WAL object bodies: WAL records in append order (1), the object format (2)

OBJECT_HEADER = struct.Struct(">IHHiqqqq")
OBJECT_HEADER_SIZE = OBJECT_HEADER.size + 4  # 48 with the CRC
RESERVATION = struct.Struct(">IHiq")
RESERVATION_V2 = struct.Struct(">IHiqB")  # v2 adds the failover flag
TRIM = struct.Struct(">IHiqq")
_CRC = struct.Struct(">I")
_COUNT = struct.Struct(">I")

_OBJECT_KEY = re.compile(r"^(\d{20})/(\d{20})-(\d{20})(\.v2)?$")


def node_prefix(namespace: str, node_id: int) -> str:
    return f"wal/{namespace}/{node_id}/"


def reservation_key(namespace: str, node_id: int) -> str:
    return node_prefix(namespace, node_id) + "reservation"


def probe_key(namespace: str, node_id: int) -> str:
    """What a broker about to register writes and deletes to see its WAL's bucket takes writes
    (a broker about to register); nothing reads it, and recovery's listing skips it (it is not
    a WAL object's key)."""
    return node_prefix(namespace, node_id) + "probe"


def trim_key(namespace: str, node_id: int) -> str:
    return node_prefix(namespace, node_id) + "trim"


@dataclass(frozen=True, slots=True, order=True)
class WALObjectKey:
    """A WAL object as its key describes it (what a listing tells recovery before any GET)."""

    start: int
    end: int
    epoch: int
    key: str
    version: int = 1  # of the body, as the key says (``.v2``)

    @property
    def empty(self) -> bool:
        return self.start == self.end


def object_key(  # noqa: PLR0917 - the key's fields in the key's order, as every caller has them
    namespace: str, node_id: int, epoch: int, start: int, end: int, version: int = 1
) -> WALObjectKey:
    key = f"{node_prefix(namespace, node_id)}{epoch:020d}/{start:020d}-{end:020d}" + (".v2" if version == 2 else "")
    return WALObjectKey(start, end, epoch, key, version)


def parse_object_key(key: str, prefix: str) -> WALObjectKey | None:
    """The object a key names, or None for the reservation, trim and foreign keys."""
    if not key.startswith(prefix):
        return None
    match = _OBJECT_KEY.match(key[len(prefix) :])
    if match is None:
        return None
    epoch, start, end = (int(g) for g in match.groups()[:3])
    if end < start:
        return None
    return WALObjectKey(start, end, epoch, key, 2 if match.group(4) else 1)


# ----------------------------------------------------------------------------------------------- codecs


def _seal(body: bytes) -> bytes:
    return body + _CRC.pack(crc32c.crc32c(body))


def _unseal(data: bytes, size: int, what: str, where: str) -> bytes:
    if len(data) != size + _CRC.size:
        raise CorruptObjectError(f"{where}: {what} is {len(data)} bytes, expected {size + _CRC.size}")
    body = data[:size]
    if _CRC.unpack_from(data, size)[0] != crc32c.crc32c(body):
        raise CorruptObjectError(f"{where}: {what} CRC mismatch")
    return body


@dataclass(frozen=True, slots=True)
class Reservation:
    """Who may write a node's WAL. ``failover`` marks another broker replaying a dead node's WAL under
    ``node_epoch`` (higher than the dead incarnation's, so a writer that is in fact only paused is fenced)."""

    node_id: int
    node_epoch: int
    failover: bool = False

    def encode(self) -> bytes:
        if not self.failover:  # the v1 layout, which nodes without failover support read too
            return _seal(RESERVATION.pack(RESERVATION_MAGIC, VERSION, self.node_id, self.node_epoch))
        return _seal(RESERVATION_V2.pack(RESERVATION_MAGIC, 2, self.node_id, self.node_epoch, 1))

    @staticmethod
    def decode(data: bytes, where: str) -> Reservation:
        v2 = len(data) == RESERVATION_V2.size + _CRC.size
        layout = RESERVATION_V2 if v2 else RESERVATION
        body = _unseal(data, layout.size, "WAL reservation", where)
        magic, version, node_id, node_epoch, *flag = layout.unpack(body)
        if magic != RESERVATION_MAGIC or version != (2 if v2 else VERSION):
            raise CorruptObjectError(f"{where}: not a WAL reservation (magic {magic:#x}, version {version})")
        return Reservation(node_id, node_epoch, bool(flag and flag[0]))


@dataclass(frozen=True, slots=True)
class TrimPoint:
    node_id: int
    node_epoch: int  # the writer that persisted it, for operators
    offset: int

    def encode(self) -> bytes:
        return _seal(TRIM.pack(TRIM_MAGIC, VERSION, self.node_id, self.node_epoch, self.offset))

    @staticmethod
    def decode(data: bytes, where: str) -> TrimPoint:
        body = _unseal(data, TRIM.size, "WAL trim point", where)
        magic, version, node_id, node_epoch, offset = TRIM.unpack(body)
        if magic != TRIM_MAGIC or version != VERSION or offset < 0:
            raise CorruptObjectError(f"{where}: not a WAL trim point (magic {magic:#x}, version {version})")
        return TrimPoint(node_id, node_epoch, offset)


@dataclass(frozen=True, slots=True)
class ObjectHeader:
    node_id: int
    node_epoch: int
    start_offset: int
    body_length: int
    trim_offset: int
    version: int = 1

    def pack_into(self, out: bytearray) -> None:
        OBJECT_HEADER.pack_into(
            out, 0, OBJECT_MAGIC, self.version, 0, self.node_id, self.node_epoch, self.start_offset, self.body_length,
            self.trim_offset,
        )
        _CRC.pack_into(out, OBJECT_HEADER.size, crc32c.crc32c(bytes(out[: OBJECT_HEADER.size])))

    def encode(self) -> bytes:
        out = bytearray(OBJECT_HEADER_SIZE)
        self.pack_into(out)
        return bytes(out)

    @staticmethod
    def decode(data: bytes | memoryview, where: str) -> ObjectHeader:
        if len(data) < OBJECT_HEADER_SIZE:
            raise CorruptObjectError(f"{where}: {len(data)} bytes is too short for a WAL object header")
        head = bytes(data[: OBJECT_HEADER.size])
        if _CRC.unpack_from(data, OBJECT_HEADER.size)[0] != crc32c.crc32c(head):
            raise CorruptObjectError(f"{where}: WAL object header CRC mismatch")
        magic, version, _reserved, node_id, epoch, start, body_length, trim = OBJECT_HEADER.unpack(head)
        if magic != OBJECT_MAGIC or version not in OBJECT_VERSIONS:
            raise CorruptObjectError(f"{where}: not a WAL object (magic {magic:#x}, version {version})")
        return ObjectHeader(node_id, epoch, start, body_length, trim, version)

    def check(self, expected: WALObjectKey, node_id: int, size: int) -> None:
        """The header must agree with the key it was found under and the bytes that came with it."""
        problems = []
        if self.version != expected.version:
            problems.append(f"version {self.version}, key says {expected.version}")
        if self.node_id != node_id:
            problems.append(f"node id {self.node_id}, expected {node_id}")
        if self.node_epoch != expected.epoch:
            problems.append(f"node epoch {self.node_epoch}, expected {expected.epoch}")
        if self.start_offset != expected.start:
            problems.append(f"start offset {self.start_offset}, expected {expected.start}")
        if self.version == 1 and self.body_length != expected.end - expected.start:
            problems.append(f"body length {self.body_length}, key says {expected.end - expected.start}")
        if size != OBJECT_HEADER_SIZE + self.body_length:
            problems.append(f"object is {size} bytes, header says {OBJECT_HEADER_SIZE + self.body_length}")
        if problems:
            raise CorruptObjectError(f"{expected.key}: WAL object header disagrees: " + "; ".join(problems))


def encode_v2(
    header: ObjectHeader, batches: Sequence[StreamRecordBatch], block_size: int
) -> tuple[ObjectHeader, list[bytes]] | None:
    """A v2 WAL object of ``batches`` (in append order, from ``header.start_offset`` on) as its parts, the header
    first; ``header`` gives all but the version and body length. None when the batches cannot make one stream-set
    object (a stream's offsets in them are not contiguous, as after an append that failed): the caller writes v1."""
    order = sorted(range(len(batches)), key=lambda i: (batches[i].stream_id, batches[i].base_offset))
    positions = [0] * len(batches)
    position = 0
    for i, batch in enumerate(batches):
        positions[i] = position
        position += walrecord.record_size(batch)
    table = struct.pack(f">I{len(order)}I", len(order), *(positions[i] for i in order))
    builder = fmt.ObjectBuilder(block_size, base_position=OBJECT_HEADER_SIZE + len(table))
    try:
        builder.add_all(batches[i] for i in order)
    except ValueError:
        return None
    parts = [table, *builder.finish_parts()]
    body = sum(len(p) for p in parts)
    full = ObjectHeader(header.node_id, header.node_epoch, header.start_offset, body, header.trim_offset, 2)
    return full, [full.encode(), *parts]


def v2_index(tail: bytes, size: int, where: str) -> list[fmt.IndexEntry]:
    """The index of a v2 WAL object of ``size`` bytes from its last bytes (``tail``, at least the footer; the
    whole index when it is long enough, else CorruptObjectError)."""
    footer = fmt.parse_footer(tail, size, where)
    window = size - len(tail)
    if footer.index_position < window:
        raise CorruptObjectError(f"{where}: the {len(tail)}-byte tail read does not hold the whole index")
    index = tail[footer.index_position - window : footer.index_position - window + footer.index_length]
    entries = fmt.parse_index(index, footer, where)
    table_end = OBJECT_HEADER_SIZE + _COUNT.size + 4 * sum(e.record_count for e in entries)
    if (entries[0].position if entries else footer.index_position) != table_end:
        raise CorruptObjectError(f"{where}: the data blocks do not start after the header and the position table")
    return entries


def decode_v2(data: bytes, obj: WALObjectKey, where: str) -> list[WALRecord]:
    """The records of a whole v2 WAL object in append order, each at its WAL position; CorruptObjectError where it
    is damaged (positions that do not tile the object's ``[start, end)`` included)."""
    entries = v2_index(data, len(data), where)
    (count,) = _COUNT.unpack_from(data, OBJECT_HEADER_SIZE)
    table_end = OBJECT_HEADER_SIZE + _COUNT.size + 4 * count
    if table_end != (entries[0].position if entries else len(data) - fmt.FOOTER_SIZE):
        raise CorruptObjectError(f"{where}: a position table of {count} records does not end where the blocks start")
    positions = struct.unpack_from(f">{count}I", data, OBJECT_HEADER_SIZE + _COUNT.size)
    view = memoryview(data)
    batches = [b for e in entries for b in fmt.parse_block(view[e.position : e.position + e.size], e, where)]
    if len(batches) != count:
        raise CorruptObjectError(f"{where}: {len(batches)} batches in the blocks, {count} in the position table")
    records = [
        WALRecord(obj.start + p, obj.start + p + walrecord.record_size(b), b)
        for p, b in zip(positions, batches, strict=True)
    ]
    records.sort(key=lambda r: r.offset)
    at = obj.start
    for record in records:
        if record.offset != at:
            raise CorruptObjectError(f"{where}: no record at WAL position {at} (next at {record.offset})")
        at = record.next_offset
    if at != obj.end:
        raise CorruptObjectError(f"{where}: records end at WAL position {at}, the object at {obj.end}")
    return records


def object_records(obj: WALObjectKey, data: bytes, node_id: int, trim: int, who: str) -> Iterator[WALRecord]:
    """The records of one whole WAL object of ``node_id``: none if its header is corrupt, those before the damage
    if its body is (``who`` names the WAL in the error logged). A v1 body's records carry their own WAL positions
    (those below ``trim`` are skipped); a v2 body's all carry the object's (see the module docstring)."""
    try:
        header = ObjectHeader.decode(data, obj.key)
        header.check(obj, node_id, len(data))
    except CorruptObjectError as exc:
        logger.error("%s: %s; skipping the object", who, exc)
        return
    where = f"WAL object {obj.key}"
    if header.version == 1:
        scanner = RecordScanner(memoryview(data)[OBJECT_HEADER_SIZE:], obj.start, where=where, skip_below=trim)
        yield from scanner
        if scanner.stop is not None and scanner.stop.reason is not StopReason.END:
            logger.error("%s: %s; the rest of the object is skipped", who, scanner.stop.describe(where))
        return
    try:
        records = decode_v2(data, obj, where)
    except CorruptObjectError as exc:
        logger.error("%s: %s; skipping the object", who, exc)
        return
    yield from (r for r in records if r.offset >= trim)


# ----------------------------------------------------------------------------------------------- recovery plan


@dataclass(frozen=True, slots=True)
class RecoveryPlan:
    chain: list[WALObjectKey]  # contiguous objects from the trim point, in offset order: the log to replay
    end: int  # where the next object starts
    start: int  # where replay starts (the trim point)
    fenced: list[WALObjectKey]  # written by a stale writer after a newer epoch took over: never acknowledged
    trimmed: list[WALObjectKey]  # wholly below the trim point
    orphaned: list[WALObjectKey]  # overlapping the chain, or beyond a gap: not part of the log
    gap_at: int | None = None  # the chain ends at a missing range if set

    @property
    def discard(self) -> list[WALObjectKey]:
        return [*self.fenced, *self.trimmed, *self.orphaned]


def plan_recovery(objects: Iterable[WALObjectKey], trim: int | None) -> RecoveryPlan:
    """Chooses the objects that form this node's log (see the module docstring).

    ``trim`` is the persisted trim point, or None if none was ever written (then the log starts at the oldest
    object). Objects are taken strictly contiguously from the trim point (the first may straddle it); when several
    start at the same offset an empty marker comes first and then the newest epoch.
    """
    objs = sorted(set(objects))
    first_newer: dict[int, int] = {}  # epoch -> first offset written by any newer epoch
    running: int | None = None
    for epoch in sorted({o.epoch for o in objs}, reverse=True):
        if running is not None:
            first_newer[epoch] = running
        own = min(o.start for o in objs if o.epoch == epoch)
        running = own if running is None else min(running, own)
    fenced = [o for o in objs if o.epoch in first_newer and o.end > first_newer[o.epoch]]
    valid = [o for o in objs if not (o.epoch in first_newer and o.end > first_newer[o.epoch])]

    start = trim if trim is not None else min((o.start for o in valid), default=0)
    newest = max(valid, key=lambda o: (o.start, o.end, o.epoch), default=None)
    chain: list[WALObjectKey] = []
    trimmed: list[WALObjectKey] = []
    orphaned: list[WALObjectKey] = []
    pos = start
    gap_at: int | None = None
    for obj in sorted(valid, key=lambda o: (o.start, 0 if o.empty else 1, -o.epoch)):
        if obj.end < start or (obj.end == start and not obj.empty):
            if obj != newest:  # the newest object stays so that fencing survives trimming everything
                trimmed.append(obj)
        elif gap_at is not None:
            orphaned.append(obj)
        elif obj.start == pos or (obj.start < pos and not chain):
            chain.append(obj)
            pos = obj.end
        elif obj.start < pos:
            if not obj.empty:  # an old marker inside the log is harmless; anything else overlaps it
                orphaned.append(obj)
        else:
            gap_at = pos
            orphaned.append(obj)
    return RecoveryPlan(chain, pos, start, fenced, trimmed, orphaned, gap_at)
