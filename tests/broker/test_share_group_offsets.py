"""DescribeShareGroupOffsets, AlterShareGroupOffsets and DeleteShareGroupOffsets on the wire, and the share-state
requests between brokers they are built on, against an in-process broker.

The share partitions (H-state's ``SharePartitions``) and the share group membership (H-members') are being written
beside this; the broker's two seams (``ShareStateStore``, ``ShareGroupStates``) are given the small in-memory stand-ins
below, so what is tested is everything between the client's bytes and those seams: Kafka's group rules, routing to
each partition's leader (in-process here, and over the internal APIs when the leader is another broker), lag from
the real high watermark, and the error codes a user sees.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Collection
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from kio.schema.errors import ErrorCode

from broker.broker_context import BrokerContext
from broker.share.offsets_admin import GroupState
from broker.share.state_rpc import ShareStateAccess, StateSummary
from broker.transactions.peers import Peers
from node.process import Node
from settings.server import ServerConfig
from testkit.node_process import WireClient, default_overrides
from testkit.waiting import eventually_async
from wire import codec, schema

TOPIC = "share-offsets"
RECORDS = 10
GROUP = "share-offsets-group"


class MemoryShareState:
    """Stands in for the broker's SharePartitions: each (group, topic id, partition)'s start offset and epochs."""

    def __init__(self) -> None:
        self.states: dict[tuple[str, uuid.UUID, int], tuple[int, int, int]] = {}
        #: Offsets past the start already acknowledged, where a test says so (else none).
        self.delivery_complete: dict[tuple[str, uuid.UUID, int], int] = {}

    async def summary(self, group_id: str, topic_id: uuid.UUID, partition: int) -> StateSummary | None:
        key = (group_id, topic_id, partition)
        state = self.states.get(key)
        if state is None:
            return None
        return (*state, self.delivery_complete.get(key, 0))

    async def reset(self, group_id: str, topic_id: uuid.UUID, partition: int, start_offset: int) -> None:
        _start, state_epoch, leader_epoch = self.states.get((group_id, topic_id, partition), (0, 0, 0))
        self.states[(group_id, topic_id, partition)] = (start_offset, state_epoch + 1, leader_epoch)

    async def delete(self, group_id: str, topic_id: uuid.UUID, partition: int) -> None:
        self.states.pop((group_id, topic_id, partition), None)


class MemoryShareGroups:
    """Stands in for the share group membership: which share groups exist, whether they have members, their topics."""

    def __init__(self) -> None:
        self.groups: dict[str, tuple[GroupState, tuple[str, ...]]] = {}
        #: Ids held by classic or consumer groups.
        self.other_types: set[str] = set()

    def share_group_state(self, group_id: str) -> GroupState | None:
        found = self.groups.get(group_id)
        return None if found is None else found[0]

    async def ensure_share_group(self, group_id: str) -> GroupState | None:
        if group_id in self.other_types:
            return None
        return self.groups.setdefault(group_id, ("empty", ()))[0]

    def share_group_topics(self, group_id: str) -> Collection[str]:
        return self.groups[group_id][1]


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    overrides = default_overrides(tmp_path / "node")
    started = Node(ServerConfig.load(None, [f"{k}={v}" for k, v in overrides.items()]))
    await started.start()
    try:
        bootstrap = f"127.0.0.1:{started.broker.server.bound_port}"
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(TOPIC, num_partitions=2, replication_factor=1)])
        finally:
            await admin.close()
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
        await producer.start()
        try:
            for i in range(RECORDS):
                await producer.send_and_wait(TOPIC, f"r{i}".encode(), partition=0)
        finally:
            await producer.stop()
        yield started
    finally:
        await started.stop()


@pytest.fixture
def store(node: Node) -> MemoryShareState:
    memory = MemoryShareState()
    node.broker.share_offsets.access.store = memory
    return memory


@pytest.fixture
def groups(node: Node) -> MemoryShareGroups:
    memory = MemoryShareGroups()
    node.broker.share_offsets.groups = memory
    return memory


def topic_id(node: Node, name: str = TOPIC) -> uuid.UUID:
    return node.broker.controller.image.topics_by_name[name].topic_id


async def call(node: Node, api_key: int, version: int, **fields: Any) -> Any:
    """One request on a fresh client connection (a blocking socket, so off the broker's event loop)."""

    def exchange() -> Any:
        with WireClient(node.broker.server.bound_port) as client:
            return client.request(schema.build(codec.request_class(api_key, version), **fields))

    return await asyncio.to_thread(exchange)


def describe_group(version: int, group_id: str, topics: dict[str, tuple[int, ...]] | None) -> Any:
    group_cls = schema.field_entity(codec.request_class(90, version), "groups")
    return schema.build(
        group_cls,
        group_id=group_id,
        topics=None if topics is None else tuple(
            schema.build_nested(group_cls, "topics", topic_name=name, partitions=parts)
            for name, parts in topics.items()
        ),
    )


def partitions_of(group: Any) -> dict[tuple[str, int], tuple[int, int, int, ErrorCode]]:
    """{(topic, partition): (start offset, leader epoch, lag, error)} of one described group."""
    return {
        (t.topic_name, p.partition_index): (p.start_offset, p.leader_epoch, getattr(p, "lag", None), p.error_code)
        for t in group.topics
        for p in t.partitions
    }


async def describe(node: Node, topics: dict[str, tuple[int, ...]] | None, version: int = 1,
                   group_id: str = GROUP) -> Any:
    [group] = (await call(node, 90, version, groups=(describe_group(version, group_id, topics),))).groups
    return group


def alter_topics(wanted: dict[str, dict[int, int]]) -> tuple[Any, ...]:
    topic_cls = schema.field_entity(codec.request_class(91, 0), "topics")
    return tuple(
        schema.build(topic_cls, topic_name=name, partitions=tuple(
            schema.build_nested(topic_cls, "partitions", partition_index=p, start_offset=o) for p, o in parts.items()
        ))
        for name, parts in wanted.items()
    )


def delete_topics(*names: str) -> tuple[Any, ...]:
    return tuple(schema.build_nested(codec.request_class(92, 0), "topics", topic_name=n) for n in names)


async def test_describe_reports_start_offsets_and_lag(
    node: Node, store: MemoryShareState, groups: MemoryShareGroups
) -> None:
    groups.groups[GROUP] = ("non-empty", (TOPIC,))
    store.states[(GROUP, topic_id(node), 0)] = (4, 1, 0)

    group = await describe(node, {TOPIC: (0, 1), "no-such-topic": (0,)})
    assert group.error_code == ErrorCode.none
    assert partitions_of(group) == {
        (TOPIC, 0): (4, 0, RECORDS - 4, ErrorCode.none),  # lag: the high watermark minus the start offset
        (TOPIC, 1): (-1, 0, -1, ErrorCode.none),  # no state there yet
        ("no-such-topic", 0): (-1, 0, -1, ErrorCode.none),  # as Kafka: no data, not an error
    }
    ids = {t.topic_name: t.topic_id for t in group.topics}
    assert ids[TOPIC] == topic_id(node)
    # v0 (Kafka 4.1's admin client) has no lag; no topics means every share partition of the group with state
    v0 = await describe(node, None, version=0)
    assert partitions_of(v0) == {(TOPIC, 0): (4, 0, None, ErrorCode.none)}


async def test_unknown_groups_are_not_found(node: Node, store: MemoryShareState, groups: MemoryShareGroups) -> None:
    groups.other_types.add("a-consumer-group")
    for group_id in ("never-made", "a-consumer-group"):
        described = await describe(node, {TOPIC: (0,)}, group_id=group_id)
        assert (described.error_code, described.topics) == (ErrorCode.group_id_not_found, ())
        deleted = await call(node, 92, 0, group_id=group_id, topics=delete_topics(TOPIC))
        assert (deleted.error_code, deleted.responses) == (ErrorCode.group_id_not_found, ())
    altered = await call(node, 91, 0, group_id="a-consumer-group", topics=alter_topics({TOPIC: {0: 1}}))
    assert (altered.error_code, altered.responses) == (ErrorCode.group_id_not_found, ())
    assert store.states == {}


async def test_altering_a_group_that_does_not_exist_makes_it(
    node: Node, store: MemoryShareState, groups: MemoryShareGroups
) -> None:
    """Kafka 4.2: offsets may be set before a share group is first used."""
    response = await call(node, 91, 0, group_id="not-yet", topics=alter_topics({TOPIC: {0: 5}}))
    assert response.error_code == ErrorCode.none
    assert groups.share_group_state("not-yet") == "empty"
    described = await describe(node, {TOPIC: (0,)}, group_id="not-yet")
    assert partitions_of(described) == {(TOPIC, 0): (5, 0, RECORDS - 5, ErrorCode.none)}


async def test_while_share_groups_are_off_the_apis_are_unsupported(
    node: Node, store: MemoryShareState, groups: MemoryShareGroups
) -> None:
    groups.groups[GROUP] = ("empty", (TOPIC,))
    node.broker.share_offsets.enabled = lambda: False
    assert (await describe(node, {TOPIC: (0,)})).error_code == ErrorCode.unsupported_version
    altered = await call(node, 91, 0, group_id=GROUP, topics=alter_topics({TOPIC: {0: 1}}))
    assert altered.error_code == ErrorCode.unsupported_version
    deleted = await call(node, 92, 0, group_id=GROUP, topics=delete_topics(TOPIC))
    assert deleted.error_code == ErrorCode.unsupported_version
    assert store.states == {}


async def test_a_group_no_share_group_has_is_unknown(node: Node) -> None:
    """With the broker's own share group membership (no stand-in): once the coordinator is up, a group id no share
    group has answers GROUP_ID_NOT_FOUND."""

    async def coordinator() -> ErrorCode:
        found = await call(node, 10, 4, key_type=0, coordinator_keys=(GROUP,))
        return ErrorCode(found.coordinators[0].error_code)

    await eventually_async(coordinator, until=lambda e: e == ErrorCode.none, timeout=20, what="the coordinator")
    described = await describe(node, {TOPIC: (0,)})
    assert described.error_code == ErrorCode.group_id_not_found


async def test_offsets_are_altered_only_while_the_group_is_empty(
    node: Node, store: MemoryShareState, groups: MemoryShareGroups
) -> None:
    groups.groups[GROUP] = ("non-empty", (TOPIC,))
    store.states[(GROUP, topic_id(node), 0)] = (4, 1, 0)
    refused = await call(node, 91, 0, group_id=GROUP, topics=alter_topics({TOPIC: {0: 8}}))
    assert refused.error_code == ErrorCode.non_empty_group
    assert store.states[(GROUP, topic_id(node), 0)] == (4, 1, 0)

    groups.groups[GROUP] = ("empty", (TOPIC,))
    response = await call(node, 91, 0, group_id=GROUP,
                          topics=alter_topics({TOPIC: {0: 8, 1: 0, 7: 3}, "no-such-topic": {0: 1}}))
    assert response.error_code == ErrorCode.none
    assert {(t.topic_name, p.partition_index): p.error_code for t in response.responses for p in t.partitions} == {
        (TOPIC, 0): ErrorCode.none,
        (TOPIC, 1): ErrorCode.none,
        (TOPIC, 7): ErrorCode.unknown_topic_or_partition,
        ("no-such-topic", 0): ErrorCode.unknown_topic_or_partition,
    }
    assert partitions_of(await describe(node, {TOPIC: (0, 1)})) == {
        (TOPIC, 0): (8, 0, RECORDS - 8, ErrorCode.none),
        (TOPIC, 1): (0, 0, 0, ErrorCode.none),
    }
    negative = await call(node, 91, 0, group_id=GROUP, topics=alter_topics({TOPIC: {0: -5}}))
    assert negative.responses[0].partitions[0].error_code == ErrorCode.invalid_request
    assert store.states[(GROUP, topic_id(node), 0)][0] == 8


async def test_offsets_are_deleted_only_while_the_group_is_empty(
    node: Node, store: MemoryShareState, groups: MemoryShareGroups
) -> None:
    groups.groups[GROUP] = ("non-empty", (TOPIC,))
    for partition in (0, 1):
        store.states[(GROUP, topic_id(node), partition)] = (2, 1, 0)
    refused = await call(node, 92, 0, group_id=GROUP, topics=delete_topics(TOPIC))
    assert refused.error_code == ErrorCode.non_empty_group
    assert len(store.states) == 2

    groups.groups[GROUP] = ("empty", (TOPIC,))
    response = await call(node, 92, 0, group_id=GROUP, topics=delete_topics(TOPIC, "no-such-topic"))
    assert response.error_code == ErrorCode.none
    assert {t.topic_name: t.error_code for t in response.responses} == {
        TOPIC: ErrorCode.none,
        "no-such-topic": ErrorCode.unknown_topic_or_partition,
    }
    assert store.states == {}


async def test_a_coordinator_reaches_the_leader_through_the_share_state_apis(
    node: Node, store: MemoryShareState
) -> None:
    """Seen from another broker (a coordinator with a node id of its own), every partition's leader is remote: the
    summary, the reset and the delete travel as ReadShareGroupStateSummary, InitializeShareGroupState and
    DeleteShareGroupState, and the high watermark as ListOffsets."""
    broker = node.broker
    elsewhere = BrokerContext(broker.node_id + 100, broker.cluster_id, broker.config, broker.controller)
    peers = Peers(elsewhere)
    remote = ShareStateAccess(elsewhere, broker.partitions, peers)
    try:
        store.states[(GROUP, topic_id(node), 0)] = (3, 2, 0)
        summaries = await remote.summaries(GROUP, [(TOPIC, 0), (TOPIC, 1)])
        assert (summaries[(TOPIC, 0)].start_offset, summaries[(TOPIC, 0)].lag) == (3, RECORDS - 3)
        assert (summaries[(TOPIC, 1)].start_offset, summaries[(TOPIC, 1)].lag) == (-1, -1)
        # records past the start already acknowledged are not lag (Kafka 4.2's delivery-complete count, v1)
        store.delivery_complete[(GROUP, topic_id(node), 0)] = 2
        summaries = await remote.summaries(GROUP, [(TOPIC, 0)])
        assert summaries[(TOPIC, 0)].lag == RECORDS - 3 - 2

        assert await remote.resets(GROUP, {(TOPIC, 1): 6}) == {(TOPIC, 1): ErrorCode.none}
        assert store.states[(GROUP, topic_id(node), 1)][0] == 6
        assert await remote.deletes(GROUP, [(TOPIC, 0), (TOPIC, 1)]) == dict.fromkeys(
            [(TOPIC, 0), (TOPIC, 1)], ErrorCode.none
        )
        assert store.states == {}
    finally:
        await peers.close()


async def test_the_leader_refuses_what_it_cannot_answer(node: Node, store: MemoryShareState) -> None:
    def topics(api_key: int, version: int, which: uuid.UUID, **fields: Any) -> tuple[Any, ...]:
        topic_cls = schema.field_entity(codec.request_class(api_key, version), "topics")
        part = schema.build_nested(topic_cls, "partitions", partition=0, **fields)
        return (schema.build(topic_cls, topic_id=which, partitions=(part,)),)

    def codes(response: Any) -> list[ErrorCode]:
        return [p.error_code for r in response.results for p in r.partitions]

    unknown = uuid.uuid4()
    for api_key, version, fields in ((87, 1, {"leader_epoch": -1}), (83, 0, {"start_offset": 1}), (86, 0, {})):
        asked = topics(api_key, version, unknown, **fields)
        response = await call(node, api_key, version, group_id=GROUP, topics=asked)
        assert codes(response) == [ErrorCode.unknown_topic_or_partition], api_key
    negative = await call(node, 83, 0, group_id=GROUP, topics=topics(83, 0, topic_id(node), start_offset=-3))
    assert codes(negative) == [ErrorCode.invalid_request]
    assert store.states == {}
