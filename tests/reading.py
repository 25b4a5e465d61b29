"""Reading a topic back to its end with a real consumer (confluent-kafka), as the transaction tests check it: what
a consumer at a given isolation level sees, from offset 0 to the end of every partition (for read_committed, the
last stable offset)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition


def read_to_end(
    bootstrap: str,
    topic: str,
    partitions: int,
    *,
    isolation: str = "read_committed",
    timeout: float = 60.0,
    settings: Mapping[str, Any] | None = None,
) -> list[tuple[int, bytes]]:
    """(partition, value) of every record ``isolation`` lets a consumer see, in offset order per partition.
    ``settings``: more client settings (security.protocol, SASL and TLS of a secured listener)."""
    consumer = Consumer(
        {
            **(settings or {}),
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex[:8]}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        at_end: set[int] = set()
        out: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + timeout
        while len(at_end) < partitions:
            assert time.monotonic() < deadline, f"read {len(out)} records of {topic}; partitions at end: {at_end}"
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                at_end.add(msg.partition())
                continue
            at_end.discard(msg.partition())
            out.append((msg.partition(), msg.value() or b""))
        return out
    finally:
        consumer.close()
