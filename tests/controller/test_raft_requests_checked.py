"""A CONTROLLER listener answers a well-formed Raft request it will not act on with Kafka's error, on the same
connection, and the voter that got it does not move: three voters in this process over real TCP.

A Raft request for another partition than ``__cluster_metadata``-0 is answered as Kafka's KafkaRaftClient answers
it (INCONSISTENT_CLUSTER_ID first if it names another cluster, else INVALID_REQUEST; a FetchSnapshot of one other
partition gets UNKNOWN_TOPIC_OR_PARTITION on it) where the connection used to be closed; a BeginQuorumEpoch of
another cluster no longer makes a follower follow that cluster's leader.
"""

from __future__ import annotations

import time
from typing import Any

from kio.schema.errors import ErrorCode

from controller.quorum import QuorumController
from metadata.rpc.connection import ControllerConnection
from metadata.rpc.kafka_apis import (
    BEGIN_QUORUM_EPOCH,
    FETCH,
    FETCH_SNAPSHOT,
    KAFKA_API_VERSIONS,
    METADATA_TOPIC,
    VOTE,
)
from metadata.rpc.raft_codec import describe_quorum_request
from raft.effects import Role
from testkit.waiting import eventually_async
from tests.quorum_fixtures import active_voter
from wire import codec, schema


def _request(api_key: int, topic_field: str, topic: str, partitions: list[dict[str, Any]], **top: Any) -> Any:
    cls = codec.request_class(api_key, KAFKA_API_VERSIONS[api_key][1])
    topic_cls = schema.field_entity(cls, "topics")
    parts = tuple(schema.build_nested(topic_cls, "partitions", **p) for p in partitions)
    return schema.build(cls, topics=(schema.build(topic_cls, **{topic_field: topic, "partitions": parts}),), **top)


def _vote(cluster_id: str, topic: str, partition: int) -> Any:
    return _request(VOTE, "topic_name", topic, [{
        "partition_index": partition, "replica_epoch": 50, "replica_id": 2, "last_offset_epoch": 1,
        "last_offset": 1,
    }], cluster_id=cluster_id)


async def _connect(quorum: QuorumController) -> ControllerConnection:
    host, port = quorum.voters[quorum.node_id]
    connection = ControllerConnection(host, port, client_id="raft-checks")
    await connection.connect(timeout=5)
    return connection


async def test_a_raft_request_for_another_partition_is_answered_on_the_same_connection(
    voters: list[QuorumController],
) -> None:
    leader = await active_voter(voters)
    follower = next(q for q in voters if q is not leader)
    epoch = follower.driver.epoch
    own = follower.cluster_id
    connection = await _connect(follower)
    try:
        for request in (_vote(own, "__consumer_offsets", 0), _vote(own, METADATA_TOPIC, 1)):
            answer = await connection.request(request)
            assert answer.error_code == ErrorCode.invalid_request and not answer.topics
        fetch = _request(FETCH, "topic", "orders", [{"partition": 0, "fetch_offset": 0}], cluster_id="another",
                         replica_id=2, max_wait=10)
        answer = await connection.request(fetch)
        assert answer.error_code == ErrorCode.inconsistent_cluster_id and not answer.responses
        snapshot = _request(FETCH_SNAPSHOT, "name", "orders", [{"partition": 3}], cluster_id=own, replica_id=2)
        answer = await connection.request(snapshot)
        assert answer.error_code == ErrorCode.none
        [topic] = answer.topics
        [partition] = topic.partitions
        assert (topic.name, partition.index, partition.error_code) == ("orders", 3,
                                                                        ErrorCode.unknown_topic_or_partition)
        two = _request(FETCH_SNAPSHOT, "name", METADATA_TOPIC, [{"partition": 0}, {"partition": 1}],
                       cluster_id=own, replica_id=2)
        answer = await connection.request(two)
        assert answer.error_code == ErrorCode.invalid_request
        # Still the same connection: a DescribeQuorum on it is answered (by a follower: not the leader).
        described = await connection.request(describe_quorum_request())
        assert described.topics[0].partitions[0].error_code == ErrorCode.not_leader_or_follower
    finally:
        await connection.close()
    assert follower.driver.epoch == epoch and follower.driver.role is Role.FOLLOWER


async def test_a_begin_quorum_epoch_of_another_cluster_leaves_the_follower_with_its_leader(
    voters: list[QuorumController],
) -> None:
    leader = await active_voter(voters)
    follower = next(q for q in voters if q is not leader)
    epoch = follower.driver.epoch
    other = next(q for q in voters if q is not leader and q is not follower)
    request = _request(BEGIN_QUORUM_EPOCH, "topic_name", METADATA_TOPIC, [{
        "partition_index": 0, "leader_id": other.node_id, "leader_epoch": epoch + 5,
    }], cluster_id="another-cluster", voter_id=follower.node_id)
    connection = await _connect(follower)
    try:
        answer = await connection.request(request)
    finally:
        await connection.close()
    [partition] = answer.topics[0].partitions
    assert partition.error_code == ErrorCode.inconsistent_cluster_id
    assert (partition.leader_id, partition.leader_epoch) == (leader.node_id, epoch)
    assert (follower.driver.epoch, follower.driver.role, follower.leader_id) == (epoch, Role.FOLLOWER,
                                                                                  leader.node_id)
    # It still fetches from its leader, which it would not do while following the other cluster's.
    asked_at_ms = time.time() * 1000
    connection = await _connect(leader)

    async def fetched_since() -> bool:
        described = await connection.request(describe_quorum_request())
        partition = described.topics[0].partitions[0]
        state = next(v for v in partition.current_voters if v.replica_id == follower.node_id)
        return bool(partition.leader_epoch == epoch and state.last_fetch_timestamp > asked_at_ms)

    try:
        await eventually_async(fetched_since, timeout=10, what=f"voter {follower.node_id} fetching again")
    finally:
        await connection.close()
