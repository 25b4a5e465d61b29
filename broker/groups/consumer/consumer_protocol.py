"""The classic consumer protocol's embedded bytes (ConsumerProtocolSubscription and ConsumerProtocolAssignment), as
a consumer group with classic members reads and writes them.

A classic member's JoinGroup carries its subscription (topics, and from v1 the partitions it still owns, from v3
its rack); its SyncGroup answer carries its assignment. Inside a KIP-848 group the coordinator computes that
assignment itself, so it must parse the one and write the other (Kafka's ``ConsumerProtocol``). Both are a
version (int16) followed by the body of that version; a version newer than the ones known is read as the newest
known (Kafka's rule: newer versions only append fields), and an assignment is written in the version of the
member's subscription, which the member is sure to read.

kio's schema of each version is imported on its first use (:func:`_schema`), as kio itself loads an API's request
and response schemas on the API's first request: only a consumer group with classic members reads or writes these,
and importing all eight at once cost every broker's start (issue 25).
"""

from __future__ import annotations

import importlib
import io
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from types import ModuleType

from kio.serial import entity_reader, entity_writer
from kio.serial.errors import SerialError
from kio.static.primitive import i32

_I16 = struct.Struct(">h")
#: The newest version of each message kio has a schema of; a newer one is read with it.
_NEWEST = 3


@cache
def _schema(message: str, index: int) -> ModuleType:
    """kio's module of ``message`` (``consumer_protocol_subscription`` or ``consumer_protocol_assignment``) in
    version ``index`` (0 to ``_NEWEST``), imported on first use: see the module docstring."""
    return importlib.import_module(f"kio.schema.{message}.v{index}.data")


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
    return version, min(version, _NEWEST)


def parse_subscription(data: bytes) -> Subscription:
    version, index = _split(data)
    try:
        schema = _schema("consumer_protocol_subscription", index).ConsumerProtocolSubscription
        parsed, _ = entity_reader(schema)(data, 2)
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
        schema = _schema("consumer_protocol_assignment", index).ConsumerProtocolAssignment
        parsed, _ = entity_reader(schema)(data, 2)
    except (SerialError, UnicodeDecodeError) as exc:
        raise MalformedProtocolError(str(exc)) from exc
    partitions: dict[str, frozenset[int]] = {}
    for topic in parsed.assigned_partitions:
        name = str(topic.topic)
        partitions[name] = partitions.get(name, frozenset()) | frozenset(int(p) for p in topic.partitions)
    user_data = bytes(parsed.user_data) if parsed.user_data else None
    return ParsedAssignment(partitions, user_data)


def subscription_bytes(topics: Iterable[str]) -> bytes:
    """A ConsumerProtocolSubscription v0 of ``topics`` (no user data), which every client reads: how DescribeGroups
    shows a KIP-848 member's subscription (``classic_view``)."""
    schema = _schema("consumer_protocol_subscription", 0)
    cls = schema.ConsumerProtocolSubscription
    buf = io.BytesIO()
    buf.write(_I16.pack(0))
    entity_writer(cls)(buf, cls(topics=tuple(topics), user_data=None))
    return buf.getvalue()


def assignment_bytes(partitions: Mapping[str, frozenset[int]], version: int) -> bytes:
    """A ConsumerProtocolAssignment in ``version`` (a newer one than known is written as the newest known, as
    Kafka does), topics and partitions sorted."""
    index = min(max(version, 0), _NEWEST)
    schema = _schema("consumer_protocol_assignment", index)
    cls, topic_cls = schema.ConsumerProtocolAssignment, schema.TopicPartition
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
