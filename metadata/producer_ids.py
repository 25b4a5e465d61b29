"""Producer id blocks: the controller's side of AllocateProducerIds (Kafka's api key 67), sans-I/O.

Idempotent producers are told apart by their producer id, so no two brokers may ever hand out the same one. A
broker asks the active controller for a block; the controller answers with the block that starts at the image's
``next_producer_id`` and commits a ``ProducerIdsRecord`` moving it past the block before answering. Every write of
the active controller is serialized and replicated, so concurrent requests (from any brokers, through any
controller failover) get disjoint blocks, and a block once answered is never answered again.

Clusters from before this record reserved blocks with a read-then-write of the KV entry :func:`legacy_kv_key`
(the first id of the next unreserved block). The first allocation starts at or above that entry, so an upgraded
cluster does not hand out an id one of its brokers already used.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from metadata.cluster_records import ProducerIdsRecord
from metadata.image import MetadataImage
from storage.namespace import namespace_for

BLOCK_SIZE = 1000
"""Ids per block (Kafka's ``ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE``)."""

MAX_PRODUCER_ID = (1 << 63) - 1

_LEGACY_VALUE = struct.Struct(">q")


class ProducerIdsExhaustedError(Exception):
    """The 63-bit producer id space has no room for another block."""


@dataclass(frozen=True, slots=True)
class ProducerIdBlock:
    """Ids ``[start, start + length)`` belong to the broker that was given this block."""

    start: int
    length: int

    @property
    def end(self) -> int:
        return self.start + self.length


def legacy_kv_key(cluster_id: str) -> str:
    """Where clusters before ``ProducerIdsRecord`` kept the first id of their next unreserved block (in the
    cluster's KV namespace)."""
    return f"{namespace_for(cluster_id)}/producer_ids"


def decode_legacy_floor(value: bytes | None) -> int:
    """The legacy KV entry's value (a big-endian i64); 0 when absent or not 8 bytes."""
    if value is None or len(value) != _LEGACY_VALUE.size:
        return 0
    return max(0, int(_LEGACY_VALUE.unpack(value)[0]))


def encode_legacy_floor(next_producer_id: int) -> bytes:
    """The legacy entry's encoding (what clusters before ``ProducerIdsRecord`` wrote; tests of upgrades use it)."""
    return _LEGACY_VALUE.pack(next_producer_id)


def next_block(
    image: MetadataImage, broker_id: int, broker_epoch: int, legacy_floor: int = 0, block_size: int = BLOCK_SIZE
) -> tuple[ProducerIdBlock, ProducerIdsRecord]:
    """The block broker ``broker_id`` gets now and the record that hands it out (append it before answering)."""
    if block_size <= 0:
        raise ValueError(f"producer id block size must be positive, got {block_size}")
    start = max(image.producer_ids.next_producer_id, legacy_floor)
    if start > MAX_PRODUCER_ID - block_size:
        raise ProducerIdsExhaustedError(
            f"no producer id block left for broker {broker_id}: the next block would start at {start}"
        )
    block = ProducerIdBlock(start, block_size)
    return block, ProducerIdsRecord(broker_id, broker_epoch, block.end)


def was_allocated(image: MetadataImage, producer_id: int) -> bool:
    """Whether ``producer_id`` lies in a block some broker was given (as of ``image``)."""
    return 0 <= producer_id < image.producer_ids.next_producer_id
