"""Creating and deleting a topic for a test: CreateTopics v7 and DeleteTopics v6 over the wire, independent of any
client library's admin API."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from testkit.node_process import WireClient
from wire import codec, schema

TIMEOUT_MS = 30_000


def create_topic(
    target: str | WireClient,
    name: str,
    partitions: int = 1,
    config: Mapping[str, str] | None = None,
    *,
    replication_factor: int = 1,
    check: bool = True,
) -> Any:
    """Creates ``name`` through ``target``: an open :class:`WireClient`, or a bootstrap string (``host:port,...``,
    whose brokers are tried in turn until one accepts the connection). Returns the response's topic result; with
    ``check`` (the default) asserts that the topic was created."""
    request_cls = codec.request_class(19, 7)
    topic_cls = schema.field_entity(request_cls, "topics")
    config_cls = schema.field_entity(topic_cls, "configs")
    topic = schema.build(
        topic_cls,
        name=name,
        num_partitions=partitions,
        replication_factor=replication_factor,
        configs=tuple(schema.build(config_cls, name=k, value=v) for k, v in (config or {}).items()),
    )
    request = schema.build(request_cls, topics=(topic,), timeout=TIMEOUT_MS, validate_only=False)
    if isinstance(target, WireClient):
        response = target.request(request)
    else:
        with _connect(target) as client:
            response = client.request(request)
    result = response.topics[0]
    if check:
        assert result.error_code == ErrorCode.none, f"creating {name}: {result.error_code!r} {result.error_message}"
    return result


def delete_topic(bootstrap: str, name: str) -> None:
    """Deletes ``name`` through the brokers of ``bootstrap``; asserts it was deleted (once the controller committed
    it, as Kafka answers)."""
    request_cls = codec.request_class(20, 6)
    topic_cls = schema.field_entity(request_cls, "topics")
    request = schema.build(request_cls, topics=(schema.build(topic_cls, name=name),), timeout_ms=TIMEOUT_MS)
    with _connect(bootstrap) as client:
        (result,) = client.request(request).responses
    assert result.error_code == ErrorCode.none, f"deleting {name}: {result.error_code!r} {result.error_message}"


def _connect(bootstrap: str) -> WireClient:
    refused: list[str] = []
    for address in bootstrap.split(","):
        host, port = address.strip().rsplit(":", 1)
        try:
            return WireClient(int(port), host=host, timeout=TIMEOUT_MS / 1000 + 10)
        except OSError as exc:
            refused.append(f"{address}: {exc}")
    raise AssertionError(f"no broker of {bootstrap} accepted a connection: {refused}")
