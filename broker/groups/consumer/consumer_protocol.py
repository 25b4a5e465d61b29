"""The classic consumer protocol's embedded bytes (ConsumerProtocolSubscription and ConsumerProtocolAssignment), as
a consumer group with classic members reads and writes them.

A classic member's JoinGroup carries its subscription (topics, and from v1 the partitions it still owns, from v3
its rack); its SyncGroup answer carries its assignment. Inside a KIP-848 group the coordinator computes that
assignment itself, so it must parse the one and write the other (Kafka's ``ConsumerProtocol``). Both are a
version (int16) followed by the body of that version; a version newer than the ones known is read as the newest
known (Kafka's rule: newer versions only append fields), and an assignment is written in the version of the
member's subscription, which the member is sure to read.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kio.schema.consumer_protocol_assignment.v0 import data as assignment_v0
from kio.schema.consumer_protocol_assignment.v1 import data as assignment_v1
from kio.schema.consumer_protocol_assignment.v2 import data as assignment_v2
from kio.schema.consumer_protocol_assignment.v3 import data as assignment_v3
from kio.schema.consumer_protocol_subscription.v0.data import ConsumerProtocolSubscription as SubscriptionV0
from kio.schema.consumer_protocol_subscription.v1.data import ConsumerProtocolSubscription as SubscriptionV1
from kio.schema.consumer_protocol_subscription.v2.data import ConsumerProtocolSubscription as SubscriptionV2
from kio.schema.consumer_protocol_subscription.v3.data import ConsumerProtocolSubscription as SubscriptionV3
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import SerialError
from kio.static.primitive import i32

_I16 = struct.Struct(">h")
_SUBSCRIPTIONS: tuple[Any, ...] = (SubscriptionV0, SubscriptionV1, SubscriptionV2, SubscriptionV3)
_ASSIGNMENT_MODULES = (assignment_v0, assignment_v1, assignment_v2, assignment_v3)
_ASSIGNMENTS: tuple[Any, ...] = tuple(m.ConsumerProtocolAssignment for m in _ASSIGNMENT_MODULES)
_ASSIGNMENT_TOPICS: tuple[Any, ...] = tuple(m.TopicPartition for m in _ASSIGNMENT_MODULES)


class MalformedProtocolError(ValueError):
    """The embedded bytes are not a consumer protocol message."""


@dataclass(frozen=True, slots=True)
class Subscription:
    version: int
    topics: tuple[str, ...]
    #: Partitions the member owns, by topic name (v1+; empty for v0, as Kafka reads it).
    owned: Mapping[str, frozenset[int]]
    rack_id: str | None


@dataclass(frozen=True, slots=True)
class ParsedAssignment:
    partitions: Mapping[str, frozenset[int]]
    #: A custom assignor's user data; a group that carries some cannot move to the server-side assignors.
    user_data: bytes | None


def _split(data: bytes) -> tuple[int, int]:
    """(the version, the index of the schema to read it with)."""
    if len(data) < 2:
        raise MalformedProtocolError("no version")
    (version,) = _I16.unpack_from(data)
    if version < 0:
        raise MalformedProtocolError(f"negative version {version}")
    return version, min(version, 3)


def parse_subscription(data: bytes) -> Subscription:
    version, index = _split(data)
    try:
        parsed, _ = entity_reader(_SUBSCRIPTIONS[index])(data, 2)
    except (SerialError, UnicodeDecodeError) as exc:
        raise MalformedProtocolError(str(exc)) from exc
    owned: dict[str, frozenset[int]] = {}
    for topic in getattr(parsed, "owned_partitions", ()):
        owned[str(topic.topic)] = owned.get(str(topic.topic), frozenset()) | frozenset(int(p) for p in topic.partitions)
    return Subscription(version, tuple(parsed.topics), owned, getattr(parsed, "rack_id", None))


def subscription_version(data: bytes) -> int:
    """The version of a subscription, the one its member reads assignments in (0 when unreadable)."""
    try:
        return _split(data)[0]
    except MalformedProtocolError:
        return 0


def parse_assignment(data: bytes) -> ParsedAssignment:
    """A classic member's last assignment; empty bytes (a member that never synced) is no partition."""
    if not data:
        return ParsedAssignment({}, None)
    _, index = _split(data)
    try:
        parsed, _ = entity_reader(_ASSIGNMENTS[index])(data, 2)
    except (SerialError, UnicodeDecodeError) as exc:
        raise MalformedProtocolError(str(exc)) from exc
    partitions: dict[str, frozenset[int]] = {}
    for topic in parsed.assigned_partitions:
        name = str(topic.topic)
        partitions[name] = partitions.get(name, frozenset()) | frozenset(int(p) for p in topic.partitions)
    user_data = bytes(parsed.user_data) if parsed.user_data else None
    return ParsedAssignment(partitions, user_data)


def assignment_bytes(partitions: Mapping[str, frozenset[int]], version: int) -> bytes:
    """A ConsumerProtocolAssignment in ``version`` (a newer one than known is written as the newest known, as
    Kafka does), topics and partitions sorted."""
    index = min(max(version, 0), 3)
    cls, topic_cls = _ASSIGNMENTS[index], _ASSIGNMENT_TOPICS[index]
    entity = cls(
        assigned_partitions=tuple(
            topic_cls(topic=name, partitions=tuple(i32(p) for p in sorted(ps)))
            for name, ps in sorted(partitions.items())
            if ps
        ),
        user_data=None,
    )
    buf = io.BytesIO()
    buf.write(_I16.pack(index))
    entity_writer(cls)(buf, entity)
    return buf.getvalue()
