"""Reading one planned :class:`DirectRange` on an executor: range GETs of the objects, then Fetch for the tail.

The uploaded head is read from the bucket (``storage.objects.reader``: the object's index, then its data blocks,
adjacent blocks in one GET), a bounded number of block bytes at a time so a task's memory stays small. Each
StreamRecordBatch's payload is a Kafka RecordBatch exactly as produced, decoded with ``wire.record_batch`` (every
codec); control batches are skipped, as a consumer never returns them. Records outside ``[start, end)`` of a batch
that straddles a bound are dropped, so rows are exactly the Kafka path's. The part after the last uploaded offset is
read by ``kafka_reader`` through the broker.

A ``read_committed`` task (its range ends at the LSO) drops the batches of aborted transactions the way a
read_committed consumer does (``wire.aborted_txns.AbortedFilter``, fed the planned aborted transactions and every
batch in order, ABORT markers included). At the first transactional batch from the plan's ``known_below`` on, whose
outcome the uploaded txn stream may not tell yet, the rest of the range goes through the broker (see
``direct_plan``).

If an object disappeared since planning (retention or compaction removed it), the rest of the range goes through the
broker too, which applies the ``failOnDataLoss`` rules to what is there now.

Rows reach Spark as Arrow record batches, built column by column (:class:`Columns`): the Python Data Source API
takes them as they are, where it would otherwise convert every cell of every tuple in Python, and per record that
costs several times what decoding it does. The broker tail's rows are batched the same way (:func:`arrow_batches`),
since a task hands Spark either tuples or Arrow batches, not both.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import islice

import pyarrow as pa
import pyarrow.compute as pc

from spark_connector.direct_plan import CommittedView, DirectRange
from spark_connector.kafka_reader import ReadSettings, Row, read_range
from spark_connector.offsets import OffsetRange
from storage.config import StorageConfig, parse_bucket_url
from storage.errors import ObjectNotFoundError
from storage.objects.reader import ObjectReader
from storage.objectstore.factory import open_object_store
from wire.aborted_txns import AbortedFilter, is_abort_marker
from wire.record_batch import LOG_APPEND_TIME, BatchHeader, decode_records, iter_batches

__all__ = ["Columns", "DirectSettings", "arrow_batches", "read_direct"]

#: Block bytes fetched per GET round; bounds a task's memory, and is large enough that GETs are few.
CHUNK_BYTES = 8 << 20
#: Indexes kept per task: a task reads a few objects, each once.
_INDEX_CACHE = 64
#: Spark's ``timestampType`` ids (Java's TimestampType): 0 create time, 1 log-append time.
_SPARK_CREATE_TIME = 0
_SPARK_LOG_APPEND_TIME = 1
#: Rows per Arrow batch handed to Spark (Spark's own default for Python data sources is 10000).
ARROW_BATCH_ROWS = 4096
_HEADERS = pa.list_(pa.field("element", pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])))
#: The Arrow form of ``source.schema`` exactly as Spark's Python Data Source API checks it (``to_arrow_schema`` of
#: the Kafka source's schema, in UTC).
_COLUMNS = [
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", pa.timestamp("us", tz="UTC")),
    pa.field("timestampType", pa.int32()),
]
_SCHEMA = pa.schema(_COLUMNS)
_SCHEMA_WITH_HEADERS = pa.schema([*_COLUMNS, pa.field("headers", _HEADERS)])


@dataclass(frozen=True)
class DirectSettings:
    """What a direct task needs besides its range: the broker path's settings and the bucket's URL."""

    read: ReadSettings
    object_store: str


def read_direct(settings: DirectSettings, task: DirectRange) -> Iterator[pa.RecordBatch]:
    """The rows of ``task.offsets`` in offset order as Arrow batches: the objects' part, then the broker's."""
    offsets = task.offsets
    include_headers = settings.read.include_headers
    loop = asyncio.new_event_loop()
    key = "fjord.object.store"
    store = open_object_store(parse_bucket_url(settings.object_store, key), StorageConfig(), key)
    reader = ObjectReader(store, task.namespace, _INDEX_CACHE)
    columns = Columns(offsets.topic, offsets.partition, include_headers, task.committed)
    position = offsets.start
    try:
        for piece in task.slices:
            if columns.stopped_at is not None:
                break
            cursor = max(piece.start, position)
            while cursor < piece.end:
                try:
                    batches = loop.run_until_complete(
                        reader.read_range(
                            piece.object_id, piece.stream_id, cursor, piece.end, CHUNK_BYTES, piece.object_size
                        )
                    )
                except ObjectNotFoundError:
                    break
                if not batches:
                    break
                for batch in batches:
                    columns.add(batch.payload, max(position, piece.start), piece.end)
                    if len(columns) >= ARROW_BATCH_ROWS:
                        yield columns.flush()
                    if columns.stopped_at is not None:
                        break
                if columns.stopped_at is not None:
                    break
                cursor = batches[-1].last_offset
            else:
                position = max(position, piece.end)
                continue
            position = max(position, columns.next_offset)
            break
        if columns.stopped_at is not None:
            position = columns.stopped_at
        if len(columns):
            yield columns.flush()
        if position < offsets.end:
            tail = read_range(settings.read, OffsetRange(offsets.topic, offsets.partition, position, offsets.end))
            yield from arrow_batches(tail, include_headers)
    finally:
        loop.run_until_complete(store.close())
        loop.close()


class Columns:
    """Records of one partition gathered column by column into Arrow batches of the source's schema: building
    Arrow arrays from lists of plain values is what keeps the direct path cheap per record."""

    def __init__(
        self, topic: str, partition: int, include_headers: bool, committed: CommittedView | None = None
    ) -> None:
        self._topic = topic
        self._partition = partition
        self._include_headers = include_headers
        self._keys: list[bytes | None] = []
        self._values: list[bytes | None] = []
        self._offsets: list[int] = []
        self._timestamps: list[int] = []
        self._types: list[int] = []
        self._headers: list[list[tuple[str, bytes | None]] | None] = []
        #: The offset after the last record added (or the start, before any).
        self.next_offset = 0
        self._committed = committed
        self._aborted = AbortedFilter(committed.aborted) if committed is not None else None
        #: read_committed: the offset of the first batch whose outcome the plan does not know (nothing is added
        #: from there on; the caller reads the rest through the broker).
        self.stopped_at: int | None = None

    def __len__(self) -> int:
        return len(self._offsets)

    def add(self, payload: bytes, start: int, end: int) -> None:
        """The records in ``payload`` (Kafka record batches) with offsets in ``[start, end)``; control batches are
        skipped, as a consumer never returns them, and so are aborted ones in a read_committed task."""
        for header, batch in iter_batches(payload):
            if self.stopped_at is not None or header.base_offset >= end:
                return
            if header.next_offset <= start:
                continue
            if self._skipped(header, batch, start):
                continue
            spark_type = _SPARK_LOG_APPEND_TIME if header.timestamp_type == LOG_APPEND_TIME else _SPARK_CREATE_TIME
            for record in decode_records(batch):
                offset = record.offset
                if not start <= offset < end:
                    continue
                self._keys.append(record.key)
                self._values.append(record.value)
                self._offsets.append(offset)
                self._timestamps.append(record.timestamp if record.timestamp is not None else 0)
                self._types.append(spark_type)
                if self._include_headers:
                    self._headers.append(list(record.headers) or None)
                self.next_offset = offset + 1

    def _skipped(self, header: BatchHeader, batch: bytes | memoryview, start: int) -> bool:
        """Control batches, and in a read_committed task the batches of aborted transactions; sets
        :attr:`stopped_at` at a transactional batch the plan cannot decide."""
        if self._committed is None or self._aborted is None:
            return header.is_control
        if header.is_transactional and header.base_offset >= self._committed.known_below:
            self.stopped_at = max(header.base_offset, start)
            return True
        return self._aborted.is_aborted(header, is_abort_marker(header, batch)) or header.is_control

    def flush(self) -> pa.RecordBatch:
        """The records added since the last flush, as one batch."""
        count = len(self._offsets)
        millis = pa.array(self._timestamps, type=pa.int64())
        arrays = [
            pa.array(self._keys, type=pa.binary()),
            pa.array(self._values, type=pa.binary()),
            pa.array([self._topic] * count, type=pa.string()),
            pa.array([self._partition] * count, type=pa.int32()),
            pa.array(self._offsets, type=pa.int64()),
            pc.multiply(millis, 1000).cast(pa.timestamp("us", tz="UTC")),
            pa.array(self._types, type=pa.int32()),
        ]
        if self._include_headers:
            arrays.append(pa.array(self._headers, type=_HEADERS))
        for column in (self._keys, self._values, self._offsets, self._timestamps, self._types, self._headers):
            column.clear()
        return pa.RecordBatch.from_arrays(arrays, schema=_SCHEMA_WITH_HEADERS if self._include_headers else _SCHEMA)


def arrow_batches(rows: Iterable[Row], include_headers: bool) -> Iterator[pa.RecordBatch]:
    """Rows as ``kafka_reader`` gives them, as Arrow record batches of the source's schema."""
    schema = _SCHEMA_WITH_HEADERS if include_headers else _SCHEMA
    it = iter(rows)
    while chunk := list(islice(it, ARROW_BATCH_ROWS)):
        columns = list(zip(*chunk, strict=True))
        arrays = [pa.array(column, type=field.type) for column, field in zip(columns, schema, strict=True)]
        yield pa.RecordBatch.from_arrays(arrays, schema=schema)
