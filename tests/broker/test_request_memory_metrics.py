"""``/metrics`` shows the node's request memory pool (``queued.max.request.bytes``) at work, with a real node.

An operator whose clients see produce latency grow must be able to tell a full pool from anything else: the bytes
reserved and the bound, how many connections are waiting for room now, and how many requests waited and for how
long in all. A request larger than a connection's staging buffer, half sent, holds its claimed size; a second one
that does not fit waits; both are then served and the pool is empty again.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from kio.schema.errors import ErrorCode

from testkit.node_process import BrokerProcess, WireClient, api_versions_request
from testkit.waiting import eventually
from tests.broker.kafka_clients import produce_request, topic_name
from tests.metrics_scrape import metrics_url, sample, scrape
from tests.topics import create_topic
from wire import codec
from wire.record_batch import Record, build_batch

MIB = 1024 * 1024
CLIENT = '{pool="client"}'


def _frame(topic: str, correlation_id: int) -> bytes:
    """A Produce of ~700 KiB: two do not fit a 1 MiB pool."""
    batch = build_batch([Record(key=None, value=os.urandom(1000), headers=(), timestamp=None) for _ in range(700)])
    return codec.encode_request(produce_request(topic, 0, batch), correlation_id, "pool-metrics")


def _pool(url: str) -> dict[str, float | None]:
    text = scrape(url)
    names = ("used_bytes", "limit_bytes", "waiting_connections", "waits_total", "wait_seconds_total")
    return {name: sample(text, f"fjord_broker_request_memory_{name}", CLIENT) for name in names}


def test_the_pool_in_use_and_the_requests_waiting_for_it_are_on_metrics(
    broker_factory: Callable[..., BrokerProcess], wire: Callable[[int], WireClient]
) -> None:
    broker = broker_factory({"queued.max.request.bytes": str(MIB), "metrics.port": "0"})
    url = metrics_url(broker.log_text())
    topic = topic_name("pool-metrics")
    create_topic(broker.bootstrap, topic)
    assert _pool(url) == {
        "used_bytes": 0,
        "limit_bytes": MIB,
        "waiting_connections": 0,
        "waits_total": 0,
        "wait_seconds_total": 0,
    }

    first, second, probe = wire(broker.port), wire(broker.port), wire(broker.port)
    frame_a, frame_b = _frame(topic, 7), _frame(topic, 8)
    first.send_raw(frame_a[: len(frame_a) // 2])  # past the staging buffer: its whole claim is reserved
    probe.request(api_versions_request(3))  # a round trip after it: the broker has read the first half by then
    # The probe's own request gives its few bytes back once its answer is written, which the probe may see first.
    held = eventually(
        lambda: _pool(url),
        timeout=10,
        what="the first request's claim alone to be held",
        until=lambda pool: pool["used_bytes"] == len(frame_a) - 4,
    )
    assert held["waiting_connections"] == 0

    second.send_raw(frame_b)
    waiting = eventually(
        lambda: _pool(url),
        timeout=10,
        what="the second request to wait for the pool",
        until=lambda pool: pool["waiting_connections"] == 1,
    )
    assert waiting["waits_total"] == 1 and waiting["used_bytes"] == len(frame_a) - 4

    first.send_raw(frame_a[len(frame_a) // 2 :])
    for client, correlation_id in ((first, 7), (second, 8)):
        got, body = client.receive(0, 9)
        assert got == correlation_id and body.responses[0].partition_responses[0].error_code == ErrorCode.none
    after = eventually(
        lambda: _pool(url),
        timeout=10,
        what="the pool to be empty once both requests were answered",
        until=lambda pool: pool["used_bytes"] == 0,
    )
    assert after["waiting_connections"] == 0 and after["waits_total"] == 1
    assert after["wait_seconds_total"] is not None and after["wait_seconds_total"] > 0
