"""A small in-memory implementation of the share partitions seam (``broker.share.registry.SharePartitions``), ONLY
for the share handler tests while the real ``broker.share.registry.SharePartitions`` is written on another branch.

TODO(lead): switch ``tests/broker/test_share_handlers.py`` to the real share partitions once ``broker/share/`` is
merged, and delete this module.

It keeps Kafka's record states per offset (available, acquired by a member, acknowledged, archived) with a
delivery count, acquires in offset order, and refuses an acknowledgement wholesale (INVALID_RECORD_STATE) unless
every offset it names is acquired by that member (and named once), so the tests can see that a refused request
changed nothing.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from broker.share.share_partition import AckBatch, AcquiredRange, ShareFetched
from wire.errors import KafkaError
from wire.record_batch import Record, build_batch

AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = 0, 1, 2, 4
ACCEPT, RELEASE, REJECT = 1, 2, 3


@dataclass
class _Offset:
    batch: bytes
    state: int = AVAILABLE
    member: str | None = None
    deliveries: int = 0


@dataclass
class FakeSharePartition:
    group_id: str
    topic: str
    topic_id: uuid.UUID
    partition: int
    notify: Callable[[], None]
    log: list[_Offset] = field(default_factory=list)
    lock_ms: int = 15_000
    fetches: int = 0

    async def fetch(self, member_id: str, max_bytes: int, max_records: int, now_ms: int) -> ShareFetched:
        self.fetches += 1
        taken: list[int] = []
        size = 0
        for offset, rec in enumerate(self.log):
            if len(taken) >= max_records or (taken and size + len(rec.batch) > max_bytes):
                break
            if rec.state == AVAILABLE:
                rec.state, rec.member = ACQUIRED, member_id
                rec.deliveries += 1
                taken.append(offset)
                size += len(rec.batch)
        ranges: list[AcquiredRange] = []
        for offset in taken:
            count = self.log[offset].deliveries
            last = ranges[-1] if ranges else None
            if last is not None and last.last_offset == offset - 1 and last.delivery_count == count:
                ranges[-1] = AcquiredRange(last.first_offset, offset, count)
            else:
                ranges.append(AcquiredRange(offset, offset, count))
        return ShareFetched(b"".join(self.log[o].batch for o in taken), ranges)

    async def acknowledge(self, member_id: str, batches: Sequence[AckBatch], now_ms: int) -> int:
        planned: list[tuple[int, int]] = []
        for batch in batches:
            for offset in range(batch.first_offset, batch.last_offset + 1):
                rec = self.log[offset] if 0 <= offset < len(self.log) else None
                if rec is None or rec.state != ACQUIRED or rec.member != member_id or offset in dict(planned):
                    return int(ErrorCode.invalid_record_state)
                kind = batch.types[0] if len(batch.types) == 1 else batch.types[offset - batch.first_offset]
                if kind not in (0, ACCEPT, RELEASE, REJECT):
                    return int(ErrorCode.invalid_record_state)
                planned.append((offset, kind))
        for offset, kind in planned:
            rec = self.log[offset]
            rec.member = None
            rec.state = {ACCEPT: ACKNOWLEDGED, RELEASE: AVAILABLE}.get(kind, ARCHIVED)
        self.notify()
        return 0

    async def release_member(self, member_id: str, now_ms: int) -> None:
        for rec in self.log:
            if rec.state == ACQUIRED and rec.member == member_id:
                rec.state, rec.member = AVAILABLE, None
        self.notify()

    def available(self) -> bool:
        return any(rec.state == AVAILABLE for rec in self.log)

    def acquisition_lock_timeout_ms(self) -> int:
        return self.lock_ms

    def states(self) -> list[tuple[int, str | None]]:
        return [(rec.state, rec.member) for rec in self.log]


class FakeSharePartitions:
    """The share partitions of one broker leading every partition of ``topics`` except those in ``not_led``."""

    def __init__(self, topics: dict[uuid.UUID, tuple[str, int]]) -> None:
        self.topics = topics
        self.not_led: set[tuple[uuid.UUID, int]] = set()
        self.partitions: dict[tuple[str, uuid.UUID, int], FakeSharePartition] = {}
        self._waiters: list[asyncio.Future[None]] = []

    async def get(self, group_id: str, topic_id: uuid.UUID, partition: int) -> FakeSharePartition:
        topic = self.topics.get(topic_id)
        if topic is None:
            raise KafkaError(ErrorCode.unknown_topic_id, f"topic id {topic_id} is unknown")
        if (topic_id, partition) in self.not_led or not 0 <= partition < topic[1]:
            raise KafkaError(ErrorCode.not_leader_or_follower, f"not the leader of {topic[0]}-{partition}")
        return self.partition(group_id, topic_id, partition)

    def partition(self, group_id: str, topic_id: uuid.UUID, partition: int) -> FakeSharePartition:
        key = (group_id, topic_id, partition)
        if key not in self.partitions:
            self.partitions[key] = FakeSharePartition(group_id, self.topics[topic_id][0], topic_id, partition,
                                                      self._notify)
        return self.partitions[key]

    def append(self, group_id: str, topic_id: uuid.UUID, partition: int, count: int) -> None:
        """``count`` one-record batches appended to the partition, as the group sees them."""
        share_partition = self.partition(group_id, topic_id, partition)
        for _ in range(count):
            offset = len(share_partition.log)
            batch = build_batch([Record(key=None, value=b"v%d" % offset)], base_offset=offset)
            share_partition.log.append(_Offset(batch))
        self._notify()

    def _notify(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def wait_for_change(self) -> Awaitable[None]:
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        return waiter
