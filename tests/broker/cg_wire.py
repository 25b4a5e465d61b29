"""KIP-848 requests over a raw :class:`WireClient` for the consumer group tests: a heartbeat, a describe, a commit and
a fetch, each built from kio's schema so a test can send exactly the (hostile) values it means to."""

from __future__ import annotations

import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from testkit.node_process import WireClient
from testkit.waiting import eventually
from wire import codec, schema

HEARTBEAT, DESCRIBE, OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR = 68, 69, 8, 9, 10


def await_coordinator(client: WireClient, group: str) -> None:
    """FindCoordinator v4 until the group's coordinator is ready, as a client does before its first heartbeat (the
    first one also creates ``__consumer_offsets``, and a coordinator answers NOT_COORDINATOR until it is loaded)."""
    request = schema.build(codec.request_class(FIND_COORDINATOR, 4), key_type=0, coordinator_keys=(group,))
    eventually(lambda: client.request(request).coordinators[0].error_code, until=lambda e: e == ErrorCode.none,
               timeout=20, interval=0.1, what=f"the coordinator of {group}")


def heartbeat(
    client: WireClient,
    group: str,
    member_id: str,
    epoch: int,
    *,
    topics: tuple[str, ...] | None = None,
    regex: str | None = None,
    rebalance_timeout_ms: int = 30_000,
    assignor: str | None = None,
    owned: dict[uuid.UUID, tuple[int, ...]] | None = None,
    instance_id: str | None = None,
) -> Any:
    """ConsumerGroupHeartbeat v1; ``owned`` None sends a null TopicPartitions (unchanged since the last one)."""
    request_cls = codec.request_class(HEARTBEAT, 1)
    partitions = None
    if owned is not None:
        partitions = tuple(
            schema.build_nested(request_cls, "topic_partitions", topic_id=tid, partitions=p) for tid, p in owned.items()
        )
    return client.request(schema.build(
        request_cls,
        group_id=group,
        member_id=member_id,
        member_epoch=epoch,
        instance_id=instance_id,
        rebalance_timeout=rebalance_timeout_ms,
        subscribed_topic_names=topics,
        subscribed_topic_regex=regex,
        server_assignor=assignor,
        topic_partitions=partitions,
    ))


def assigned(response: Any) -> dict[uuid.UUID, tuple[int, ...]]:
    """The assignment a heartbeat response carries (empty when it carries none)."""
    if response.assignment is None:
        return {}
    return {tp.topic_id: tuple(tp.partitions) for tp in response.assignment.topic_partitions}


def describe(client: WireClient, group: str) -> Any:
    """ConsumerGroupDescribe v1 of one group: its described group entity."""
    request_cls = codec.request_class(DESCRIBE, 1)
    [described] = client.request(
        schema.build(request_cls, group_ids=(group,), include_authorized_operations=False)
    ).groups
    return described


def commit(client: WireClient, group: str, member_id: str, epoch: int, *, topic: str, offsets: dict[int, int],
           version: int = 9) -> dict[int, int]:
    """OffsetCommit (v9 by default) of ``offsets`` as a member at ``epoch``: the error code of each partition."""
    request_cls = codec.request_class(OFFSET_COMMIT, version)
    topic_cls = schema.field_entity(request_cls, "topics")
    partitions = tuple(
        schema.build_nested(topic_cls, "partitions", partition_index=p, committed_offset=o,
                            committed_leader_epoch=-1, committed_metadata="")
        for p, o in offsets.items()
    )
    response = client.request(schema.build(
        request_cls,
        group_id=group,
        generation_id_or_member_epoch=epoch,
        member_id=member_id,
        group_instance_id=None,
        topics=(schema.build(topic_cls, name=topic, partitions=partitions),),
    ))
    return {p.partition_index: p.error_code for t in response.topics for p in t.partitions}


def fetch_offsets(client: WireClient, group: str, member_id: str | None, epoch: int, *, topic: str,
                  partitions: tuple[int, ...]) -> Any:
    """OffsetFetch v9 of one group as a member at ``epoch``: the response's one group."""
    request_cls = codec.request_class(OFFSET_FETCH, 9)
    group_cls = schema.field_entity(request_cls, "groups")
    topics = (schema.build_nested(group_cls, "topics", name=topic, partition_indexes=partitions),)
    response = client.request(schema.build(
        request_cls,
        groups=(schema.build(group_cls, group_id=group, member_id=member_id, member_epoch=epoch, topics=topics),),
        require_stable=False,
    ))
    [answer] = response.groups
    return answer
