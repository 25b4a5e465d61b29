"""Where a partition is found in the controller's KV store (DESIGN.md §4: ``<namespace>/<topicId>/<partition>``
holds the partition's meta stream id).

The broker writes the entry when it first opens a partition; the controller reads it to tell whether a moving
partition's streams are closed, and finds the entries of deleted topics (``controller.orphan_streams``). All of them
name and read the key through these two functions.
"""

from __future__ import annotations

import uuid


def partition_kv_key(namespace: str, topic_id: uuid.UUID, partition: int) -> str:
    """The KV key holding partition ``partition`` of topic ``topic_id``'s meta stream id (8 bytes, big-endian)."""
    return f"{namespace}/{topic_id}/{partition}"


def partition_of_kv_key(namespace: str, key: str) -> tuple[uuid.UUID, int] | None:
    """(topic id, partition) of a key :func:`partition_kv_key` made in ``namespace``; None for any other key."""
    prefix = namespace + "/"
    if not key.startswith(prefix):
        return None
    parts = key[len(prefix):].split("/")
    if len(parts) != 2 or not parts[1].isdigit():
        return None
    try:
        return uuid.UUID(parts[0]), int(parts[1])
    except ValueError:
        return None
