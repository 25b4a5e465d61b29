"""MetadataImage: records in, immutable snapshots out."""

from __future__ import annotations

import uuid

from metadata.cluster_records import (
    ConfigRecord,
    FeatureLevelRecord,
    FenceBrokerRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)
from metadata.image import MetadataImage
from settings.config_resources import RESOURCE_BROKER, RESOURCE_TOPIC
from settings.endpoint import Endpoint
from storage.metadata.record_codec import MetadataRecord
from storage.metadata.stream_records import KVRecord

EP = (Endpoint("PLAINTEXT", "127.0.0.1", 9092),)


def _topic(name: str, partitions: int, leader: int = 0) -> tuple[uuid.UUID, list[MetadataRecord]]:
    topic_id = uuid.uuid4()
    records: list[MetadataRecord] = [TopicRecord(name, str(topic_id))]
    records += [PartitionRecord(str(topic_id), p, (leader,), (leader,), leader, 0, 0) for p in range(partitions)]
    return topic_id, records


def test_topics_and_partitions_are_visible_by_name_and_id() -> None:
    topic_id, records = _topic("orders", 3)
    image = MetadataImage("cluster").apply(records, last_offset=3)
    assert image.offset == 3
    topic = image.topics_by_name["orders"]
    assert image.topics_by_id[topic_id] is topic
    assert sorted(topic.partitions) == [0, 1, 2]
    part = image.partition("orders", 2)
    assert part is not None and part.topic_id == topic_id and part.leader == 0
    assert image.partition("orders", 3) is None
    assert image.partition("missing", 0) is None


def test_applying_leaves_the_old_image_untouched() -> None:
    topic_id, records = _topic("orders", 1)
    first = MetadataImage("cluster").apply(records, 1)
    second = first.apply([PartitionChangeRecord(str(topic_id), 0, leader=-1, leader_epoch=1)], 2)
    old = first.partition("orders", 0)
    new = second.partition("orders", 0)
    assert old is not None and new is not None
    assert (old.leader, old.leader_epoch, old.partition_epoch) == (0, 0, 0)
    assert (new.leader, new.leader_epoch, new.partition_epoch) == (-1, 1, 1)
    assert first.offset == 1 and second.offset == 2


def test_partition_change_keeps_unset_fields_and_bumps_partition_epoch() -> None:
    topic_id, records = _topic("t", 1)
    image = MetadataImage("c").apply(records, 1)
    image = image.apply([PartitionChangeRecord(str(topic_id), 0, isr=())], 2)
    image = image.apply([PartitionChangeRecord(str(topic_id), 0, replicas=(0, 1), isr=(0, 1))], 3)
    part = image.partition("t", 0)
    assert part is not None
    assert part.leader == 0 and part.leader_epoch == 0
    assert part.replicas == (0, 1) and part.isr == (0, 1)
    assert part.partition_epoch == 2


def test_remove_topic_frees_the_name() -> None:
    topic_id, records = _topic("t", 2)
    image = MetadataImage("c").apply(records, 2)
    image = image.apply([RemoveTopicRecord(str(topic_id))], 3)
    assert "t" not in image.topics_by_name and topic_id not in image.topics_by_id
    again, records = _topic("t", 1)
    image = image.apply(records, 5)
    assert image.topics_by_name["t"].topic_id == again


def test_topic_configs_set_and_delete_in_the_same_batch_as_creation() -> None:
    _, records = _topic("t", 1)
    records += [
        ConfigRecord(RESOURCE_TOPIC, "t", "retention.ms", "1000"),
        ConfigRecord(RESOURCE_TOPIC, "t", "cleanup.policy", "compact"),
    ]
    image = MetadataImage("c").apply(records, 3)
    assert dict(image.topics_by_name["t"].configs) == {"retention.ms": "1000", "cleanup.policy": "compact"}
    image = image.apply([ConfigRecord(RESOURCE_TOPIC, "t", "retention.ms", None)], 4)
    assert dict(image.topics_by_name["t"].configs) == {"cleanup.policy": "compact"}


def test_broker_configs_cluster_default_and_per_node() -> None:
    image = MetadataImage("c").apply(
        [
            ConfigRecord(RESOURCE_BROKER, "", "log.retention.ms", "5000"),
            ConfigRecord(RESOURCE_BROKER, "3", "num.io.threads", "4"),
        ],
        1,
    )
    assert dict(image.broker_configs) == {"log.retention.ms": "5000"}
    assert dict(image.node_configs[3]) == {"num.io.threads": "4"}
    image = image.apply([ConfigRecord(RESOURCE_BROKER, "3", "num.io.threads", None)], 2)
    assert 3 not in image.node_configs


def test_broker_registration_fencing_and_stale_epochs() -> None:
    image = MetadataImage("c").apply([RegisterBrokerRecord(1, 10, EP, "r1")], 0)
    broker = image.brokers[1]
    assert broker.fenced and broker.rack == "r1" and broker.listeners == EP
    assert image.live_brokers() == []
    image = image.apply([UnfenceBrokerRecord(1, 10)], 1)
    assert [b.node_id for b in image.live_brokers()] == [1]
    # A fence for an older registration does not touch the current one.
    image = image.apply([FenceBrokerRecord(1, 9), UnregisterBrokerRecord(1, 9)], 2)
    assert not image.brokers[1].fenced
    image = image.apply([RegisterBrokerRecord(1, 11, EP, None, fenced=False)], 3)
    assert image.brokers[1].epoch == 11 and not image.brokers[1].fenced
    image = image.apply([UnregisterBrokerRecord(1, 11)], 4)
    assert 1 not in image.brokers


def test_stream_records_are_ignored_by_the_image() -> None:
    image = MetadataImage("c")
    after = image.apply([KVRecord("k", b"v")], 0)
    assert after.topics_by_name == {} and after.offset == 0


def test_to_records_rebuilds_an_equal_image() -> None:
    t1, r1 = _topic("a", 2, leader=1)
    _, r2 = _topic("b", 1, leader=1)
    records: list[MetadataRecord] = [RegisterBrokerRecord(1, 10, EP, None, fenced=False), *r1, *r2]
    records += [
        ConfigRecord(RESOURCE_TOPIC, "a", "retention.ms", "1"),
        ConfigRecord(RESOURCE_BROKER, "", "log.retention.ms", "2"),
        ConfigRecord(RESOURCE_BROKER, "1", "num.io.threads", "3"),
        PartitionChangeRecord(str(t1), 1, leader=1, leader_epoch=4),
    ]
    image = MetadataImage("c", controller_id=1).apply(records, 20)
    rebuilt = MetadataImage("c", controller_id=1).apply(image.to_records(), 20)
    assert rebuilt == image


def test_producer_id_blocks_only_move_forward_and_survive_a_snapshot() -> None:
    image = MetadataImage("c").apply([ProducerIdsRecord(1, 10, 1000), ProducerIdsRecord(2, 11, 2000)], 1)
    assert (image.producer_ids.broker_id, image.producer_ids.next_producer_id) == (2, 2000)
    # A record that would move the next block back (blocks below 2000 are handed out) changes nothing.
    assert image.apply([ProducerIdsRecord(1, 10, 1500)], 2).producer_ids == image.producer_ids
    assert MetadataImage("c").apply(image.to_records(), 1) == image


def test_feature_levels_are_records_the_image_replays_and_snapshots() -> None:
    fresh = MetadataImage("c")
    # Until a cluster finalized its features, the software's defaults are in force.
    assert not fresh.features_finalized
    assert fresh.finalized_features() == {"group.version": 1, "metadata.version": 14, "share.version": 1,
                                          "transaction.version": 2}
    assert fresh.feature_level("streams.version") == 0
    image = fresh.apply([FeatureLevelRecord("metadata.version", 14), FeatureLevelRecord("transaction.version", 1),
                         FeatureLevelRecord("group.version", 1), FeatureLevelRecord("group.version", 0)], 5)
    assert image.features_finalized
    assert image.feature_level("transaction.version") == 1 and image.feature_level("group.version") == 0
    assert image.finalized_features() == {"metadata.version": 14, "transaction.version": 1}
    rebuilt = MetadataImage("c").apply(image.to_records(), 5)
    assert rebuilt.features == image.features
