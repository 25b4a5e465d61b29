"""The produce path's pure half (DESIGN.md §6 step 1): checking produced batches against the topic's config, and
rewriting their headers with the offsets and leader epoch the partition assigns (Kafka's LogValidator).

Checks of one batch on its own (magic, CRC-32C, sizes, the records of a compressed batch) live in
wire/batch_validation.py, and their refusals get Kafka's codes here; what is checked here depends on the partition:
``max.message.bytes``, ``cleanup.policy=compact`` (keys required), the timestamp bounds, who may write control
batches and transactional ones. The stateful half (producer state, the
lock that orders offset assignment, the stream append, the time index) is :mod:`.produce`.
"""

from __future__ import annotations

from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from broker.partition.log_config import LogConfig
from wire.batch_validation import (
    MAX_DECOMPRESSED_BYTES,
    CheckedBatch,
    RecordsTooLargeError,
    UndecompressableBatchError,
    check_batch,
)
from wire.compression import Compression
from wire.errors import KafkaError
from wire.record_batch import (
    LOG_APPEND_TIME,
    MAGIC_POS,
    MAGIC_V2,
    NO_TIMESTAMP,
    BatchHeader,
    CorruptBatchError,
    InvalidBatchError,
    iter_batches,
    parse_header,
    set_base_offset,
    set_create_time,
    set_log_append_time,
    set_partition_leader_epoch,
)


@dataclass(frozen=True, slots=True)
class AppendResult:
    base_offset: int
    last_offset: int
    log_append_time_ms: int  # -1 for CreateTime
    log_start_offset: int


@dataclass(frozen=True, slots=True)
class AssignedBatches:
    """Produced batches with their offsets assigned: ``payload`` is what the log stream stores."""

    payload: bytes
    #: The base offset given to each batch, in order.
    base_offsets: list[int]
    #: The offset after the last record: the log end offset once the payload is appended.
    next_offset: int


def validate_produce(
    records: bytes,
    config: LogConfig,
    *,
    where: str,
    origin: str,
    now_ms: int,
    transactional_id: str | None = None,
    max_decompressed: int = MAX_DECOMPRESSED_BYTES,
) -> list[BatchHeader]:
    """The headers of the batches in a produce request's ``records``, or the KafkaError a client expects.

    ``origin`` is ``"client"`` for a produce request; the broker's own writers (group coordinator, transaction
    markers) may write control batches and keyless records. ``now_ms`` is what timestamps are bounded against.
    A client's transactional batch needs the request's ``transactional_id`` (Kafka answers
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED without one) and a producer id. A compressed batch is decompressed into at
    most ``max_decompressed`` bytes: below :data:`MAX_DECOMPRESSED_BYTES`, a batch past it raises
    :class:`DecompressesFurther` (checked again with more room, see :mod:`.produce`)."""
    if len(records) > MAGIC_POS and records[MAGIC_POS] != MAGIC_V2:
        # An older message format: refused as Kafka refuses it in a Produce v3+ request (not retriable).
        raise KafkaError(ErrorCode.invalid_record, f"{where}: batches must be magic v2, not {records[MAGIC_POS]}")
    try:
        batches = list(iter_batches(records))
    except InvalidBatchError as exc:
        raise KafkaError(ErrorCode.corrupt_message, f"{where}: {exc}") from exc
    if not batches:
        raise KafkaError(ErrorCode.invalid_record, f"{where}: produce request has no record batches")
    headers: list[BatchHeader] = []
    for _, view in batches:
        if len(view) > config.max_message_bytes:
            raise KafkaError(
                ErrorCode.message_too_large,
                f"{where}: record batch of {len(view)} bytes exceeds max.message.bytes {config.max_message_bytes}",
            )
        checked = _checked(view, where, keys=config.compact and origin == "client", max_decompressed=max_decompressed)
        header = checked.header
        if header.is_control and origin == "client":
            raise KafkaError(ErrorCode.invalid_record, f"{where}: clients may not write control batches")
        if header.is_transactional and not header.has_producer_id:
            raise KafkaError(ErrorCode.invalid_record, f"{where}: a transactional batch needs a producer id")
        if header.is_transactional and origin == "client" and transactional_id is None:
            raise KafkaError(
                ErrorCode.transactional_id_authorization_failed,
                f"{where}: transactional records from producer {header.producer_id} without a transactional id",
            )
        if checked.records.keyless:
            # Compaction keeps the latest record per key, so a compacted topic refuses records without one.
            raise KafkaError(
                ErrorCode.invalid_record,
                f"{where}: compacted topic cannot accept a record without a key (cleanup.policy=compact)",
            )
        if header.timestamp_type == LOG_APPEND_TIME and origin == "client" and (
            config.log_append_time or header.max_timestamp < 0
        ):
            # Kafka's LogValidator: the broker, not the producer, stamps LogAppendTime. On a CreateTime topic such
            # a batch is checked as CreateTime and stored as it (assign_offsets); without timestamps it is refused.
            raise KafkaError(
                ErrorCode.invalid_timestamp, f"{where}: a producer may not set the timestamp type to LogAppendTime"
            )
        if not config.log_append_time:
            _check_timestamps(checked, config, where, now_ms)
        headers.append(header)
    if len(headers) > 1 and (origin == "client" or any(h.has_producer_id for h in headers)):
        # Kafka's LogValidator takes one v2 batch per partition and request, idempotent or not: the offsets, the
        # producer state and the answer are the batch's.
        raise KafkaError(
            ErrorCode.invalid_record, f"{where}: a produce request must hold exactly one record batch per partition"
        )
    return headers


def validation_bytes(records: bytes) -> int:
    """What :func:`validate_produce` works through, in bytes, for the produce path's choice between the event loop
    and its checking thread (at ``storage.offload``'s bound): a compressed batch is decompressed (to about 2-3 times
    its size: lz4 leaves real data at about 55%, zstd at 43%) and read, so it counts three times its size; a plain
    batch only has its records walked in place (0.24 ms per MiB) and counts as nothing, since a thread hop costs
    more."""
    return 0 if _plain(records) else 3 * len(records)


def _plain(records: bytes) -> bool:
    try:
        return parse_header(records).compression is Compression.NONE
    except (InvalidBatchError, ValueError):
        return True  # validate_produce answers with the precise error, at once


class DecompressesFurther(Exception):
    """A compressed batch decompresses past the room :func:`validate_produce` was given, which is less than a batch
    may take: it is to be checked again with :data:`MAX_DECOMPRESSED_BYTES`."""


def _checked(batch: memoryview, where: str, *, keys: bool, max_decompressed: int) -> CheckedBatch:
    """``check_batch`` with its refusals as the codes Kafka answers them with (``wire.batch_validation``)."""
    try:
        return check_batch(batch, keys=keys, max_decompressed=max_decompressed)
    except CorruptBatchError as exc:
        raise KafkaError(ErrorCode.corrupt_message, f"{where}: {exc}") from exc
    except UndecompressableBatchError as exc:
        # Kafka's record iterator wraps the codec's IOException in a KafkaException, which no code covers.
        raise KafkaError(ErrorCode.unknown_server_error, f"{where}: {exc}") from exc
    except RecordsTooLargeError as exc:
        if max_decompressed < MAX_DECOMPRESSED_BYTES:
            raise DecompressesFurther(where) from exc
        # A bound Kafka does not have (it streams the records): said as a size refusal, which a Java producer
        # answers by splitting the batch and sending the halves.
        raise KafkaError(
            ErrorCode.message_too_large, f"{where}: {exc} (a produced batch may decompress to {MAX_DECOMPRESSED_BYTES})"
        ) from exc
    except InvalidBatchError as exc:
        raise KafkaError(ErrorCode.invalid_record, f"{where}: {exc}") from exc


def _check_timestamps(checked: CheckedBatch, config: LogConfig, where: str, now_ms: int) -> None:
    """message.timestamp.before.max.ms / after.max.ms, checked on every record (a record in the middle of a batch
    may lie below its first one), as Kafka checks each record, and on the batch's max timestamp, which is what the
    partition stores and indexes."""
    header, records = checked.header, checked.records
    low, high = now_ms - config.timestamp_before_max_ms, now_ms + config.timestamp_after_max_ms
    for ts, which in (
        (records.earliest, f"record {records.earliest_at}"),
        (records.latest, f"record {records.latest_at}"),
        (header.max_timestamp, "the batch's max timestamp"),
    ):
        if ts != NO_TIMESTAMP and not low <= ts <= high:
            raise KafkaError(
                ErrorCode.invalid_timestamp,
                f"{where}: timestamp {ts} of {which} is out of range: it should be within [{low}, {high}] "
                "(message.timestamp.before.max.ms / message.timestamp.after.max.ms)",
            )


def assign_offsets(
    records: bytes, headers: list[BatchHeader], *, base_offset: int, leader_epoch: int, log_append_ms: int
) -> AssignedBatches:
    """Gives the validated batches of ``records`` consecutive offsets from ``base_offset`` and the leader epoch,
    and with ``log_append_ms >= 0`` (LogAppendTime) that timestamp.

    The payload is assembled by one join, so every produced byte is copied once: only each batch's first
    MAGIC_POS bytes (base offset, length, leader epoch: outside the CRC) are rewritten, in a small copy, unless the
    timestamp type changes checksummed bytes (the topic's LogAppendTime, or a producer's LogAppendTime flag on a
    CreateTime topic cleared) and the batch is copied whole to be rewritten."""
    view = memoryview(records)
    pieces: list[bytes | bytearray | memoryview] = []
    base_offsets: list[int] = []
    next_offset = base_offset
    pos = 0
    for header in headers:
        end = pos + header.size
        retype = log_append_ms >= 0 or header.timestamp_type == LOG_APPEND_TIME
        head = bytearray(view[pos : end if retype else pos + MAGIC_POS])
        set_base_offset(head, next_offset)
        set_partition_leader_epoch(head, leader_epoch)
        if retype:
            if log_append_ms >= 0:
                set_log_append_time(head, log_append_ms)
            else:
                set_create_time(head)
            pieces.append(head)
        else:
            pieces += (head, view[pos + MAGIC_POS : end])
        base_offsets.append(next_offset)
        next_offset += header.records_count
        pos = end
    if pos < len(records):
        pieces.append(view[pos:])
    return AssignedBatches(b"".join(pieces), base_offsets, next_offset)
