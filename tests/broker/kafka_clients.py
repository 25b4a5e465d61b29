"""Helpers shared by the produce/fetch/offsets tests: a module-scoped broker process and topic helpers.

One broker per test module (started with ``broker_support.start_broker``, like the shared fixtures) keeps the
suite fast; tests use unique topic names so they do not see each other's data.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from broker_support import BrokerProcess, WireClient, start_broker
from kio.schema.errors import ErrorCode

from broker.protocol import codec


def module_broker(data_dir: Path, overrides: dict[str, str] | None = None) -> Iterator[BrokerProcess]:
    """Starts a broker for a whole test module and stops it (SIGTERM, exit 0) afterwards."""
    process = start_broker(data_dir, overrides)
    try:
        yield process
    finally:
        code = process.stop()
    assert code == 0, process.log_text()


def topic_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(bootstrap: str, name: str, partitions: int = 1, config: dict[str, str] | None = None) -> None:
    """CreateTopics v7 over the wire (independent of any client library's admin API)."""
    request_cls = codec.request_class(19, 7)
    topic_cls = codec.field_entity(request_cls, "topics")
    config_cls = codec.field_entity(topic_cls, "configs")
    topic = codec.build(
        topic_cls,
        name=name,
        num_partitions=partitions,
        replication_factor=1,
        configs=tuple(codec.build(config_cls, name=k, value=v) for k, v in (config or {}).items()),
    )
    request = codec.build(request_cls, topics=(topic,), timeout=15_000, validate_only=False)
    port = int(bootstrap.rsplit(":", 1)[1])
    with WireClient(port) as client:
        response = client.request(request)
    result = response.topics[0]
    assert result.error_code == ErrorCode.none, f"creating {name}: {result.error_code!r} {result.error_message}"


def produce_request(topic: str, partition: int, records: bytes, *, acks: int = -1, version: int = 9) -> Any:
    request_cls = codec.request_class(0, version)
    topic_cls = codec.field_entity(request_cls, "topic_data")
    part_cls = codec.field_entity(topic_cls, "partition_data")
    data = codec.build(topic_cls, name=topic, partition_data=(codec.build(part_cls, index=partition, records=records),))
    return codec.build(request_cls, transactional_id=None, acks=acks, timeout=10_000, topic_data=(data,))


def fetch_request(
    topic: str | None,
    partition: int,
    offset: int,
    *,
    version: int = 12,
    max_wait_ms: int = 0,
    min_bytes: int = 1,
    session_id: int = 0,
    session_epoch: int = -1,
    partition_max_bytes: int = 1 << 20,
) -> Any:
    """A consumer Fetch for one partition (``topic=None``: no partitions, e.g. an empty incremental fetch)."""
    request_cls = codec.request_class(1, version)
    topic_cls = codec.field_entity(request_cls, "topics")
    part_cls = codec.field_entity(topic_cls, "partitions")
    topics: tuple[Any, ...] = ()
    if topic is not None:
        part = codec.build(
            part_cls,
            partition=partition,
            fetch_offset=offset,
            partition_max_bytes=partition_max_bytes,
            current_leader_epoch=-1,
            last_fetched_epoch=-1,
            log_start_offset=-1,
        )
        topics = (codec.build(topic_cls, topic=topic, partitions=(part,)),)
    return codec.build(
        request_cls,
        replica_id=-1,
        max_wait=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=50 << 20,
        isolation_level=0,
        session_id=session_id,
        session_epoch=session_epoch,
        topics=topics,
        forgotten_topics_data=(),
        rack_id="",
    )


def list_offsets_request(topic: str, partition: int, timestamp: int, *, version: int = 8) -> Any:
    request_cls = codec.request_class(2, version)
    topic_cls = codec.field_entity(request_cls, "topics")
    part_cls = codec.field_entity(topic_cls, "partitions")
    part = codec.build(part_cls, partition_index=partition, current_leader_epoch=-1, timestamp=timestamp)
    return codec.build(
        request_cls, replica_id=-1, isolation_level=0, topics=(codec.build(topic_cls, name=topic, partitions=(part,)),)
    )


def init_producer_id(client: WireClient) -> tuple[int, int]:
    request = codec.build(
        codec.request_class(22, 4), transactional_id=None, transaction_timeout=60_000, producer_id=-1, producer_epoch=-1
    )
    response = client.request(request)
    assert response.error_code == ErrorCode.none
    return int(response.producer_id), int(response.producer_epoch)
