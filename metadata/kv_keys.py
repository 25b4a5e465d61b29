"""Where a partition is found in the controller's KV store (DESIGN.md §4: ``<namespace>/<topicId>/<partition>``
holds the partition's meta stream id).

The broker writes the entry when it first opens a partition; the controller reads it to tell whether a moving
partition's streams are closed. Both name the key through this one function.
"""

from __future__ import annotations

import uuid


def partition_kv_key(namespace: str, topic_id: uuid.UUID, partition: int) -> str:
    """The KV key holding partition ``partition`` of topic ``topic_id``'s meta stream id (8 bytes, big-endian)."""
    return f"{namespace}/{topic_id}/{partition}"
