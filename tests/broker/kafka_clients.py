"""Helpers shared by the produce/fetch/offsets tests: a module-scoped broker process and topic helpers.

One broker per test module (started with ``broker_support.start_broker``, like the shared fixtures) keeps the
suite fast; tests use unique topic names so they do not see each other's data.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

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
