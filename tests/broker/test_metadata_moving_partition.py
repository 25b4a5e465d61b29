"""A Metadata (and DescribeTopicPartitions) answer for a partition being moved names the broker its election will
pick, at the epoch it will give, as the Produce and Fetch refusals' KIP-951 hints do.

Between the source's letting go and the target's election the partition has no leader in the metadata image. A
producer refused by the source takes the hint (target, epoch + 1); if it also asks for metadata (librdkafka does, in
a race between its threads), an answer of "no leader" at the older epoch is dropped by the client as stale while its
leader query goes on asking every 100 ms, one Metadata request after another until the election is known
(`tests/cluster/test_cluster_leader_hints.py` under load saw two). The handler is served here over metadata images
holding each stage of a move, and over one whose leader has no endpoint on the client's listener."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, cast

from kio.schema.errors import ErrorCode

from broker.handlers.context import RequestContext
from broker.handlers.leader_hints import LeaderHints
from broker.handlers.table import HANDLERS, serve_authorized
from broker.services import BrokerServices
from metadata.cluster_records import PartitionChangeRecord, PartitionRecord, RegisterBrokerRecord, TopicRecord
from metadata.image import MetadataImage
from settings.endpoint import Endpoint
from wire import codec, schema

METADATA = 3
DESCRIBE_TOPIC_PARTITIONS = 75
TOPIC = uuid.UUID(int=7)
BROKERS = [
    RegisterBrokerRecord(0, 1, (Endpoint("PLAINTEXT", "127.0.0.1", 9092),), fenced=False),
    RegisterBrokerRecord(1, 1, (Endpoint("PLAINTEXT", "127.0.0.2", 9093),), fenced=False),
    RegisterBrokerRecord(2, 1, (Endpoint("PLAINTEXT", "127.0.0.3", 9094),), fenced=True),
]


@dataclass
class _Controller:
    image: MetadataImage


class _Config:
    def value(self, key: str) -> int:
        assert key == "max.request.partition.size.limit", key
        return 2000


@dataclass
class _Broker:
    controller: _Controller
    node_id: int = 0
    auto_create_topics_enable: bool = False
    config: _Config = field(default_factory=_Config)


def _image(*partition_records: Any) -> MetadataImage:
    return MetadataImage("c").apply([*BROKERS, TopicRecord("t", str(TOPIC)), *partition_records], 10)


async def _serve(image: MetadataImage, api_key: int, version: int, request: Any) -> Any:
    ctx = RequestContext(api_key=api_key, api_version=version, correlation_id=1, client_id="probe",
                         client_host="127.0.0.1", broker=cast(BrokerServices, _Broker(_Controller(image))))
    response = await serve_authorized(ctx, request, HANDLERS[api_key])
    return codec.decode_response(api_key, version, codec.encode_response(1, response)[4:])[1]


async def _partition_answer(image: MetadataImage, version: int = 13) -> tuple[ErrorCode, int, int]:
    """Metadata's answer for partition 0 of topic ``t``: error code, leader, leader epoch (-1 before v7)."""
    request_cls = codec.request_class(METADATA, version)
    request = schema.build(request_cls, topics=(
        schema.build_nested(request_cls, "topics", topic_id=TOPIC if version >= 10 else None, name="t"),
    ), allow_auto_topic_creation=False)
    (topic,) = (await _serve(image, METADATA, version, request)).topics
    (partition,) = topic.partitions
    return partition.error_code, partition.leader_id, getattr(partition, "leader_epoch", -1)  # v7+


async def _described(image: MetadataImage) -> tuple[int, int]:
    """DescribeTopicPartitions' (Kafka 4's ``kafka-topics.sh --describe``) leader and epoch of partition 0."""
    request_cls = codec.request_class(DESCRIBE_TOPIC_PARTITIONS, 0)
    request = schema.build(request_cls, topics=(schema.build_nested(request_cls, "topics", name="t"),),
                           response_partition_limit=10, cursor=None)
    (topic,) = (await _serve(image, DESCRIBE_TOPIC_PARTITIONS, 0, request)).topics
    (partition,) = topic.partitions
    return partition.leader_id, partition.leader_epoch


async def test_a_partition_between_its_source_and_its_election_is_answered_with_the_target() -> None:
    led = PartitionRecord(str(TOPIC), 0, (0,), (0,), 0, 4)
    assert await _partition_answer(_image(led)) == (ErrorCode.none, 0, 4)

    # The move starts: the target first, the source let go, no leader yet at epoch 4.
    moving = _image(led, PartitionChangeRecord(str(TOPIC), 0, leader=-1, replicas=(1, 0), isr=(1, 0),
                                               removing_replicas=(0,)))
    part = moving.partition("t", 0)
    assert part is not None and part.reassigning and part.leader == -1
    answer = await _partition_answer(moving)
    assert answer == (ErrorCode.none, 1, 5)
    assert answer[1:] == LeaderHints(moving, "PLAINTEXT").current_leader("t", 0)  # what a refused produce is told
    assert await _partition_answer(moving, version=7) == (ErrorCode.none, 1, 5)
    assert await _described(moving) == (1, 5)

    # The election does what the answer said.
    elected = _image(led, PartitionChangeRecord(str(TOPIC), 0, leader=-1, replicas=(1, 0), isr=(1, 0),
                                                removing_replicas=(0,)),
                     PartitionChangeRecord(str(TOPIC), 0, leader=1, leader_epoch=5, replicas=(1,), isr=(1,),
                                           removing_replicas=()))
    assert await _partition_answer(elected) == (ErrorCode.none, 1, 5)


async def test_a_move_none_of_whose_replicas_may_lead_is_answered_without_a_leader() -> None:
    """The target is fenced and the source died: the election then picks the least loaded broker, which only the
    controller knows, so no leader is guessed; the epoch is still the election's, which earlier answers may have
    named the target at (``metadata.move_leader.settled_epoch`` gives the broker elected instead the next one)."""
    led = PartitionRecord(str(TOPIC), 0, (0,), (0,), 0, 4)
    to_fenced = _image(led, PartitionChangeRecord(str(TOPIC), 0, leader=-1, replicas=(2, 0), isr=(2, 0),
                                                  removing_replicas=(0,)),
                       RegisterBrokerRecord(0, 2, (Endpoint("PLAINTEXT", "127.0.0.1", 9092),), fenced=True))
    assert await _partition_answer(to_fenced) == (ErrorCode.leader_not_available, -1, 5)
    assert await _described(to_fenced) == (-1, 5)


async def test_a_leader_without_the_clients_listener_is_not_named() -> None:
    """As Kafka's metadata cache answers: a live leader with no endpoint on the listener the client came in on is
    LISTENER_NOT_FOUND from v6 (LEADER_NOT_AVAILABLE before), with no leader, since the client could not reach it
    (the response's broker list leaves it out)."""
    internal_only = RegisterBrokerRecord(1, 2, (Endpoint("INTERNAL", "127.0.0.2", 9095),), fenced=False)
    led_by_1 = _image(internal_only, PartitionRecord(str(TOPIC), 0, (1,), (1,), 1, 4))
    assert await _partition_answer(led_by_1) == (ErrorCode.listener_not_found, -1, 4)
    assert await _partition_answer(led_by_1, version=6) == (ErrorCode.listener_not_found, -1, -1)
    assert await _partition_answer(led_by_1, version=5) == (ErrorCode.leader_not_available, -1, -1)
    led_by_0 = _image(internal_only, PartitionRecord(str(TOPIC), 0, (0,), (0,), 0, 4))
    assert await _partition_answer(led_by_0) == (ErrorCode.none, 0, 4)
