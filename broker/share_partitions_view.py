"""What the share data APIs (ShareFetch, ShareAcknowledge) and the share sessions need of the share partitions.

The share partitions themselves (record states, locks, their durable share stream) are ``broker/share/``: its
``registry.SharePartitions`` (every share partition this broker leads) and ``share_partition.SharePartition`` (one
group on one topic partition), with the value types ``AckBatch``, ``AcquiredRange`` and ``ShareFetched``. The
sessions and handlers code against exactly those names, through the Protocols below, so that they type-check and
are tested on their own while that package is written in parallel.

TODO(lead): once ``broker/share/`` is merged, replace this module's body by re-exports::

    from broker.share.registry import SharePartitions
    from broker.share.share_partition import AckBatch, AcquiredRange, ShareFetched, SharePartition

(the three value classes below are stand-ins with the same names and fields, only so this branch runs before that
package exists; the Protocols then are satisfied by the real classes).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from kio.schema.errors import ErrorCode

from wire.errors import KafkaError


@dataclass(frozen=True, slots=True)
class AckBatch:
    """Offsets ``first_offset``..``last_offset`` (inclusive) acknowledged with ``types``: one type for the whole
    range, or one per offset (Kafka's AcknowledgeType: 0 GAP, 1 ACCEPT, 2 RELEASE, 3 REJECT; 4 RENEW from v2)."""

    first_offset: int
    last_offset: int
    types: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class AcquiredRange:
    """Records ``first_offset``..``last_offset`` acquired by the fetching member, delivered ``delivery_count``
    times (this delivery included)."""

    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class ShareFetched:
    """One share partition's answer to a fetch: the record batches holding the acquired records, the acquired
    ranges, and a Kafka error code (0: none)."""

    records: bytes | None
    acquired: list[AcquiredRange] = field(default_factory=list)
    error: int = 0


class SharePartition(Protocol):
    """One share group on one topic partition, on the partition's leader."""

    @property
    def group_id(self) -> str: ...

    @property
    def topic(self) -> str: ...

    @property
    def topic_id(self) -> uuid.UUID: ...

    @property
    def partition(self) -> int: ...

    async def fetch(self, member_id: str, max_bytes: int, max_records: int, now_ms: int) -> ShareFetched:
        """Acquires available records for the member (at most ``max_records``, about ``max_bytes``)."""
        ...

    async def acknowledge(self, member_id: str, batches: Sequence[AckBatch], now_ms: int) -> int:
        """Applies the member's acknowledgements, durably; a Kafka error code (0: done), nothing changed on error."""
        ...

    async def release_member(self, member_id: str, now_ms: int) -> None:
        """The member's acquired records become available again (its share session closed or went away)."""
        ...

    def available(self) -> bool: ...

    def acquisition_lock_timeout_ms(self) -> int: ...


class SharePartitions(Protocol):
    """Every share partition this broker leads."""

    async def get(self, group_id: str, topic_id: uuid.UUID, partition: int) -> SharePartition:
        """The share partition, loaded or created; raises ``KafkaError`` (UNKNOWN_TOPIC_ID,
        NOT_LEADER_OR_FOLLOWER, ...) when this broker cannot serve it."""
        ...

    def wait_for_change(self) -> Awaitable[None]:
        """Completes at the next append to a share-fetched partition, release or lock time-out (ShareFetch's long
        poll). Registered when called, so a change between the call and the await is not missed."""
        ...


class UnwiredSharePartitions:
    """TODO(lead): the stand-in the broker holds until ``broker.share.registry.SharePartitions`` is merged (with
    share groups disabled, so the handlers answer UNSUPPORTED_VERSION before reaching it)."""

    async def get(self, group_id: str, topic_id: uuid.UUID, partition: int) -> SharePartition:
        raise KafkaError(ErrorCode.unknown_server_error, "share partitions are not wired into this broker")

    def wait_for_change(self) -> Awaitable[None]:
        return asyncio.get_running_loop().create_future()
