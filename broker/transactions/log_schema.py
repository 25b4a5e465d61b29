"""Kafka's key/value schemas for the records of ``__transaction_state``.

The records are byte for byte Kafka's ``TransactionLogKey`` (version 0: the transactional id) and
``TransactionLogValue`` (version 0, and the flexible version 1 that only adds tagged fields), each prefixed with
its int16 version, so the topic reads like a Kafka cluster's (``kafka-dump-log --transaction-log-decoder``). We
write value version 0, which every Kafka version reads, and read both. A record with a null value is a tombstone:
the transactional id expired, and compaction eventually drops it altogether.

Version 0 keeps neither the last producer id nor the last epoch: a coordinator that loads an id knows only its
current producer id and epoch. A transaction ended by a transactions v2 client (KIP-890 part 2) is written as
version 1 with Kafka's tagged fields PreviousProducerId (0), NextProducerId (1) and ClientTransactionVersion (2),
so a coordinator that takes it over writes its markers as v2 ones and moves to the next producer id when the epoch
was exhausted.

The partition of an id is Kafka's ``abs(String.hashCode) % partitions`` (``wire.stored_schema.partition_for``, the
group coordinator's computation too).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from broker.transactions.state import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, TopicPartition, TxnState, TxnTransit
from wire.stored_schema import SchemaError, SchemaReader, array_length, partition_for, string, uvarint

__all__ = [
    "KEY_VERSION",
    "VALUE_VERSION",
    "SchemaError",
    "decode_key",
    "decode_value",
    "encode_key",
    "encode_value",
    "partition_for",
    "value_version",
]

KEY_VERSION = 0
VALUE_VERSION = 0
_FLEXIBLE_VALUE_VERSION = 1
_TAG_PREVIOUS_PRODUCER_ID = 0
_TAG_NEXT_PRODUCER_ID = 1
_TAG_CLIENT_VERSION = 2

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


def encode_key(transactional_id: str) -> bytes:
    return _I16.pack(KEY_VERSION) + string(transactional_id, flexible=False)


def decode_key(data: bytes) -> str:
    reader = SchemaReader(data, "__transaction_state key")
    version = reader.i16()
    if version != KEY_VERSION:
        raise SchemaError(f"__transaction_state key: unknown version {version}")
    return reader.string()


def _grouped(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        by_topic.setdefault(topic, []).append(partition)
    return by_topic


def encode_value(value: TxnTransit, version: int = VALUE_VERSION) -> bytes:
    """A ``TransactionLogValue``; Empty is written with a null partition list, as Kafka writes it."""
    if version not in (0, _FLEXIBLE_VALUE_VERSION):
        raise SchemaError(f"__transaction_state value: cannot write version {version}")
    if value.state is TxnState.EMPTY and value.partitions:
        raise SchemaError("__transaction_state value: an Empty transaction cannot have partitions")
    flexible = version >= _FLEXIBLE_VALUE_VERSION
    out = bytearray(_I16.pack(version))
    out += _I64.pack(value.producer_id)
    out += _I16.pack(value.producer_epoch)
    out += _I32.pack(value.timeout_ms)
    out += _I8.pack(value.state.byte)
    if value.state is TxnState.EMPTY:
        out += array_length(None, flexible=flexible)
    else:
        grouped = _grouped(value.partitions)
        out += array_length(len(grouped), flexible=flexible)
        for topic, partitions in grouped.items():
            out += string(topic, flexible=flexible)
            out += array_length(len(partitions), flexible=flexible)
            for partition in partitions:
                out += _I32.pack(partition)
            if flexible:
                out += uvarint(0)  # tagged fields of PartitionsSchema
    out += _I64.pack(value.txn_last_update_ms)
    out += _I64.pack(value.txn_start_ms)
    if flexible:
        tagged = [(tag, data) for tag, data, default in (
            (_TAG_PREVIOUS_PRODUCER_ID, _I64.pack(value.last_producer_id), value.last_producer_id == NO_PRODUCER_ID),
            (_TAG_NEXT_PRODUCER_ID, _I64.pack(value.next_producer_id), value.next_producer_id == NO_PRODUCER_ID),
            (_TAG_CLIENT_VERSION, _I16.pack(value.client_transaction_version), value.client_transaction_version == 0),
        ) if not default]
        out += uvarint(len(tagged))
        for tag, data in tagged:
            out += uvarint(tag) + uvarint(len(data)) + data
    return bytes(out)


def value_version(value: TxnTransit) -> int:
    """The version to write ``value`` in: 1 when it carries what only version 1 can (a v2 client's transaction),
    else 0, which every Kafka version reads."""
    return _FLEXIBLE_VALUE_VERSION if value.client_transaction_version >= 2 else VALUE_VERSION


def decode_value(data: bytes) -> TxnTransit:
    version = SchemaReader(data, "__transaction_state value").i16()
    if version not in (0, _FLEXIBLE_VALUE_VERSION):
        raise SchemaError(f"__transaction_state value: unknown version {version}")
    flexible = version >= _FLEXIBLE_VALUE_VERSION
    reader = SchemaReader(data, f"__transaction_state value v{version}", flexible=flexible)
    reader.pos = 2
    producer_id = reader.i64()
    epoch = reader.i16()
    timeout_ms = reader.i32()
    status = data[reader.pos] if reader.pos < len(data) else None
    if status is None:
        raise SchemaError(f"__transaction_state value v{version}: truncated at byte {reader.pos}")
    reader.pos += 1
    try:
        state = TxnState.from_byte(_I8.unpack(bytes([status]))[0])
    except ValueError as exc:
        raise SchemaError(f"__transaction_state value v{version}: {exc}") from None
    count = reader.uvarint() - 1 if flexible else reader.i32()
    partitions: set[TopicPartition] = set()
    for _ in range(max(count, 0)):
        topic = reader.string()
        for _ in range(reader.array_length()):
            partitions.add((topic, reader.i32()))
        reader.skip_tagged_fields()
    last_update = reader.i64()
    start = reader.i64()
    tagged = reader.tagged_fields()

    def tagged_int(tag: int, layout: struct.Struct, default: int) -> int:
        data = tagged.get(tag)
        if data is None:
            return default
        if len(data) != layout.size:
            raise SchemaError(f"__transaction_state value v{version}: tagged field {tag} of {len(data)} bytes")
        return int(layout.unpack(data)[0])

    return TxnTransit(
        producer_id=producer_id,
        last_producer_id=tagged_int(_TAG_PREVIOUS_PRODUCER_ID, _I64, NO_PRODUCER_ID),
        next_producer_id=tagged_int(_TAG_NEXT_PRODUCER_ID, _I64, NO_PRODUCER_ID),
        client_transaction_version=tagged_int(_TAG_CLIENT_VERSION, _I16, 0),
        producer_epoch=epoch,
        last_producer_epoch=NO_PRODUCER_EPOCH,
        timeout_ms=timeout_ms,
        state=state,
        partitions=frozenset(partitions),
        txn_start_ms=start,
        txn_last_update_ms=last_update,
    )
