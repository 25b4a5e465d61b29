"""The controller's topic, partition and config requests: validation, Kafka error codes, and effects."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from controller.controller import Controller
from metadata.controller_api import ConfigResource, ControllerClient, IncrementalOp, NewTopic
from metadata.image import MetadataImage
from settings.describe import ConfigSource
from settings.endpoint import Endpoint
from settings.server import ServerConfig

EP = (Endpoint("PLAINTEXT", "127.0.0.1", 9092),)


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[ControllerClient]:
    config = ServerConfig.load(None, [f"log.dirs={tmp_path}", "num.partitions=2"])
    controller = await Controller.start(config)
    local = controller
    await local.register_broker(0, EP, None)
    yield local
    await controller.close()


async def test_create_topic_assigns_ids_leaders_and_defaults(client: ControllerClient) -> None:
    [result] = await client.create_topics([NewTopic("orders")], validate_only=False)
    assert result.error is ErrorCode.none and result.message is None
    assert result.num_partitions == 2 and result.replication_factor == 1
    assert isinstance(result.topic_id, uuid.UUID)
    topic = client.image.topics_by_name["orders"]
    assert topic.topic_id == result.topic_id
    for index in (0, 1):
        part = client.image.partition("orders", index)
        assert part is not None
        assert (part.replicas, part.isr, part.leader, part.leader_epoch) == ((0,), (0,), 0, 0)
    configs = {e.name: e for e in result.configs}
    assert configs["cleanup.policy"].value == "delete"
    assert configs["cleanup.policy"].source is ConfigSource.DEFAULT_CONFIG


async def test_create_with_configs_and_explicit_counts(client: ControllerClient) -> None:
    [result] = await client.create_topics(
        [NewTopic("logs", 5, 1, None, {"cleanup.policy": "compact", "retention.ms": "60000"})], False
    )
    assert result.error is ErrorCode.none and result.num_partitions == 5
    assert dict(client.image.topics_by_name["logs"].configs) == {"cleanup.policy": "compact", "retention.ms": "60000"}
    entry = next(e for e in result.configs if e.name == "retention.ms")
    assert (entry.value, entry.source) == ("60000", ConfigSource.TOPIC_CONFIG)


@pytest.mark.parametrize(
    "name",
    ["", ".", "..", "a" * 250, "bad/name", "space name", "ünïcode"],
)
async def test_illegal_topic_names(client: ControllerClient, name: str) -> None:
    [result] = await client.create_topics([NewTopic(name)], False)
    assert result.error is ErrorCode.invalid_topic_exception
    assert result.message and result.topic_id is None
    assert client.image.topics_by_name == {}


async def test_longest_legal_name_is_accepted(client: ControllerClient) -> None:
    [result] = await client.create_topics([NewTopic("a-Z_0." + "x" * 243)], False)
    assert result.error is ErrorCode.none


async def test_existing_topic(client: ControllerClient) -> None:
    await client.create_topics([NewTopic("t")], False)
    before = client.image.topics_by_name["t"].topic_id
    [again] = await client.create_topics([NewTopic("t")], False)
    assert again.error is ErrorCode.topic_already_exists and again.message == "Topic 't' already exists."
    assert client.image.topics_by_name["t"].topic_id == before


async def test_names_colliding_on_dot_and_underscore(client: ControllerClient) -> None:
    await client.create_topics([NewTopic("a.b")], False)
    [result] = await client.create_topics([NewTopic("a_b")], False)
    assert result.error is ErrorCode.invalid_topic_exception and "collides" in (result.message or "")


async def test_duplicate_names_in_one_request(client: ControllerClient) -> None:
    results = await client.create_topics([NewTopic("dup"), NewTopic("dup"), NewTopic("ok")], False)
    assert [r.error for r in results] == [ErrorCode.invalid_request, ErrorCode.invalid_request, ErrorCode.none]
    assert set(client.image.topics_by_name) == {"ok"}


async def test_the_metadata_log_name_is_refused(client: ControllerClient) -> None:
    results = await client.create_topics([NewTopic("__cluster_metadata"), NewTopic("ok")], False)
    assert [(r.error, r.message) for r in results] == [
        (ErrorCode.invalid_request, "Creation of internal topic __cluster_metadata is prohibited."),
        (ErrorCode.none, None),
    ]
    assert set(client.image.topics_by_name) == {"ok"}


@pytest.mark.parametrize("partitions", [0, -2])
async def test_invalid_partition_counts(client: ControllerClient, partitions: int) -> None:
    [result] = await client.create_topics([NewTopic("t", partitions)], False)
    assert result.error is ErrorCode.invalid_partitions


@pytest.mark.parametrize("factor", [0, -5, 2, 3])
async def test_replication_factor_beyond_live_brokers(client: ControllerClient, factor: int) -> None:
    [result] = await client.create_topics([NewTopic("t", 1, factor)], False)
    assert result.error is ErrorCode.invalid_replication_factor and result.message
    assert "t" not in client.image.topics_by_name


@pytest.mark.parametrize(
    ("configs", "fragment"),
    [
        ({"retention.ms": "forever"}, "retention.ms"),
        ({"cleanup.policy": "shred"}, "cleanup.policy"),
        ({"no.such.key": "1"}, "Unknown topic config name: no.such.key"),
        ({"min.insync.replicas": "0"}, "min.insync.replicas"),
    ],
)
async def test_invalid_configs(client: ControllerClient, configs: dict[str, str], fragment: str) -> None:
    [result] = await client.create_topics([NewTopic("t", configs=configs)], False)
    assert result.error is ErrorCode.invalid_config
    assert fragment in (result.message or "")
    assert "t" not in client.image.topics_by_name


async def test_compaction_lags_are_judged_together_on_the_values_that_take_effect(client: ControllerClient) -> None:
    """Kafka's LogConfig.validateValues: min.compaction.lag.ms above max.compaction.lag.ms is INVALID_CONFIG, at
    CreateTopics and at alteration, the topic's values merged with the brokers' they fall back to."""
    conflict = "conflict topic config setting min.compaction.lag.ms (2000) > max.compaction.lag.ms (1000)"
    [result] = await client.create_topics(
        [NewTopic("lags", configs={"min.compaction.lag.ms": "2000", "max.compaction.lag.ms": "1000"})], False
    )
    assert result.error is ErrorCode.invalid_config and conflict in (result.message or "")
    assert "lags" not in client.image.topics_by_name

    [result] = await client.create_topics([NewTopic("lags", configs={"max.compaction.lag.ms": "1000"})], False)
    assert result.error is ErrorCode.none
    topic = ConfigResource(ConfigResource.TOPIC, "lags")
    for ops in (None, {"min.compaction.lag.ms": IncrementalOp.SET}):
        changes = {"min.compaction.lag.ms": "2000"} | ({} if ops else {"max.compaction.lag.ms": "1000"})
        assert await client.alter_configs(topic, changes, incremental_ops=ops, validate_only=False) == (
            ErrorCode.invalid_config, conflict
        )
    assert dict(client.image.topics_by_name["lags"].configs) == {"max.compaction.lag.ms": "1000"}

    # The brokers' minimum is what a topic without its own falls back to.
    cluster = ConfigResource(ConfigResource.BROKER, "")
    code, _ = await client.alter_configs(
        cluster, {"log.cleaner.min.compaction.lag.ms": "2000"}, incremental_ops=None, validate_only=False
    )
    assert code is ErrorCode.none
    [result] = await client.create_topics([NewTopic("lags-2", configs={"max.compaction.lag.ms": "1000"})], False)
    assert result.error is ErrorCode.invalid_config and conflict in (result.message or "")


async def test_tiered_storage_keys_are_accepted_and_remote_storage_refused(client: ControllerClient) -> None:
    """Kafka without tiered storage accepts local.retention.* (atLeast(-2)) and refuses remote.storage.enable=true
    with INVALID_CONFIG; Fjord has no local tier, so neither key changes anything."""
    local = {"local.retention.ms": "60000", "local.retention.bytes": "-2", "remote.storage.enable": "false"}
    [result] = await client.create_topics([NewTopic("tiers", configs=local)], False)
    assert result.error is ErrorCode.none
    described = {e.name: (e.value, e.source) for e in result.configs}
    assert described["local.retention.ms"] == ("60000", ConfigSource.TOPIC_CONFIG)
    assert described["local.retention.bytes"] == ("-2", ConfigSource.TOPIC_CONFIG)
    [result] = await client.create_topics([NewTopic("tiers-2", configs={"local.retention.ms": "-3"})], False)
    assert result.error is ErrorCode.invalid_config and "local.retention.ms" in (result.message or "")

    remote = "Tiered Storage functionality is disabled in the broker. Topic cannot be configured with remote log"
    [result] = await client.create_topics([NewTopic("tiers-3", configs={"remote.storage.enable": "true"})], False)
    assert result.error is ErrorCode.invalid_config and remote in (result.message or "")
    topic = ConfigResource(ConfigResource.TOPIC, "tiers")
    code, message = await client.alter_configs(
        topic, {"remote.storage.enable": "true"}, incremental_ops={"remote.storage.enable": IncrementalOp.SET},
        validate_only=False,
    )
    assert code is ErrorCode.invalid_config and remote in (message or "")
    assert client.image.topics_by_name["tiers"].configs["remote.storage.enable"] == "false"


async def test_one_bad_topic_does_not_block_the_others(client: ControllerClient) -> None:
    results = await client.create_topics([NewTopic("good"), NewTopic("bad", 0)], False)
    assert [r.error for r in results] == [ErrorCode.none, ErrorCode.invalid_partitions]
    assert set(client.image.topics_by_name) == {"good"}


async def test_validate_only_creates_nothing(client: ControllerClient) -> None:
    offset = client.image.offset
    seen: list[MetadataImage] = []
    client.subscribe(lambda old, new: seen.append(new))
    results = await client.create_topics([NewTopic("dry", 3), NewTopic("dry-bad", 1, 4)], validate_only=True)
    assert results[0].error is ErrorCode.none and results[0].num_partitions == 3 and results[0].topic_id is None
    assert results[1].error is ErrorCode.invalid_replication_factor
    assert "dry" not in client.image.topics_by_name and client.image.offset == offset and seen == []
    [real] = await client.create_topics([NewTopic("dry", 3)], False)
    assert real.error is ErrorCode.none


async def test_too_many_partitions_refuse_the_whole_request(client: ControllerClient) -> None:
    """Kafka counts what a CreateTopics asks for before placing any replica (num.partitions for -1): over 10,000
    every topic is refused with POLICY_VIOLATION, validate-only or not, and nothing is created."""
    too_many = "Excessively large number of partitions per request."
    for topics in (
        [NewTopic("a", 5000), NewTopic("b", 5000), NewTopic("c", 1)],
        [NewTopic("huge", 2**31 - 1)],
        [NewTopic(f"d{i}") for i in range(5001)],  # num.partitions=2 each
    ):
        for validate_only in (True, False):
            results = await client.create_topics(topics, validate_only)
            assert {(r.error, r.message, r.topic_id) for r in results} == {
                (ErrorCode.policy_violation, too_many, None)
            }
            assert len(results) == len(topics)
    # 10,000 partitions pass that count, but their records with the topics' are more than one request may write.
    results = await client.create_topics([NewTopic("e", 5000), NewTopic("f", 5000)], False)
    assert {(r.error, r.message) for r in results} == {
        (ErrorCode.policy_violation, "Unable to perform excessively large batch operation.")
    }
    assert client.image.topics_by_name == {}
    [ok] = await client.create_topics([NewTopic("g", 9999)], True)
    assert ok.error is ErrorCode.none and ok.num_partitions == 9999


async def test_too_many_new_partitions_are_refused(client: ControllerClient) -> None:
    await client.create_topics([NewTopic("p", 2)], False)
    too_many = (ErrorCode.policy_violation, "Excessively large number of partitions per request.")
    assert await client.create_partitions("p", 2**31 - 1, None, validate_only=True) == too_many
    assert await client.create_partitions("p", 10_003, None, validate_only=False) == too_many
    assert await client.create_partitions("p", 10_002, None, validate_only=True) == (ErrorCode.none, None)
    assert len(client.image.topics_by_name["p"].partitions) == 2


async def test_manual_assignments(client: ControllerClient) -> None:
    [ok] = await client.create_topics([NewTopic("m", assignments={0: [0], 1: [0]})], False)
    assert ok.error is ErrorCode.none and ok.num_partitions == 2
    [gap] = await client.create_topics([NewTopic("g", assignments={0: [0], 2: [0]})], False)
    assert gap.error is ErrorCode.invalid_replica_assignment
    [unknown] = await client.create_topics([NewTopic("u", assignments={0: [7]})], False)
    assert unknown.error is ErrorCode.invalid_replica_assignment
    [both] = await client.create_topics([NewTopic("b", 1, -1, {0: [0]})], False)
    assert both.error is ErrorCode.invalid_request


async def test_manual_assignment_to_fenced_or_shutting_down_brokers(client: ControllerClient) -> None:
    """A partition whose replicas are all fenced or in controlled shutdown would start with no leader: Kafka refuses
    the assignment. The others start in sync on the active replicas alone, led by the first of them."""
    assert isinstance(client, Controller)
    fenced = await client.register_broker(1, EP, None)
    shutting_down = await client.register_broker(2, EP, None)
    assert await client.fence_broker(1, fenced)
    await client.controlled_shutdown(2, shutting_down)
    [refused] = await client.create_topics([NewTopic("m", assignments={0: [0, 1], 1: [2, 1]})], False)
    assert (refused.error, refused.message) == (
        ErrorCode.invalid_replica_assignment,
        "All brokers specified in the manual partition assignment for partition 1 are fenced or in controlled "
        "shutdown.",
    )
    [ok] = await client.create_topics([NewTopic("n", assignments={0: [2, 0, 1]})], False)
    part = client.image.partition("n", 0)
    assert ok.error is ErrorCode.none and part is not None
    assert (part.replicas, part.isr, part.leader) == ((2, 0, 1), (0,), 0)
    await client.create_topics([NewTopic("p", 1, 1)], False)
    assert await client.create_partitions("p", 3, [[0], [2]], False) == (
        ErrorCode.invalid_replica_assignment,
        "All brokers specified in the manual partition assignment for partition 2 are fenced or in controlled "
        "shutdown.",
    )
    assert set(client.image.topics_by_name) == {"n", "p"} and len(client.image.topics_by_name["p"].partitions) == 1


async def test_delete_by_name_and_id(client: ControllerClient) -> None:
    created = await client.create_topics([NewTopic("a"), NewTopic("b")], False)
    by_name, missing = await client.delete_topics(names=["a", "nope"])
    assert by_name.error is ErrorCode.none and by_name.topic_id == created[0].topic_id
    assert missing.error is ErrorCode.unknown_topic_or_partition
    assert created[1].topic_id is not None
    [by_id, missing_id] = await client.delete_topics(ids=[created[1].topic_id, uuid.uuid4()])
    assert by_id.error is ErrorCode.none and by_id.name == "b"
    assert missing_id.error is ErrorCode.unknown_topic_id
    assert client.image.topics_by_name == {}
    [recreated] = await client.create_topics([NewTopic("a")], False)
    assert recreated.error is ErrorCode.none and recreated.topic_id != created[0].topic_id


async def test_delete_naming_a_topic_by_name_and_by_id(client: ControllerClient) -> None:
    """Kafka's ControllerApis: the name is refused with the id it maps to, the id is not answered, and the topic
    stays; the other topics of the request go."""
    a, b = await client.create_topics([NewTopic("a"), NewTopic("b")], False)
    assert a.topic_id is not None and b.topic_id is not None
    results = await client.delete_topics(names=["a", "b"], ids=[a.topic_id])
    supplied = "The provided topic name maps to an ID that was already supplied."
    assert [(r.name, r.topic_id, r.error, r.message) for r in results] == [
        ("a", a.topic_id, ErrorCode.invalid_request, supplied),
        ("b", b.topic_id, ErrorCode.none, None),
    ]
    assert set(client.image.topics_by_name) == {"a"}


async def test_create_partitions(client: ControllerClient) -> None:
    await client.create_topics([NewTopic("p", 2)], False)
    assert await client.create_partitions("p", 4, None, validate_only=True) == (ErrorCode.none, None)
    assert len(client.image.topics_by_name["p"].partitions) == 2
    assert await client.create_partitions("p", 4, None, validate_only=False) == (ErrorCode.none, None)
    part = client.image.partition("p", 3)
    assert part is not None and part.leader == 0
    code, message = await client.create_partitions("p", 3, None, False)
    assert code is ErrorCode.invalid_partitions and "higher than the requested 3" in (message or "")
    code, _ = await client.create_partitions("p", 4, None, False)
    assert code is ErrorCode.invalid_partitions
    code, _ = await client.create_partitions("p", 6, [[0]], False)
    assert code is ErrorCode.invalid_replica_assignment
    code, _ = await client.create_partitions("p", 5, [[9]], False)
    assert code is ErrorCode.invalid_replica_assignment
    code, _ = await client.create_partitions("nope", 5, None, False)
    assert code is ErrorCode.unknown_topic_or_partition
    assert len(client.image.topics_by_name["p"].partitions) == 4


async def test_alter_configs_replaces_and_incremental_edits(client: ControllerClient) -> None:
    await client.create_topics([NewTopic("c", configs={"retention.ms": "1000"})], False)
    topic = ConfigResource(ConfigResource.TOPIC, "c")
    assert await client.alter_configs(topic, {"segment.ms": "5000"}, incremental_ops=None, validate_only=False) == (
        ErrorCode.none,
        None,
    )
    assert dict(client.image.topics_by_name["c"].configs) == {"segment.ms": "5000"}  # AlterConfigs replaces all

    await client.alter_configs(
        topic,
        {"retention.ms": "7", "segment.ms": None, "cleanup.policy": "compact"},
        incremental_ops={
            "retention.ms": IncrementalOp.SET,
            "segment.ms": IncrementalOp.DELETE,
            "cleanup.policy": IncrementalOp.APPEND,
        },
        validate_only=False,
    )
    assert dict(client.image.topics_by_name["c"].configs) == {"retention.ms": "7", "cleanup.policy": "delete,compact"}
    await client.alter_configs(
        topic,
        {"cleanup.policy": "delete"},
        incremental_ops={"cleanup.policy": IncrementalOp.SUBTRACT},
        validate_only=False,
    )
    assert client.image.topics_by_name["c"].configs["cleanup.policy"] == "compact"


async def test_alter_configs_errors(client: ControllerClient) -> None:
    await client.create_topics([NewTopic("c")], False)
    topic = ConfigResource(ConfigResource.TOPIC, "c")
    code, message = await client.alter_configs(topic, {"retention.ms": "x"}, incremental_ops=None, validate_only=False)
    assert code is ErrorCode.invalid_config and "retention.ms" in (message or "")
    code, _ = await client.alter_configs(
        topic, {"retention.ms": "5"}, incremental_ops={"retention.ms": IncrementalOp.APPEND}, validate_only=False
    )
    assert code is ErrorCode.invalid_config
    code, _ = await client.alter_configs(
        ConfigResource(ConfigResource.TOPIC, "missing"),
        {"retention.ms": "5"},
        incremental_ops=None,
        validate_only=False,
    )
    assert code is ErrorCode.unknown_topic_or_partition
    # The name is judged before the topic is looked up, as Kafka's ControllerConfigurationValidator does.
    for ops in (None, {"retention.ms": IncrementalOp.SET}):
        named = {
            name: await client.alter_configs(
                ConfigResource(ConfigResource.TOPIC, name), {"retention.ms": "5"}, incremental_ops=ops,
                validate_only=False,
            )
            for name in ("", "bad/name")
        }
        assert named[""] == (ErrorCode.invalid_request, "Default topic resources are not allowed.")
        assert named["bad/name"][0] is ErrorCode.invalid_topic_exception
    code, _ = await client.alter_configs(topic, {"retention.ms": "5"}, incremental_ops=None, validate_only=True)
    assert code is ErrorCode.none
    assert dict(client.image.topics_by_name["c"].configs) == {}


async def test_broker_configs_cluster_wide_and_per_node(client: ControllerClient) -> None:
    cluster = ConfigResource(ConfigResource.BROKER, "")
    code, _ = await client.alter_configs(
        cluster,
        {"log.retention.ms": "1234"},
        incremental_ops={"log.retention.ms": IncrementalOp.SET},
        validate_only=False,
    )
    assert code is ErrorCode.none and dict(client.image.broker_configs) == {"log.retention.ms": "1234"}
    node = ConfigResource(ConfigResource.BROKER, "0")
    code, _ = await client.alter_configs(node, {"num.io.threads": "2"}, incremental_ops=None, validate_only=False)
    assert code is ErrorCode.none and dict(client.image.node_configs[0]) == {"num.io.threads": "2"}
    # Kafka's broker refuses a broker value with INVALID_REQUEST (KAFKA-13609), static key or bad value alike.
    code, message = await client.alter_configs(cluster, {"node.id": "3"}, incremental_ops=None, validate_only=False)
    assert code is ErrorCode.invalid_request and "node.id" in (message or "")
    code, message = await client.alter_configs(
        node, {"num.io.threads": "0"}, incremental_ops={"num.io.threads": IncrementalOp.SET}, validate_only=False
    )
    assert code is ErrorCode.invalid_request and "num.io.threads" in (message or "")
    # a topic created now reports the dynamic default as its effective retention
    [result] = await client.create_topics([NewTopic("r")], False)
    entry = next(e for e in result.configs if e.name == "retention.ms")
    assert (entry.value, entry.source) == ("1234", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)


async def test_subscribers_see_old_and_new_images(client: ControllerClient) -> None:
    changes: list[tuple[MetadataImage, MetadataImage]] = []
    client.subscribe(lambda old, new: changes.append((old, new)))
    await client.create_topics([NewTopic("s")], False)
    await client.delete_topics(names=["s"])
    assert len(changes) == 2
    (old1, new1), (old2, new2) = changes
    assert "s" not in old1.topics_by_name and "s" in new1.topics_by_name
    assert old2 is new1 and "s" not in new2.topics_by_name
    assert new2 is client.image and new2.offset > new1.offset > old1.offset


async def test_elect_leaders(client: ControllerClient) -> None:
    await client.create_topics([NewTopic("e", 1)], False)
    [result] = await client.elect_leaders([("e", 0)])
    assert result.error is ErrorCode.election_not_needed
    [missing] = await client.elect_leaders([("e", 5)])
    assert missing.error is ErrorCode.unknown_topic_or_partition


def _leaders(image: MetadataImage, topic: str) -> dict[int, tuple[int, int]]:
    """partition -> (leader, leader epoch)"""
    return {p: (part.leader, part.leader_epoch) for p, part in image.topics_by_name[topic].partitions.items()}


async def test_placement_spreads_leaders_over_live_brokers(client: ControllerClient) -> None:
    await client.register_broker(1, EP, None)
    await client.register_broker(2, EP, None)
    [result] = await client.create_topics([NewTopic("spread", 6, 2)], False)
    assert result.error is ErrorCode.none
    leaders = [leader for leader, _ in _leaders(client.image, "spread").values()]
    assert sorted(leaders) == [0, 0, 1, 1, 2, 2]
    for part in client.image.topics_by_name["spread"].partitions.values():
        assert len(set(part.replicas)) == 2 and part.leader == part.replicas[0]


async def test_fencing_moves_leadership_with_a_higher_epoch(client: ControllerClient) -> None:
    assert isinstance(client, Controller)
    controller = client
    epoch1 = await client.register_broker(1, EP, None)
    await client.create_topics([NewTopic("f", 4, 1)], False)
    before = _leaders(client.image, "f")
    led_by_1 = [p for p, (leader, _) in before.items() if leader == 1]
    assert led_by_1

    assert not await controller.fence_broker(1, epoch1 - 1)  # a stale incarnation changes nothing
    assert _leaders(client.image, "f") == before

    assert await controller.fence_broker(1, epoch1)
    assert client.image.brokers[1].fenced
    after = _leaders(client.image, "f")
    for p in led_by_1:
        assert after[p] == (0, before[p][1] + 1)
        part = client.image.partition("f", p)
        assert part is not None and part.replicas == (0,)
    for p in set(before) - set(led_by_1):
        assert after[p] == before[p]

    # With no live broker left the partitions have no leader; the next broker to register adopts them.
    epoch0 = client.image.brokers[0].epoch
    assert await controller.fence_broker(0, epoch0)
    assert all(leader == -1 for leader, _ in _leaders(client.image, "f").values())
    await client.register_broker(3, EP, None)
    adopted = _leaders(client.image, "f")
    assert all(leader == 3 for leader, _ in adopted.values())
    assert all(adopted[p][1] == after[p][1] + 2 for p in adopted)  # fenced (+1), adopted (+1)


async def test_topic_deletion_can_be_disabled(tmp_path: Path) -> None:
    config = ServerConfig.load(None, [f"log.dirs={tmp_path}", "delete.topic.enable=false"])
    controller = await Controller.start(config)
    client = controller
    await client.register_broker(0, EP, None)
    await client.create_topics([NewTopic("keep")], False)
    [result] = await client.delete_topics(names=["keep"])
    assert result.error is ErrorCode.topic_deletion_disabled
    assert "keep" in client.image.topics_by_name
    await controller.close()
