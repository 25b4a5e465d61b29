"""KIP-932 membership requests over a raw :class:`WireClient` for the share group tests: a heartbeat and a describe
built from kio's schema, so a test can send exactly the (hostile) values it means to."""

from __future__ import annotations

import base64
import uuid
from typing import Any

from testkit.node_process import WireClient
from wire import codec, schema

SHARE_HEARTBEAT, SHARE_DESCRIBE = 76, 77


def heartbeat(
    client: WireClient,
    group: str,
    member_id: str,
    epoch: int,
    *,
    topics: tuple[str, ...] | None = None,
    rack_id: str | None = None,
) -> Any:
    """ShareGroupHeartbeat v1; ``topics`` None sends a null SubscribedTopicNames (unchanged since the last one)."""
    return client.request(schema.build(
        codec.request_class(SHARE_HEARTBEAT, 1),
        group_id=group,
        member_id=member_id,
        member_epoch=epoch,
        rack_id=rack_id,
        subscribed_topic_names=topics,
    ))


def assigned(response: Any) -> dict[uuid.UUID, tuple[int, ...]]:
    """The assignment a heartbeat response carries (empty when it carries none)."""
    if response.assignment is None:
        return {}
    return {tp.topic_id: tuple(sorted(tp.partitions)) for tp in response.assignment.topic_partitions}


def describe(client: WireClient, group: str) -> Any:
    """ShareGroupDescribe v1 of one group: its described group entity."""
    request_cls = codec.request_class(SHARE_DESCRIBE, 1)
    [described] = client.request(
        schema.build(request_cls, group_ids=(group,), include_authorized_operations=False)
    ).groups
    return described


def share_key(group: str, topic_id: uuid.UUID, partition: int) -> str:
    """A share coordinator key as Kafka's brokers write it: ``groupId:topicId:partition``, the id in base64."""
    return f"{group}:{base64.urlsafe_b64encode(topic_id.bytes).rstrip(b'=').decode()}:{partition}"
