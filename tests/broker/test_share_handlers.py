"""ShareFetch (78) and ShareAcknowledge (79) handlers, in process over the real share partitions
(``broker.share.registry.SharePartitions``) of real partition logs on the storage engine (file WAL and objects under
tmp_path), every response encoded and decoded on the wire as a client reads it: sessions opened, moved on and
closed; records acquired, acknowledged piggy-backed and on their own, released when a session or its connection
ends; the long poll; Kafka's codes for hostile input (unknown session, wrong epoch, acknowledgements for unknown
partitions, malformed ranges, records not acquired or another member's) with the share state unchanged, as the
fetches and acknowledgements that follow show; authorization. Where a partition's leader is:
``test_share_fetch_leaders.py``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import itertools
import time
import uuid
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, cast

import pytest
from kio.schema.errors import ErrorCode

from broker.authorization import BrokerAuthorizer
from broker.handlers.context import ConnectionState, RequestContext
from broker.handlers.table import HANDLERS, serve_authorized
from broker.partition.log_config import LogConfig
from broker.partition.partition_log import PartitionLog
from broker.request_dispatcher import RequestDispatcher
from broker.services import BrokerServices
from broker.share.registry import SharePartitions
from broker.share_sessions import ShareSessions
from controller.decisions.acls import binding_record
from metadata.acl.binding import ANONYMOUS, AclBinding, AclOperation, PatternType, PermissionType, ResourceType
from metadata.cluster_records import PartitionRecord, RegisterBrokerRecord, TopicRecord
from metadata.controller_api import ControllerClient
from metadata.image import MetadataImage
from settings.endpoint import Endpoint
from settings.security import STANDARD_AUTHORIZER, ListenerSasl
from settings.share_groups import ShareGroupConfig
from storage.config import BucketURL, StorageConfig
from storage.engine import StorageEngine
from storage.metadata.state_machine import StreamMetadataStateMachine
from tests.broker.share.test_share_durability import share_config
from tests.broker.test_hostile_requests import _profiles, hostile
from wire import codec, schema
from wire.dispatch import Peer
from wire.metrics import ServerMetrics
from wire.record_batch import Record, build_batch, iter_records

TOPIC, SECRET, UNKNOWN = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
GROUP = "g"
LOCK_MS = 15_000
CONFIG = share_config(auto_offset_reset="earliest", record_lock_duration_ms=LOCK_MS)
BINDINGS = [
    AclBinding(ResourceType.TOPIC, "t", PatternType.LITERAL, ANONYMOUS, "*", AclOperation.ALL, PermissionType.ALLOW),
    AclBinding(ResourceType.GROUP, GROUP, PatternType.LITERAL, ANONYMOUS, "*", AclOperation.ALL, PermissionType.ALLOW),
]
IMAGE = MetadataImage("c").apply(
    [
        RegisterBrokerRecord(0, 1, (Endpoint("PLAINTEXT", "127.0.0.1", 9092),), fenced=False),
        RegisterBrokerRecord(1, 1, (Endpoint("PLAINTEXT", "127.0.0.2", 9093),), rack="r2", fenced=False),
        TopicRecord("t", str(TOPIC)),
        PartitionRecord(str(TOPIC), 0, (0,), (0,), 0, 0),
        PartitionRecord(str(TOPIC), 1, (0,), (0,), 0, 0),
        PartitionRecord(str(TOPIC), 2, (1,), (1,), 1, 3),  # led by broker 1
        TopicRecord("secret", str(SECRET)),
        PartitionRecord(str(SECRET), 0, (0,), (0,), 0, 0),
        *(binding_record(str(i), b) for i, b in enumerate(BINDINGS)),
    ],
    5,
)


@dataclass
class _Controller:
    image: MetadataImage = IMAGE


@dataclass
class _Config:
    fetch_max_bytes: int = 52_428_800


@dataclass
class _Broker:
    share_sessions: ShareSessions
    controller: _Controller = field(default_factory=_Controller)
    config: _Config = field(default_factory=_Config)


class _Led:
    """The partitions this broker (node 0) leads, as the partition manager answers for them: the open logs by
    topic id, the metadata image for the rest (partition 2 of ``t`` is led by node 1)."""

    node_id = 0

    def __init__(self, logs: dict[tuple[uuid.UUID, int], PartitionLog]) -> None:
        self.logs = logs

    @property
    def controller(self) -> ControllerClient:
        return cast(ControllerClient, _Controller())

    def get_by_id(self, topic_id: uuid.UUID, partition: int) -> PartitionLog | None:
        return self.logs.get((topic_id, partition))

    def open_partitions(self) -> list[PartitionLog]:
        return list(self.logs.values())

    async def wait_open(self, topic: str, partition: int, timeout: float) -> PartitionLog | None:
        return None  # every partition led here is open from the start


class Storage:
    """The storage engine and the open logs of the partitions node 0 leads; :meth:`node` builds brokers' share
    sessions over them."""

    def __init__(self, tmp_path: Path) -> None:
        self.metadata = StreamMetadataStateMachine()
        self.engine = StorageEngine(StorageConfig(
            data_buckets=(BucketURL(0, "file", str(tmp_path / "objects")),),
            wal_url=BucketURL(0, "file", str(tmp_path / "wal")),
            cluster_id="c", node_id=0, node_epoch=1,
        ), self.metadata)
        self.logs: dict[tuple[uuid.UUID, int], PartitionLog] = {}
        self.nodes: list[Node] = []

    async def start(self) -> None:
        await self.engine.start()
        for topic_id, name, partition in ((TOPIC, "t", 0), (TOPIC, "t", 1), (SECRET, "secret", 0)):
            self.logs[topic_id, partition] = await PartitionLog.open(
                streams=self.engine, kv=self.metadata, namespace="_fjord_test", topic=name, partition=partition,
                topic_id=topic_id, leader_epoch=0, config=LogConfig(),
            )

    async def stop(self) -> None:
        for node in self.nodes:
            await node.sessions.drain()
            await node.partitions.stop()
        for log in self.logs.values():
            await log.close()
        await self.engine.shutdown()

    def node(self, max_sessions: int = 100, *, acls: bool = False, enabled: bool = True,
             config: ShareGroupConfig = CONFIG) -> Node:
        node = Node(SharePartitions(_Led(self.logs), lambda _group: config), max_sessions, acls=acls,
                    enabled=enabled, lock_ms=config.record_lock_duration_ms)
        self.nodes.append(node)
        return node

    async def append(self, count: int, partition: int = 0, topic_id: uuid.UUID = TOPIC, *, batch: bool = False) -> None:
        """``count`` records appended to the partition: one-record batches, or one batch of them all."""
        log = self.logs[topic_id, partition]
        records = [Record(key=None, value=b"v%d" % (log.high_watermark + i)) for i in range(count)]
        for chunk in [records] if batch else [[r] for r in records]:
            await log.append(build_batch(chunk))


@pytest.fixture
async def storage(tmp_path: Path) -> AsyncIterator[Storage]:
    started = Storage(tmp_path)
    await started.start()
    try:
        yield started
    finally:
        await started.stop()


class Node:
    """One broker's share sessions over the real share partitions, and the client connections to it."""

    def __init__(self, partitions: SharePartitions, max_sessions: int, *, acls: bool, enabled: bool,
                 lock_ms: int = LOCK_MS) -> None:
        self.partitions = partitions
        self.sessions = ShareSessions(partitions, max_sessions=max_sessions,
                                      record_lock_duration_ms=lambda _g: lock_ms, enabled=lambda: enabled)
        self.broker = _Broker(self.sessions)
        #: The connections of :func:`others_get`'s consumers, kept open (a closed one releases its records).
        self.others: list[ConnectionState] = []
        config = {"authorizer.class.name": STANDARD_AUTHORIZER} if acls else {}
        self.authorizer = BrokerAuthorizer(config.get, lambda: IMAGE.acls)

    async def send(self, api_key: int, version: int, connection: ConnectionState, **fields: Any) -> Any:
        ctx = RequestContext(api_key=api_key, api_version=version, correlation_id=3, client_id="share",
                             client_host="127.0.0.1", broker=cast(BrokerServices, self.broker),
                             connection=connection, authorizer=self.authorizer)
        request = schema.build(codec.request_class(api_key, version), **fields)
        response = await serve_authorized(ctx, request, HANDLERS[api_key])
        frame = codec.encode_response(3, response)
        _, decoded = codec.decode_response(api_key, version, frame[4:])
        return decoded


Acks = dict[uuid.UUID, dict[int, list[tuple[int, int, tuple[int, ...]]]]]


def _topics(cls: type[Any], topics: Acks, batch_field: str = "acknowledgement_batches") -> tuple[Any, ...]:
    topic_cls = schema.field_entity(cls, "topics")
    part_cls = schema.field_entity(topic_cls, "partitions")
    batch_cls = schema.field_entity(part_cls, batch_field)
    return tuple(
        schema.build(topic_cls, topic_id=tid, partitions=tuple(
            schema.build(part_cls, partition_index=p, acknowledgement_batches=tuple(
                schema.build(batch_cls, first_offset=f, last_offset=last, acknowledge_types=types)
                for f, last, types in batches))
            for p, batches in parts.items()))
        for tid, parts in topics.items()
    )


async def fetch(node: Node, connection: ConnectionState, epoch: int, topics: Acks, *, version: int = 1,
                member: str = "m1", group: str = GROUP, forget: dict[uuid.UUID, list[int]] | None = None,
                **fields: Any) -> Any:
    cls = codec.request_class(78, version)
    forgotten = tuple(schema.build_nested(cls, "forgotten_topics_data", topic_id=t, partitions=tuple(ps))
                      for t, ps in (forget or {}).items())
    values: dict[str, Any] = {"max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "max_records": 500,
                              "batch_size": 500, **fields}
    return await node.send(78, version, connection, group_id=group, member_id=member, share_session_epoch=epoch,
                           topics=_topics(cls, topics), forgotten_topics_data=forgotten, **values)


async def acknowledge(node: Node, connection: ConnectionState, epoch: int, topics: Acks, *, version: int = 1,
                      member: str = "m1", **fields: Any) -> Any:
    cls = codec.request_class(79, version)
    return await node.send(79, version, connection, group_id=GROUP, member_id=member, share_session_epoch=epoch,
                           topics=_topics(cls, topics), **fields)


def parts(response: Any) -> dict[tuple[uuid.UUID, int], Any]:
    return {(t.topic_id, p.partition_index): p for t in response.responses for p in t.partitions}


def offsets(partition: Any) -> list[int]:
    return [record.offset for _, record in iter_records(partition.records or b"")]


def ranges(partition: Any) -> list[tuple[int, int, int]]:
    return [(r.first_offset, r.last_offset, r.delivery_count) for r in partition.acquired_records]


def code(response: Any, partition: int = 0, topic_id: uuid.UUID = TOPIC) -> ErrorCode:
    return cast(ErrorCode, parts(response)[topic_id, partition].error_code)


_others = itertools.count()


async def others_get(node: Node, partition: int = 0, topic_id: uuid.UUID = TOPIC) -> list[tuple[int, int, int]]:
    """What another consumer of the group acquires from the partition now (its session stays open, so what it
    got stays acquired)."""
    node.others.append(ConnectionState())
    got = await fetch(node, node.others[-1], 0, {topic_id: {partition: []}}, member=f"other-{next(_others)}")
    found = parts(got).get((topic_id, partition))
    return ranges(found) if found is not None else []


# -- the happy path -------------------------------------------------------------------------------------------------


async def test_open_fetch_acknowledge_piggy_backed_and_close(storage: Storage) -> None:
    node, conn = storage.node(), ConnectionState()
    await storage.append(5)
    opened = await fetch(node, conn, 0, {TOPIC: {0: [], 1: []}}, max_records=3)
    assert opened.error_code == ErrorCode.none
    assert schema.millis(opened.acquisition_lock_timeout) == LOCK_MS
    got = parts(opened)
    assert set(got) == {(TOPIC, 0), (TOPIC, 1)}  # a full response names every partition
    assert offsets(got[TOPIC, 0]) == [0, 1, 2] and ranges(got[TOPIC, 0]) == [(0, 2, 1)]
    assert ranges(got[TOPIC, 1]) == [] and got[TOPIC, 1].error_code == ErrorCode.none

    # Epoch 1: accept 0-1, release 2 (one type per offset), and acquire again.
    nxt = await fetch(node, conn, 1, {TOPIC: {0: [(0, 2, (1, 1, 2))]}})
    got = parts(nxt)
    assert set(got) == {(TOPIC, 0)}  # incremental: partition 1 has no news
    assert got[TOPIC, 0].acknowledge_error_code == ErrorCode.none
    assert ranges(got[TOPIC, 0]) == [(2, 2, 2), (3, 4, 1)]  # offset 2 redelivered, 3-4 new
    # 0-1 are acknowledged: not the member's to acknowledge any more.
    assert code(await acknowledge(node, conn, 2, {TOPIC: {0: [(0, 1, (1,))]}})) == ErrorCode.invalid_record_state

    # Closing with ShareAcknowledge -1: 2 rejected, 3-4 still held are released for others.
    closed = await acknowledge(node, conn, -1, {TOPIC: {0: [(2, 2, (3,))]}})
    assert closed.error_code == ErrorCode.none and code(closed) == ErrorCode.none
    assert node.sessions.cache.get(GROUP, "m1") is None
    assert await others_get(node) == [(3, 4, 2)]  # never 0-2 again


async def test_share_fetch_final_epoch_acknowledges_fetches_nothing_and_releases(storage: Storage) -> None:
    node, conn = storage.node(), ConnectionState()
    await storage.append(4)
    await fetch(node, conn, 0, {TOPIC: {0: []}})
    final = await fetch(node, conn, -1, {TOPIC: {0: [(0, 1, (1,))]}})
    assert final.error_code == ErrorCode.none
    got = parts(final)
    assert got[TOPIC, 0].acknowledge_error_code == ErrorCode.none and ranges(got[TOPIC, 0]) == []
    assert len(node.sessions.cache) == 0
    assert await others_get(node) == [(2, 3, 2)]


async def test_max_records_spans_partitions_and_the_turn_rotates(storage: Storage) -> None:
    node, conn = storage.node(), ConnectionState()
    await storage.append(4, partition=0)
    await storage.append(4, partition=1)
    first = parts(await fetch(node, conn, 0, {TOPIC: {0: [], 1: []}}, max_records=3))
    assert ranges(first[TOPIC, 0]) == [(0, 2, 1)] and ranges(first[TOPIC, 1]) == []
    second = parts(await fetch(node, conn, 1, {}, max_records=5))  # epoch 1: partition 1 goes first
    assert ranges(second[TOPIC, 1]) == [(0, 3, 1)] and ranges(second[TOPIC, 0]) == [(3, 3, 1)]
    third = parts(await fetch(node, conn, 2, {}, max_records=5))  # nothing left: no news, an empty response
    assert third == {}


async def test_long_poll_waits_for_records_and_returns_at_the_deadline(storage: Storage) -> None:
    node, conn = storage.node(), ConnectionState()
    await fetch(node, conn, 0, {TOPIC: {0: []}})
    started = time.monotonic()
    empty = await fetch(node, conn, 1, {}, max_wait=150, min_bytes=1)
    assert time.monotonic() - started >= 0.14 and parts(empty) == {}

    async def produce_later() -> None:
        await asyncio.sleep(0.05)
        await storage.append(2, batch=True)

    started = time.monotonic()
    writer = asyncio.create_task(produce_later())
    woken = await fetch(node, conn, 2, {}, max_wait=5_000, min_bytes=1)
    await writer
    assert time.monotonic() - started < 2
    assert ranges(parts(woken)[TOPIC, 0]) == [(0, 1, 1)]


async def test_records_acquired_during_a_long_poll_are_answered_before_their_locks_run_out(storage: Storage) -> None:
    """A fetch waiting for MinBytes holds what it acquired, locked from then: it answers within half the lock
    duration of its first acquisition, so the records are not released meanwhile, handed out again, or archived
    after the delivery limit while it waits (Kafka acquires only when a delayed fetch completes)."""
    node = storage.node(config=share_config(auto_offset_reset="earliest", record_lock_duration_ms=400))
    node.partitions.start()  # the lock timer
    conn = ConnectionState()
    await storage.append(3, batch=True)
    got = parts(await fetch(node, conn, 0, {TOPIC: {0: []}}, max_wait=3_000, min_bytes=1 << 20))
    assert ranges(got[TOPIC, 0]) == [(0, 2, 1)]
    assert await others_get(node) == []  # still this consumer's


async def test_acknowledgements_that_free_the_window_get_records_without_waiting(storage: Storage) -> None:
    # A window of 3 locks, full after the first fetch: the next one's acknowledgements free it, and it acquires at
    # once (their write is durable before the answer) rather than waiting out its MaxWaitMs.
    node = storage.node(config=share_config(auto_offset_reset="earliest", record_lock_duration_ms=LOCK_MS,
                                            partition_max_record_locks=3))
    conn = ConnectionState()
    await storage.append(7)
    assert ranges(parts(await fetch(node, conn, 0, {TOPIC: {0: []}}))[TOPIC, 0]) == [(0, 2, 1)]
    assert await others_get(node) == []  # the window is full
    started = time.monotonic()
    freed = parts(await fetch(node, conn, 1, {TOPIC: {0: [(0, 2, (1,))]}}, max_wait=30_000, min_bytes=1))
    assert time.monotonic() - started < 10  # far below MaxWaitMs
    assert freed[TOPIC, 0].acknowledge_error_code == ErrorCode.none
    assert ranges(freed[TOPIC, 0]) == [(3, 5, 1)]
    # A rejection frees the window too; what was accepted never comes back.
    rejected = parts(await fetch(node, conn, 2, {TOPIC: {0: [(3, 5, (3,))]}}, max_wait=30_000, min_bytes=1))
    assert rejected[TOPIC, 0].acknowledge_error_code == ErrorCode.none and ranges(rejected[TOPIC, 0]) == [(6, 6, 1)]


async def test_a_closed_connection_releases_its_members_records(storage: Storage) -> None:
    node = storage.node()
    await storage.append(3)
    conn: ConnectionState | None = ConnectionState()
    assert conn is not None
    assert ranges(parts(await fetch(node, conn, 0, {TOPIC: {0: []}}))[TOPIC, 0]) == [(0, 2, 1)]
    assert await others_get(node) == []  # held by m1
    del conn
    gc.collect()
    for _ in range(5):
        await asyncio.sleep(0)
    await node.sessions.drain()
    assert len(node.sessions.cache) == 1  # the other consumer's
    assert await others_get(node) == [(0, 2, 2)]


async def test_renew_needs_zero_limits_and_fetches_nothing(storage: Storage) -> None:
    node, conn = storage.node(), ConnectionState()
    await storage.append(3)
    await fetch(node, conn, 0, {TOPIC: {0: []}}, version=2, max_records=1)
    refused = await fetch(node, conn, 1, {TOPIC: {0: [(0, 0, (4,))]}}, version=2, is_renew_ack=True)
    assert refused.error_code == ErrorCode.invalid_request
    renewed = await fetch(node, conn, 1, {TOPIC: {0: [(0, 0, (1,))]}}, version=2, is_renew_ack=True,
                          max_bytes=0, min_bytes=0, max_records=0, max_wait=0)
    got = parts(renewed)[TOPIC, 0]
    assert got.acknowledge_error_code == ErrorCode.none and ranges(got) == []
    assert await others_get(node) == [(1, 2, 1)]  # 0 acknowledged, 1-2 never handed out


# -- hostile input: Kafka's codes, nothing changed ------------------------------------------------------------------


async def test_unknown_session_and_wrong_epochs(storage: Storage) -> None:
    node, conn = storage.node(), ConnectionState()
    await storage.append(3)
    for epoch in (1, -1):
        response = await fetch(node, conn, epoch, {TOPIC: {0: []}})
        assert response.error_code == ErrorCode.share_session_not_found and response.responses == ()
    assert (await acknowledge(node, conn, 1, {TOPIC: {0: [(0, 0, (1,))]}})).error_code == \
        ErrorCode.share_session_not_found

    opened = await fetch(node, conn, 0, {TOPIC: {0: []}})
    assert ranges(parts(opened)[TOPIC, 0]) == [(0, 2, 1)]  # nothing was acquired or settled before
    for epoch in (0, 5):  # acknowledging cannot open a session; a skipped epoch
        response = await acknowledge(node, conn, epoch, {TOPIC: {0: [(0, 2, (1,))]}})
        assert response.error_code == ErrorCode.invalid_share_session_epoch
    wrong = await fetch(node, conn, 7, {TOPIC: {0: [(0, 2, (1,))]}})
    assert wrong.error_code == ErrorCode.invalid_share_session_epoch and wrong.responses == ()
    assert await others_get(node) == []
    # The session is still at epoch 1, and m1 still holds 0-2.
    accepted = await acknowledge(node, conn, 1, {TOPIC: {0: [(0, 2, (1,))]}})
    assert accepted.error_code == ErrorCode.none and code(accepted) == ErrorCode.none


async def test_acknowledgements_in_the_opening_fetch_are_an_invalid_request(storage: Storage) -> None:
    node, conn = storage.node(), ConnectionState()
    await storage.append(2)
    response = await fetch(node, conn, 0, {TOPIC: {0: [(0, 0, (1,))]}})
    assert response.error_code == ErrorCode.invalid_request
    assert len(node.sessions.cache) == 0
    assert await others_get(node) == [(0, 1, 1)]


async def test_malformed_batches_unknown_partitions_and_foreign_records(storage: Storage) -> None:
    node, conn = storage.node(), ConnectionState()
    await storage.append(6, partition=0)
    await storage.append(2, partition=1)
    await fetch(node, conn, 0, {TOPIC: {0: [], 1: []}}, max_records=6)
    other = ConnectionState()
    assert ranges(parts(await fetch(node, other, 0, {TOPIC: {1: []}}, member="m2"))[TOPIC, 1]) == [(0, 1, 1)]
    cases: list[tuple[Acks, ErrorCode]] = [
        ({TOPIC: {0: [(3, 1, (1,))]}}, ErrorCode.invalid_request),  # first offset after last
        ({TOPIC: {0: [(0, 2, (1,)), (1, 3, (1,))]}}, ErrorCode.invalid_request),  # overlapping batches
        # Sharing one offset passes Kafka's check (first < previous last); the first batch settled it, so the
        # partition refuses the second, and with it the whole request.
        ({TOPIC: {0: [(0, 2, (1,)), (2, 3, (1,))]}}, ErrorCode.invalid_record_state),
        ({TOPIC: {0: [(3, 4, (1,)), (0, 1, (1,))]}}, ErrorCode.invalid_request),  # out of order
        ({TOPIC: {0: [(0, 2, (1, 1))]}}, ErrorCode.invalid_request),  # not one type per offset
        ({TOPIC: {0: [(0, 0, ())]}}, ErrorCode.invalid_request),  # no type
        ({TOPIC: {0: [(0, 0, (9,))]}}, ErrorCode.invalid_request),  # unknown type
        ({TOPIC: {0: [(0, 0, (4,))]}}, ErrorCode.invalid_request),  # RENEW before v2
        ({TOPIC: {0: [(0, 9, (1,))]}}, ErrorCode.invalid_request),  # past the acquired records (Kafka's code)
        ({TOPIC: {0: [(0, 1, (1,)), (6, 7, (1,))]}}, ErrorCode.invalid_request),  # a valid batch, then past them
        ({TOPIC: {1: [(0, 1, (1,))]}}, ErrorCode.invalid_record_state),  # another member's records
        ({TOPIC: {7: [(0, 0, (1,))]}}, ErrorCode.unknown_topic_or_partition),
        ({UNKNOWN: {0: [(0, 0, (1,))]}}, ErrorCode.unknown_topic_id),
        ({TOPIC: {2: [(0, 0, (1,))]}}, ErrorCode.not_leader_or_follower),
    ]
    epoch = 1
    for acks, expected in cases:
        (tid, by_partition), = acks.items()
        (index, _), = by_partition.items()
        answered = await acknowledge(node, conn, epoch, acks)
        assert answered.error_code == ErrorCode.none
        assert code(answered, index, tid) == expected, (acks, parts(answered))
        piggy = await fetch(node, conn, epoch + 1, acks, max_records=0)
        assert parts(piggy)[tid, index].acknowledge_error_code == expected, (acks, parts(piggy))
        epoch += 2
    # Nothing changed: nothing went back for others, and each member still holds all it had acquired.
    assert await others_get(node, 0) == [] and await others_get(node, 1) == []
    mine = await acknowledge(node, conn, epoch, {TOPIC: {0: [(0, 5, (1,))]}})
    theirs = await acknowledge(node, other, 1, {TOPIC: {1: [(0, 1, (1,))]}}, member="m2")
    assert code(mine) == ErrorCode.none and code(theirs, 1) == ErrorCode.none


async def test_a_refused_partition_does_not_stop_the_others(storage: Storage) -> None:
    node, conn = storage.node(), ConnectionState()
    await storage.append(2, partition=0)
    await storage.append(2, partition=1)
    await fetch(node, conn, 0, {TOPIC: {0: [], 1: []}})
    answered = await acknowledge(node, conn, 1, {TOPIC: {0: [(1, 0, (1,))], 1: [(0, 1, (1,))]}})
    assert code(answered, 0) == ErrorCode.invalid_request and code(answered, 1) == ErrorCode.none
    again = await acknowledge(node, conn, 2, {TOPIC: {0: [(0, 1, (1,))], 1: [(0, 1, (1,))]}})
    assert code(again, 0) == ErrorCode.none  # partition 0's records were still held
    assert code(again, 1) == ErrorCode.invalid_record_state  # partition 1's were acknowledged


async def test_member_id_limit_and_share_groups_disabled(storage: Storage) -> None:
    node, conn = storage.node(max_sessions=1), ConnectionState()
    for member in ("", "x" * 37):
        response = await fetch(node, conn, 0, {TOPIC: {0: []}}, member=member)
        assert response.error_code == ErrorCode.invalid_request
        assert (await acknowledge(node, conn, 1, {}, member=member)).error_code == ErrorCode.invalid_request
    await fetch(node, conn, 0, {TOPIC: {0: []}}, member="m1")
    started = time.monotonic()
    full = await fetch(node, ConnectionState(), 0, {TOPIC: {0: []}}, member="m2", max_wait=100)
    assert full.error_code == ErrorCode.share_session_limit_reached and time.monotonic() - started >= 0.09
    off = storage.node(enabled=False)
    assert (await fetch(off, conn, 0, {TOPIC: {0: []}})).error_code == ErrorCode.unsupported_version
    assert (await acknowledge(off, conn, 1, {})).error_code == ErrorCode.unsupported_version


async def test_authorization_group_then_topics(storage: Storage) -> None:
    node, conn = storage.node(acls=True), ConnectionState()
    await storage.append(1, topic_id=TOPIC)
    await storage.append(1, topic_id=SECRET)
    response = await fetch(node, conn, 0, {TOPIC: {0: []}, SECRET: {0: []}})
    got = parts(response)
    assert ranges(got[TOPIC, 0]) == [(0, 0, 1)]
    assert got[SECRET, 0].error_code == ErrorCode.topic_authorization_failed and ranges(got[SECRET, 0]) == []
    acked = await acknowledge(node, conn, 1, {SECRET: {0: [(0, 0, (1,))]}})
    assert code(acked, 0, SECRET) == ErrorCode.topic_authorization_failed

    cls = codec.request_class(78, 1)
    refused = await node.send(78, 1, conn, group_id="other", member_id="m1", share_session_epoch=0,
                              topics=_topics(cls, {TOPIC: {0: []}}), forgotten_topics_data=(), max_wait=0,
                              min_bytes=0, max_records=10, batch_size=10)
    assert refused.error_code == ErrorCode.group_authorization_failed and refused.responses == ()
    assert node.sessions.cache.get("other", "m1") is None
    # A broker without an authorizer over the same partitions: the secret record was never acquired, and the
    # refused group got no share state (it starts at the earliest offset, with delivery count 1).
    open_node = storage.node()
    assert await others_get(open_node, 0, SECRET) == [(0, 0, 1)]
    other_group = await fetch(open_node, ConnectionState(), 0, {TOPIC: {0: []}}, group="other")
    assert ranges(parts(other_group)[TOPIC, 0]) == [(0, 0, 1)]


def _aimed(entity: Any) -> Any:
    """The hostile request with every topic id the known topic's, so the sweep reaches past the id lookup."""
    changes: dict[str, object] = {}
    for f in dataclasses.fields(entity):
        value = getattr(entity, f.name)
        if f.name == "topic_id":
            changes[f.name] = TOPIC
        elif dataclasses.is_dataclass(value):
            changes[f.name] = _aimed(value)
        elif isinstance(value, tuple) and value and dataclasses.is_dataclass(value[0]):
            changes[f.name] = tuple(_aimed(v) for v in value)
    return dataclasses.replace(entity, **changes)


@pytest.mark.parametrize(("api_key", "version"), [(78, 1), (78, 2), (79, 1), (79, 2)])
async def test_hostile_field_values_get_kafka_codes(storage: Storage, api_key: int, version: int) -> None:
    """Every field at its extremes (test_hostile_requests' profiles): as sent, with every topic id the known
    topic's, and that again at the session's epoch with a valid member id, so the sweep reaches the
    acknowledgements and the acquisition. An encodable answer each time, never UNKNOWN_SERVER_ERROR."""
    node = storage.node()
    await storage.append(3)
    for n, profile in enumerate(_profiles("t")):
        raw = hostile(codec.request_class(api_key, version), profile)
        aimed = _aimed(raw)
        for m, request in enumerate((raw, aimed, aimed)):
            group, conn = f"sweep-{n}-{m}", ConnectionState()
            await fetch(node, conn, 0, {TOPIC: {0: []}}, group=group)
            if m == 2:  # at the session's epoch, with a valid member id
                session_fields: dict[str, object] = {"member_id": "m1", "group_id": group, "share_session_epoch": 1}
                if version >= 2 and api_key == 78:
                    session_fields["is_renew_ack"] = False
                request = dataclasses.replace(request, **session_fields)
            fields = {f.name: getattr(request, f.name) for f in dataclasses.fields(request)}
            response = await node.send(api_key, version, conn, **fields)
            codes = [response.error_code, *(p.error_code for t in response.responses for p in t.partitions)]
            assert ErrorCode.unknown_server_error not in codes, (profile.name, response)
            await node.sessions.drain()


@dataclass
class _SaslConfig:
    sasl: dict[str, ListenerSasl] = field(
        default_factory=lambda: {"SASL": ListenerSasl("SASL", ("PLAIN",), MappingProxyType({"u": "p"}))})
    tls: dict[str, object] = field(default_factory=dict)

    def value(self, key: str) -> object:
        return {"connections.max.reauth.ms": 0, "connection.failed.authentication.delay.ms": 0,
                "quota.window.num": 11, "quota.window.size.seconds": 1}.get(key)


async def test_a_closed_sasl_connection_releases_without_waiting_for_the_collector(storage: Storage) -> None:
    """A SASL connection's state holds its authentication; nothing in it points back at the state, so it goes (and
    its share sessions end) the moment the listener lets go of it, not at some later cycle collection."""
    node = storage.node()
    await storage.append(2)
    broker = _Broker(node.sessions, config=cast(_Config, _SaslConfig()))
    dispatcher = RequestDispatcher(cast(BrokerServices, broker), ServerMetrics())
    state: ConnectionState | None = dispatcher.connection_state()
    peer: Peer | None = Peer("127.0.0.1", 5555, "SASL", state=state)
    assert peer is not None and state is not None
    handshake = schema.build(codec.request_class(17, 1), mechanism="PLAIN")
    await dispatcher.dispatch(codec.encode_request(handshake, 1)[4:], peer)
    assert state.sasl is not None
    assert ranges(parts(await fetch(node, state, 0, {TOPIC: {0: []}}))[TOPIC, 0]) == [(0, 1, 1)]
    gc.disable()
    try:
        freed = weakref.ref(state)
        del state, peer
        assert freed() is None
        for _ in range(5):
            await asyncio.sleep(0)
        await node.sessions.drain()
        assert await others_get(node) == [(0, 1, 2)]
    finally:
        gc.enable()
