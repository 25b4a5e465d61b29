"""The tags of a partition's streams: the topic (by name and id) and partition they hold, and their role.

A broker tags every stream it creates for a partition with them (``fjord metadata shell ls /streams`` shows them),
and the active controller reads them to find the streams of deleted topics that their broker could not delete
(``controller.orphan_streams``). The topic id names the topic exactly; a stream created before streams carried it is
known by its topic's name, which no live topic may hold while the stream is an orphan.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

Tags = tuple[tuple[str, str], ...]

_TOPIC = "topic"
_TOPIC_ID = "topic_id"
_PARTITION = "partition"
_TYPE = "type"


def partition_stream_tags(topic: str, topic_id: uuid.UUID, partition: int, role: str) -> Tags:
    """The tags of partition ``partition``'s ``role`` stream (meta, log, time, txn, shr, cleaned)."""
    return ((_TOPIC, topic), (_TOPIC_ID, str(topic_id)), (_PARTITION, str(partition)), (_TYPE, role))


@dataclass(frozen=True)
class StreamTopic:
    """The topic a stream's tags say it belongs to; ``topic_id`` is None for a stream tagged by name only."""

    name: str
    topic_id: uuid.UUID | None


def stream_topic(tags: Sequence[tuple[str, str]]) -> StreamTopic | None:
    """The topic of a partition's stream, or None for a stream no partition's (or whose topic id is unreadable)."""
    found = dict(tags)
    name = found.get(_TOPIC)
    if name is None:
        return None
    raw_id = found.get(_TOPIC_ID)
    if raw_id is None:
        return StreamTopic(name, None)
    try:
        return StreamTopic(name, uuid.UUID(raw_id))
    except ValueError:
        return None
