"""The record format of a partition's meta stream (DESIGN.md §4): ``magic 0x00 | key length i32 | key UTF-8 |
value``, one key/value entry per stream record, the last write of a key winning.

The broker keeps its partitions' meta streams (``broker.partition.meta_stream``) and the Spark source reads them to
find a partition's log stream in object storage (``spark_connector.direct_plan``); both decode with this module.
It lives in ``metadata``, the layer below both of them: its keys are a Kafka partition's state (the partition, its
log, leader epochs, producer snapshots), which ``storage`` knows nothing of, and ``spark_connector`` cannot import
``broker``.
"""
from __future__ import annotations

import struct

META_MAGIC = 0x00
_PREFIX = struct.Struct(">bi")

KEY_PARTITION = "PARTITION"
KEY_LOG = "LOG"
KEY_LEADER_EPOCH_CHECKPOINT = "LEADER_EPOCH_CHECKPOINT"
KEY_PRODUCER_SNAPSHOTS = "PRODUCER_SNAPSHOTS"


class MetaFormatError(ValueError):
    """A meta-stream record does not decode."""


def encode_entry(key: str, value: bytes) -> bytes:
    encoded = key.encode("utf-8")
    return _PREFIX.pack(META_MAGIC, len(encoded)) + encoded + value


def decode_entry(data: bytes) -> tuple[str, bytes]:
    if len(data) < _PREFIX.size:
        raise MetaFormatError(f"meta record of {len(data)} bytes is truncated")
    magic, key_len = _PREFIX.unpack_from(data, 0)
    if magic != META_MAGIC:
        raise MetaFormatError(f"unknown meta record magic {magic}")
    if key_len < 0 or _PREFIX.size + key_len > len(data):
        raise MetaFormatError(f"meta record key length {key_len} exceeds the record ({len(data)} bytes)")
    key = data[_PREFIX.size : _PREFIX.size + key_len].decode("utf-8")
    return key, data[_PREFIX.size + key_len :]
