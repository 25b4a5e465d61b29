"""What the consumer-group handlers share: finding the coordinator, the member host Kafka reports, the offsets a
commit asks for, the per-partition error answer of the offsets APIs, and the ACL check of a member's requests (the
same for JoinGroup, Heartbeat, LeaveGroup and SyncGroup, so written once here)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from kio.schema.errors import ErrorCode

from broker.groups.offset_commits import OffsetCommit
from broker.handlers.context import RequestContext
from broker.handlers.guards import GROUP_DENIED, Guard, whole
from metadata.acl.binding import AclOperation, ResourceType
from wire import schema


def member_host(ctx: RequestContext) -> str:
    """Kafka reports a member's host as ``/<address>`` (Java's InetAddress.toString); tools print it verbatim."""
    return f"/{ctx.client_host}"


def requested_offsets(request_topics: Iterable[Any]) -> dict[tuple[str, int], OffsetCommit]:
    """The offsets an OffsetCommit or TxnOffsetCommit asks to commit, by (topic, partition)."""
    return {
        (topic.name, p.partition_index): OffsetCommit(
            offset=p.committed_offset,
            leader_epoch=getattr(p, "committed_leader_epoch", -1),
            metadata=p.committed_metadata,
        )
        for topic in request_topics
        for p in topic.partitions
    }


def partition_errors(
    response_cls: type[Any], request_topics: Iterable[Any], codes: Mapping[tuple[str, int], ErrorCode]
) -> tuple[Any, ...]:
    """The ``topics`` of a response that answers every requested partition with only an error code (OffsetCommit,
    OffsetDelete), in request order; a partition ``codes`` does not mention succeeded."""
    topic_cls = schema.field_entity(response_cls, "topics")
    return tuple(
        schema.build(
            topic_cls,
            name=topic.name,
            partitions=tuple(
                schema.build_nested(
                    topic_cls,
                    "partitions",
                    partition_index=p.partition_index,
                    error_code=codes.get((topic.name, p.partition_index), ErrorCode.none),
                )
                for p in topic.partitions
            ),
        )
        for topic in request_topics
    )


def _group_id(request: Any) -> str:
    return str(request.group_id)


#: The check of a member's requests (JoinGroup, Heartbeat, LeaveGroup, SyncGroup): GROUP READ, as Kafka checks; a
#: refusal refuses the whole request.
authorize_group_member: Final[Guard] = whole(ResourceType.GROUP, AclOperation.READ, _group_id, GROUP_DENIED)
