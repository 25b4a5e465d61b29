"""Group APIs on the wire, version by version, against a real broker process.

Real clients each speak one version of every API; these tests drive the older and the batched versions the
clients in tests/broker/test_groups_clients.py do not reach, and read back what the coordinator persisted in
``__consumer_offsets``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from kio.schema.errors import ErrorCode

from broker.groups.offsets_schema import (
    GroupKey,
    OffsetKey,
    decode_group_value,
    decode_key,
    decode_offset_value,
)
from testkit.node_process import BrokerProcess, WireClient, start_broker
from testkit.waiting import eventually
from tests.broker.coordinator import find_coordinator
from tests.topics import create_topic
from wire import codec, schema
from wire.stored_schema import partition_for

SUBSCRIPTION = b"\x00\x00\x00\x00\x00\x01\x00\x01t\xff\xff\xff\xff"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for the module (every test uses its own topic and group names); it must stop cleanly."""
    process = start_broker(tmp_path_factory.mktemp("groups"), {"group.initial.rebalance.delay.ms": "0"})
    try:
        yield process
    finally:
        assert process.stop() == 0, process.log_text()


def req(api_key: int, version: int, /, **fields: Any) -> Any:
    return schema.build(codec.request_class(api_key, version), **fields)


def nested(api_key: int, version: int, field_name: str, /, **fields: Any) -> Any:
    return schema.build_nested(codec.request_class(api_key, version), field_name, **fields)


def join(client: WireClient, version: int, group: str, member_id: str = "", **extra: Any) -> Any:
    protocols = (nested(11, version, "protocols", name="range", metadata=SUBSCRIPTION),)
    fields = {
        "group_id": group,
        "session_timeout": 10_000,
        "rebalance_timeout": 10_000,
        "member_id": member_id,
        "protocol_type": "consumer",
        "protocols": protocols,
        **extra,
    }
    return client.request(req(11, version, **fields))


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_find_coordinator_versions(node: BrokerProcess, wire: Callable[[int], WireClient]) -> None:
    client = wire(node.port)
    v3 = find_coordinator(client, "some-group")
    assert (v3.node_id, v3.host, v3.port) == (node.node_id, "127.0.0.1", node.port)
    v0 = client.request(req(10, 0, key="some-group"))
    assert (v0.error_code, v0.node_id, v0.port) == (ErrorCode.none, node.node_id, node.port)
    v4 = client.request(req(10, 4, key_type=0, coordinator_keys=("a", "b", "c")))
    assert [c.key for c in v4.coordinators] == ["a", "b", "c"]
    assert {(c.error_code, c.node_id, c.port) for c in v4.coordinators} == {(ErrorCode.none, node.node_id, node.port)}
    txn = client.request(req(10, 4, key_type=1, coordinator_keys=("my-txn",)))
    assert [(c.key, c.error_code, c.node_id, c.port) for c in txn.coordinators] == [
        ("my-txn", ErrorCode.none, node.node_id, node.port)
    ]
    bad = client.request(req(10, 3, key="x", key_type=7))
    assert bad.error_code == ErrorCode.invalid_request


def test_old_protocol_versions_run_a_whole_group_lifecycle(
    node: BrokerProcess, wire: Callable[[int], WireClient]
) -> None:
    client = wire(node.port)
    topic, group = unique("legacy"), unique("legacy-group")
    create_topic(client, topic, 2)
    find_coordinator(client, group)
    # JoinGroup v0: no MEMBER_ID_REQUIRED round trip, the session timeout doubles as rebalance timeout.
    joined = join(client, 0, group)
    assert joined.error_code == ErrorCode.none
    assert joined.generation_id == 1 and joined.leader == joined.member_id
    assert [m.member_id for m in joined.members] == [joined.member_id]
    assert bytes(joined.members[0].metadata) == SUBSCRIPTION
    member, generation = joined.member_id, joined.generation_id
    assignment = nested(14, 0, "assignments", member_id=member, assignment=b"my-share")
    synced = client.request(
        req(14, 0, group_id=group, generation_id=generation, member_id=member, assignments=(assignment,))
    )
    assert (synced.error_code, bytes(synced.assignment)) == (ErrorCode.none, b"my-share")
    assert client.request(req(12, 0, group_id=group, generation_id=generation, member_id=member)).error_code == 0
    stale = client.request(req(12, 0, group_id=group, generation_id=generation + 1, member_id=member))
    assert stale.error_code == ErrorCode.illegal_generation
    # OffsetCommit v2 with an explicit retention, read back with OffsetFetch v1 (per-partition errors only).
    partitions = (
        nested(
            8,
            2,
            "topics",
            name=topic,
            partitions=(
                schema.build_nested(
                    schema.field_entity(codec.request_class(8, 2), "topics"),
                    "partitions",
                    partition_index=1,
                    committed_offset=42,
                    committed_metadata="m",
                ),
            ),
        ),
    )
    committed = client.request(
        req(
            8,
            2,
            group_id=group,
            generation_id_or_member_epoch=generation,
            member_id=member,
            retention_time=86_400_000,
            topics=partitions,
        )
    )
    assert committed.topics[0].partitions[0].error_code == ErrorCode.none
    fetch_topic = nested(9, 1, "topics", name=topic, partition_indexes=(0, 1))
    fetched = client.request(req(9, 1, group_id=group, topics=(fetch_topic,)))
    by_partition = {
        p.partition_index: (p.committed_offset, p.metadata, p.error_code) for p in fetched.topics[0].partitions
    }
    assert by_partition == {0: (-1, "", ErrorCode.none), 1: (42, "m", ErrorCode.none)}
    left = client.request(req(13, 0, group_id=group, member_id=member))
    assert left.error_code == ErrorCode.none
    again = client.request(req(13, 0, group_id=group, member_id=member))
    assert again.error_code == ErrorCode.unknown_member_id


def test_join_errors_and_batched_leave(node: BrokerProcess, wire: Callable[[int], WireClient]) -> None:
    client = wire(node.port)
    group = unique("modern")
    find_coordinator(client, group)
    assert join(client, 9, "").error_code == ErrorCode.invalid_group_id
    # Flexible versions can carry ids longer than __consumer_offsets' int16-length strings can store.
    assert join(client, 9, "g" * 40_000).error_code == ErrorCode.invalid_group_id
    assert join(client, 9, group, session_timeout=100).error_code == ErrorCode.invalid_session_timeout
    assert join(client, 9, group, member_id="made-up").error_code == ErrorCode.unknown_member_id
    first = join(client, 9, group, reason="starting")
    assert first.error_code == ErrorCode.member_id_required and first.member_id
    joined = join(client, 9, group, member_id=first.member_id)
    assert joined.error_code == ErrorCode.none
    assert (joined.protocol_type, joined.protocol_name, joined.skip_assignment) == ("consumer", "range", False)
    other = nested(11, 9, "protocols", name="sticky", metadata=b"")
    mismatch = join(client, 9, group, member_id="", protocols=(other,))
    assert mismatch.error_code == ErrorCode.inconsistent_group_protocol
    members = (
        nested(13, 5, "members", member_id=joined.member_id, group_instance_id=None, reason="done"),
        nested(13, 5, "members", member_id="ghost", group_instance_id=None),
        nested(13, 5, "members", member_id="", group_instance_id="never-joined"),
    )
    left = client.request(req(13, 5, group_id=group, members=members))
    assert left.error_code == ErrorCode.none
    assert [m.error_code for m in left.members] == [
        ErrorCode.none,
        ErrorCode.unknown_member_id,
        ErrorCode.unknown_member_id,
    ]
    described = client.request(req(15, 5, groups=(group, unique("unknown")), include_authorized_operations=True))
    assert [g.group_state for g in described.groups] == ["Empty", "Dead"]
    # READ, DELETE, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS: Kafka's AclEntry.supportedOperations(GROUP)
    assert described.groups[0].authorized_operations == (1 << 3) | (1 << 6) | (1 << 8) | (1 << 10) | (1 << 11)
    unfiltered = client.request(req(16, 4, states_filter=()))
    assert group in {g.group_id for g in unfiltered.groups}
    filtered = client.request(req(16, 4, states_filter=("stable",)))
    assert group not in {g.group_id for g in filtered.groups}
    empty = client.request(req(16, 4, states_filter=("EMPTY",)))
    assert [g.group_state for g in empty.groups if g.group_id == group] == ["Empty"]


def test_offset_commit_validation_and_batched_fetch(node: BrokerProcess, wire: Callable[[int], WireClient]) -> None:
    client = wire(node.port)
    topic, group = unique("validate"), unique("simple")
    create_topic(client, topic, 1)
    find_coordinator(client, group)

    def commit(name: str, partition: int, metadata: str, generation: int = -1, version: int = 8) -> ErrorCode:
        topic_cls = schema.field_entity(codec.request_class(8, version), "topics")
        entry = schema.build(
            topic_cls,
            name=name,
            partitions=(
                schema.build_nested(
                    topic_cls,
                    "partitions",
                    partition_index=partition,
                    committed_offset=7,
                    committed_leader_epoch=3,
                    committed_metadata=metadata,
                ),
            ),
        )
        response = client.request(
            req(8, version, group_id=group, generation_id_or_member_epoch=generation, member_id="", topics=(entry,))
        )
        return ErrorCode(response.topics[0].partitions[0].error_code)

    assert commit(topic, 0, "x" * 5000) == ErrorCode.offset_metadata_too_large
    assert commit(unique("missing"), 0, "") == ErrorCode.unknown_topic_or_partition
    assert commit(topic, 5, "") == ErrorCode.unknown_topic_or_partition
    assert commit(topic, 0, "", generation=3) == ErrorCode.illegal_generation  # no such group yet
    assert commit(topic, 0, "", generation=3, version=9) == ErrorCode.group_id_not_found  # Kafka's answer from v9
    # offset.metadata.max.bytes (4096) counts Java chars, UTF-16 code units, as Kafka does: not UTF-8 bytes.
    assert commit(topic, 0, "é" * 4096) == ErrorCode.none
    assert commit(topic, 0, "\N{GRINNING FACE}" * 2048 + "x") == ErrorCode.offset_metadata_too_large
    assert commit(topic, 0, "ok") == ErrorCode.none
    groups = (
        nested(9, 8, "groups", group_id=group, topics=None),
        nested(
            9,
            8,
            "groups",
            group_id=unique("nobody"),
            topics=(
                schema.build_nested(
                    schema.field_entity(codec.request_class(9, 8), "groups"),
                    "topics",
                    name=topic,
                    partition_indexes=(0,),
                ),
            ),
        ),
    )
    fetched = client.request(req(9, 8, groups=groups, require_stable=True))
    mine, nobody = fetched.groups
    assert mine.error_code == ErrorCode.none
    [(name, [p])] = [(t.name, list(t.partitions)) for t in mine.topics]
    assert (name, p.committed_offset, p.committed_leader_epoch, p.metadata) == (topic, 7, 3, "ok")
    assert [(q.partition_index, q.committed_offset) for t in nobody.topics for q in t.partitions] == [(0, -1)]


def test_group_state_is_persisted_in_kafkas_record_format(
    node: BrokerProcess, wire: Callable[[int], WireClient]
) -> None:
    """Reads ``__consumer_offsets`` back with Fetch: offset commits, group metadata and tombstones."""
    client = wire(node.port)
    topic, group = unique("persist"), unique("persisted")
    create_topic(client, topic, 1)
    coordinator = find_coordinator(client, group)
    assert coordinator.node_id == node.node_id
    first = join(client, 5, group, group_instance_id="static-1")
    assert first.error_code == ErrorCode.none  # static members get their id at once
    sync_assignment = nested(14, 5, "assignments", member_id=first.member_id, assignment=b"A")
    synced = client.request(
        req(
            14,
            5,
            group_id=group,
            generation_id=first.generation_id,
            member_id=first.member_id,
            group_instance_id="static-1",
            protocol_type="consumer",
            protocol_name="range",
            assignments=(sync_assignment,),
        )
    )
    assert synced.error_code == ErrorCode.none and synced.protocol_name == "range"
    topic_cls = schema.field_entity(codec.request_class(8, 8), "topics")
    entry = schema.build(
        topic_cls,
        name=topic,
        partitions=(
            schema.build_nested(
                topic_cls,
                "partitions",
                partition_index=0,
                committed_offset=11,
                committed_leader_epoch=0,
                committed_metadata="meta",
            ),
        ),
    )
    committed = client.request(
        req(
            8,
            8,
            group_id=group,
            generation_id_or_member_epoch=first.generation_id,
            member_id=first.member_id,
            group_instance_id="static-1",
            topics=(entry,),
        )
    )
    assert committed.topics[0].partitions[0].error_code == ErrorCode.none
    left = client.request(
        req(13, 5, group_id=group, members=(nested(13, 5, "members", member_id="", group_instance_id="static-1"),))
    )
    assert left.members[0].error_code == ErrorCode.none
    deleted = client.request(req(42, 2, groups_names=(group,)))
    assert deleted.results[0].error_code == ErrorCode.none

    records = read_partition(node.bootstrap, "__consumer_offsets", partition_of(client, group))
    mine = [(decode_key(k), v) for k, v in records if decode_key(k) in (GroupKey(group), OffsetKey(group, topic, 0))]
    kinds = [("group" if isinstance(k, GroupKey) else "offset", v is None) for k, v in mine]
    # stable generation, offset commit, empty generation after the leave, then the deletion's tombstones
    assert kinds == [("group", False), ("offset", False), ("group", False), ("offset", True), ("group", True)]
    stable = decode_group_value(mine[0][1] or b"")
    assert (stable.protocol_type, stable.protocol, stable.generation) == ("consumer", "range", 1)
    [member] = stable.members
    assert (member.member_id, member.group_instance_id, member.assignment) == (first.member_id, "static-1", b"A")
    assert member.subscription == SUBSCRIPTION
    offset = decode_offset_value(mine[1][1] or b"")
    assert (offset.offset, offset.leader_epoch, offset.metadata) == (11, 0, "meta")
    empty = decode_group_value(mine[2][1] or b"")
    assert (empty.generation, empty.members, empty.protocol) == (2, (), None)


def partition_of(client: WireClient, group: str) -> int:

    metadata = client.request(req(3, 12, topics=(nested(3, 12, "topics", name="__consumer_offsets"),)))
    return partition_for(group, len(metadata.topics[0].partitions))


def read_partition(bootstrap: str, topic: str, partition: int) -> list[tuple[bytes, bytes | None]]:
    """Every keyed record of one partition, tombstones included, read with librdkafka."""

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("reader"), "enable.auto.commit": False})
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=20)
        consumer.assign([TopicPartition(topic, partition, 0)])
        out: list[tuple[bytes, bytes | None]] = []
        position = 0
        deadline = time.monotonic() + 30
        while position < high:
            assert time.monotonic() < deadline, f"read {position} of {high} records"
            message = consumer.poll(0.2)
            if message is None:
                continue
            assert message.error() is None, message.error()
            position = message.offset() + 1
            if message.key() is not None:
                out.append((message.key(), message.value()))
        return out
    finally:
        consumer.close()


def test_a_metadata_request_creates_the_internal_topics_as_their_coordinators_do(
    broker_factory: Callable[..., BrokerProcess], wire: Callable[[int], WireClient]
) -> None:
    """Kafka's AutoTopicCreationManager gives ``__consumer_offsets`` and ``__transaction_state`` their coordinator's
    definition when a Metadata request names them first: created as an ordinary topic, a compacted log would be
    deleted by retention (a week), group offsets and all."""
    node = broker_factory({"offsets.topic.num.partitions": "3", "transaction.state.log.num.partitions": "2"})
    client = wire(node.port)
    names = ("__consumer_offsets", "__transaction_state")
    metadata = req(3, 12, topics=tuple(nested(3, 12, "topics", name=name) for name in names),
                   allow_auto_topic_creation=True, include_topic_authorized_operations=False)
    asked = client.request(metadata)
    assert [(t.name, t.error_code, t.is_internal) for t in asked.topics] == [
        (name, ErrorCode.unknown_topic_or_partition, True) for name in names
    ]
    created = eventually(
        lambda: client.request(metadata).topics,
        until=lambda topics: all(t.error_code == ErrorCode.none and t.partitions for t in topics),
        timeout=15, what="the internal topics to be created",
    )
    assert [(t.name, len(t.partitions), t.is_internal) for t in created] == [
        ("__consumer_offsets", 3, True), ("__transaction_state", 2, True)
    ]
    keys = ("cleanup.policy", "compression.type")
    resources = tuple(nested(32, 4, "resources", resource_type=2, resource_name=name, configuration_keys=keys)
                      for name in names)
    described = client.request(req(32, 4, resources=resources, include_synonyms=False, include_documentation=False))
    assert [(r.resource_name, {c.name: c.value for c in r.configs}) for r in described.results] == [
        ("__consumer_offsets", {"cleanup.policy": "compact", "compression.type": "producer"}),
        ("__transaction_state", {"cleanup.policy": "compact", "compression.type": "uncompressed"}),
    ]

    group = unique("after-metadata")
    find_coordinator(client, group)
    assert join(client, 0, group).error_code == ErrorCode.none
    txn = client.request(req(10, 4, key_type=1, coordinator_keys=(unique("txn"),)))
    assert [c.error_code for c in txn.coordinators] == [ErrorCode.none]


def test_an_empty_group_id_is_invalid_for_txn_offset_commit_and_offset_delete(
    node: BrokerProcess, wire: Callable[[int], WireClient]
) -> None:
    """Kafka's coordinator refuses them INVALID_GROUP_ID before anything else (a v5 TxnOffsetCommit's transaction
    is not verified); OffsetCommit, for backwards compatibility, takes the empty id as a group."""
    client = wire(node.port)
    topic = unique("empty-id")
    create_topic(client, topic, 1)
    find_coordinator(client, "")
    txn_topic = schema.field_entity(codec.request_class(28, 5), "topics")
    committed = schema.build(
        txn_topic,
        name=topic,
        partitions=(
            schema.build_nested(
                txn_topic, "partitions", partition_index=0, committed_offset=1, committed_leader_epoch=-1,
                committed_metadata="",
            ),
        ),
    )
    txn = client.request(
        req(
            28, 5, transactional_id=unique("txn"), group_id="", producer_id=4242, producer_epoch=0, generation_id=-1,
            member_id="", group_instance_id=None, topics=(committed,),
        )
    )
    assert [p.error_code for t in txn.topics for p in t.partitions] == [ErrorCode.invalid_group_id]
    deleted_topic = nested(47, 0, "topics", name=topic, partitions=(
        schema.build_nested(schema.field_entity(codec.request_class(47, 0), "topics"), "partitions", partition_index=0),
    ))
    deleted = client.request(req(47, 0, group_id="", topics=(deleted_topic,)))
    assert deleted.error_code == ErrorCode.invalid_group_id
