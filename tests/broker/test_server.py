"""The network layer against a real broker process: pipelining, request size limit, metrics, Metadata."""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from testkit.node_process import BrokerProcess, WireClient, api_versions_request
from testkit.waiting import eventually
from tests.metrics_scrape import metrics_url, sample, scrape
from tests.topics import create_topic
from wire import codec, schema


def metadata_request(version: int, topics: list[str] | None, allow_auto: bool = True) -> Any:
    cls = codec.request_class(3, version)
    entries = None if topics is None else tuple(schema.build_nested(cls, "topics", name=t) for t in topics)
    if version == 0 and entries is None:
        entries = ()
    return schema.build(cls, topics=entries, allow_auto_topic_creation=allow_auto)


def test_pipelined_requests_are_answered_in_order(
    shared_broker: BrokerProcess, wire: Callable[[int], WireClient]
) -> None:
    broker = shared_broker
    client = wire(broker.port)
    sent: list[tuple[int, int, int]] = []
    for i in range(30):
        if i % 3 == 0:
            request = metadata_request(12, None)
        elif i % 3 == 1:
            request = api_versions_request(3)
        else:
            request = metadata_request(1, None)
        correlation_id = 1000 + i
        client.send(request, correlation_id=correlation_id)
        sent.append((correlation_id, type(request).__api_key__, type(request).__version__))
    for correlation_id, key, version in sent:
        got, body = client.receive(key, version)
        assert got == correlation_id
        if key == 3:
            assert [b.node_id for b in body.brokers] == [broker.node_id]
        else:
            assert body.error_code == ErrorCode.none


def test_oversized_request_closes_only_that_connection(
    broker_factory: Callable[..., BrokerProcess], wire: Callable[[int], WireClient]
) -> None:
    node = broker_factory({"socket.request.max.bytes": "2048"})
    good = wire(node.port)
    bad = wire(node.port)
    bad.send_raw(struct.pack(">i", 4096) + b"\0" * 64)
    assert bad.is_closed_by_peer()
    # A large but allowed request on another connection is still served.
    assert good.request(metadata_request(12, None)).brokers[0].port == node.port
    assert "socket.request.max.bytes" in node.log_text()


def test_metadata_reports_broker_cluster_and_topic_ids_across_restart(
    broker_factory: Callable[..., BrokerProcess], wire: Callable[[int], WireClient]
) -> None:
    first = broker_factory()
    client = wire(first.port)
    created = create_topic(client, "orders", partitions=3)
    topic_id = created.topic_id
    assert isinstance(topic_id, uuid.UUID) and topic_id.int != 0
    response = client.request(metadata_request(12, ["orders"]))
    topic = response.topics[0]
    assert topic.error_code == ErrorCode.none and topic.topic_id == topic_id
    assert sorted(p.partition_index for p in topic.partitions) == [0, 1, 2]
    assert all(p.leader_id == first.node_id and p.replica_nodes == (first.node_id,) for p in topic.partitions)
    assert response.cluster_id and response.controller_id == first.node_id
    cluster_id = response.cluster_id
    client.close()
    assert first.stop() == 0

    second = broker_factory(data_dir=first.data_dir)
    again = wire(second.port).request(metadata_request(12, ["orders"]))
    assert again.cluster_id == cluster_id
    assert again.topics[0].topic_id == topic_id
    assert all(p.leader_epoch > q.leader_epoch for p, q in zip(
        sorted(again.topics[0].partitions, key=lambda p: p.partition_index),
        sorted(topic.partitions, key=lambda p: p.partition_index), strict=True))


def test_metadata_every_version_and_topic_errors(
    shared_broker: BrokerProcess, wire: Callable[[int], WireClient]
) -> None:
    broker = shared_broker
    client = wire(broker.port)
    create_topic(client, "present", partitions=2)
    for version in range(0, 13):
        response = client.request(metadata_request(version, None))
        names = {t.name for t in response.topics}
        assert "present" in names, (version, response)
        assert response.brokers[0].port == broker.port
    missing = client.request(metadata_request(12, ["absent"], allow_auto=False)).topics[0]
    assert missing.error_code == ErrorCode.unknown_topic_or_partition
    invalid = client.request(metadata_request(12, ["bad/name"])).topics[0]
    assert invalid.error_code == ErrorCode.invalid_topic_exception


def test_metadata_auto_creates_topics(shared_broker: BrokerProcess, wire: Callable[[int], WireClient]) -> None:
    broker = shared_broker
    client = wire(broker.port)
    first = client.request(metadata_request(9, ["auto-made"])).topics[0]
    assert first.error_code == ErrorCode.unknown_topic_or_partition  # retriable: as a Kafka 4 (KRaft) broker answers
    # The metadata log's name cannot be created: refused by the controller, yet answered with the same retriable
    # code, as Kafka's brokers answer every name they send on to the controller.
    metadata_log = client.request(metadata_request(9, ["__cluster_metadata"])).topics[0]
    assert metadata_log.error_code == ErrorCode.unknown_topic_or_partition
    topic = eventually(lambda: client.request(metadata_request(9, ["auto-made"])).topics[0],
                       until=lambda topic: topic.error_code == ErrorCode.none, timeout=10,
                       what="the auto-created topic to be ready")
    assert len(topic.partitions) == 1  # num.partitions


def test_metadata_by_topic_id(shared_broker: BrokerProcess, wire: Callable[[int], WireClient]) -> None:
    broker = shared_broker
    client = wire(broker.port)
    topic_id = create_topic(client, "by-id").topic_id
    cls = codec.request_class(3, 12)
    request = schema.build(cls, topics=(schema.build_nested(cls, "topics", topic_id=topic_id, name=None),))
    found = client.request(request).topics[0]
    assert (found.error_code, found.name) == (ErrorCode.none, "by-id")
    unknown = schema.build(cls, topics=(schema.build_nested(cls, "topics", topic_id=uuid.uuid4(), name=None),))
    assert client.request(unknown).topics[0].error_code == ErrorCode.unknown_topic_id


def test_metrics_port_serves_connection_and_request_counts(
    broker_factory: Callable[..., BrokerProcess], wire: Callable[[int], WireClient]
) -> None:
    node = broker_factory({"metrics.port": "0"})
    url = metrics_url(node.log_text())
    client = wire(node.port)
    for _ in range(3):
        client.request(metadata_request(12, None))
    text = scrape(url)
    served = sample(text, "fjord_broker_requests_total", '{api="Metadata"}')
    assert served is not None and served >= 3
    open_now = sample(text, "fjord_broker_connections", '{listener="PLAINTEXT"}')
    assert open_now is not None and open_now >= 1
