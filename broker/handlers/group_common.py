"""What the consumer-group handlers share: finding the coordinator, the member host Kafka reports, the offsets a
commit asks for, the per-partition error answer of the offsets APIs, and the ACL check of a member's requests (the
same for JoinGroup, Heartbeat, LeaveGroup and SyncGroup, so written once here)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
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


def _name(topic: Any) -> str | None:
    return str(topic.name)


def requested_offsets(
    request_topics: Iterable[Any], name_of: Callable[[Any], str | None] = _name
) -> dict[tuple[str, int], OffsetCommit]:
    """The offsets an OffsetCommit or TxnOffsetCommit asks to commit, by (topic, partition); ``name_of`` names a
    request topic (OffsetCommit v10 sends ids), and a topic it cannot name (None) is left out."""
    return {
        (name, p.partition_index): OffsetCommit(
            offset=p.committed_offset,
            leader_epoch=getattr(p, "committed_leader_epoch", -1),
            metadata=p.committed_metadata,
        )
        for topic in request_topics
        if (name := name_of(topic)) is not None
        for p in topic.partitions
    }


def partition_errors(
    response_cls: type[Any],
    request_topics: Iterable[Any],
    codes: Mapping[tuple[str, int], ErrorCode],
    name_of: Callable[[Any], str | None] = _name,
    unnamed: ErrorCode = ErrorCode.unknown_topic_id,
) -> tuple[Any, ...]:
    """The ``topics`` of a response that answers every requested partition with only an error code (OffsetCommit,
    OffsetDelete), in request order; a partition ``codes`` does not mention succeeded. A topic ``name_of`` cannot
    name (an unknown topic id) answers ``unnamed`` for each partition; versions with ids echo the topic's id."""
    topic_cls = schema.field_entity(response_cls, "topics")
    out = []
    for topic in request_topics:
        name = name_of(topic)
        out.append(
            schema.build(
                topic_cls,
                name=name or "",
                topic_id=getattr(topic, "topic_id", None),
                partitions=tuple(
                    schema.build_nested(
                        topic_cls,
                        "partitions",
                        partition_index=p.partition_index,
                        error_code=unnamed if name is None else codes.get((name, p.partition_index), ErrorCode.none),
                    )
                    for p in topic.partitions
                ),
            )
        )
    return tuple(out)


def _group_id(request: Any) -> str:
    return str(request.group_id)


#: The check of a member's requests (JoinGroup, Heartbeat, LeaveGroup, SyncGroup): GROUP READ, as Kafka checks; a
#: refusal refuses the whole request.
authorize_group_member: Final[Guard] = whole(ResourceType.GROUP, AclOperation.READ, _group_id, GROUP_DENIED)
