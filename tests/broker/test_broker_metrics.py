"""The broker's latency-diagnosis metrics: event-loop lag, GC passes, fine request-time buckets."""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, generate_latest

from broker.metrics import TopicTraffic
from testkit.node_process import BrokerProcess
from testkit.waiting import eventually
from tests.metrics_scrape import metrics_url, sample, scrape
from wire.metrics import ServerMetrics


def _sample(text: str, name: str, labels: str = "") -> float:
    found = sample(text, name, labels)
    assert found is not None, f"{name}{labels} missing from:\n{text}"
    return found


async def test_loop_lag_probe_sees_a_blocked_loop() -> None:
    metrics = ServerMetrics()
    probe = asyncio.create_task(metrics.watch_loop_lag(period=0.005))
    try:
        await asyncio.sleep(0.05)  # a few on-time samples first
        time.sleep(0.04)  # noqa: ASYNC251 - on purpose: a handler hogging the loop for 40 ms
        await asyncio.sleep(0.03)
    finally:
        probe.cancel()
    text = generate_latest(metrics.registry).decode()
    samples = _sample(text, "fjord_broker_event_loop_lag_seconds_count")
    prompt = _sample(text, "fjord_broker_event_loop_lag_seconds_bucket", '{le="0.02"}')
    assert samples >= 3
    assert prompt < samples, "the 40 ms stall was not recorded as lag above 20 ms"
    assert _sample(text, "fjord_broker_event_loop_lag_seconds_sum") >= 0.03


def test_gc_passes_are_timed_per_generation() -> None:
    metrics = ServerMetrics()
    metrics.watch_gc()
    try:
        gc.collect(2)
        gc.collect(0)
    finally:
        metrics.unwatch_gc()
    gc.collect(2)  # not counted any more
    text = generate_latest(metrics.registry).decode()
    assert _sample(text, "fjord_broker_gc_seconds_count", '{generation="2"}') == 1
    assert _sample(text, "fjord_broker_gc_seconds_count", '{generation="0"}') >= 1


def test_running_node_serves_lag_gc_and_millisecond_request_buckets(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    url = metrics_url(broker_factory(overrides={"metrics.port": "0"}).log_text())
    text = eventually(
        lambda: scrape(url),
        until=lambda text: _sample(text, "fjord_broker_event_loop_lag_seconds_count") >= 5,
        timeout=10,
        what="the lag probe to take 5 samples in a serving node",
    )
    assert 'fjord_broker_gc_seconds_bucket{generation="2",le="0.001"}' in text
    # The ApiVersions handshake of start_broker was timed, in buckets fine enough for a 10 ms latency target.
    assert _sample(text, "fjord_broker_request_seconds_count", '{api="ApiVersions"}') >= 1
    assert 'fjord_broker_request_seconds_bucket{api="ApiVersions",le="0.0005"}' in text


def test_forgotten_partitions_leave_the_counters_and_their_topic_the_export() -> None:
    """Topic churn must not grow the traffic counters, nor a deleted topic stay exported forever."""
    registry = CollectorRegistry()
    traffic = TopicTraffic(registry, lambda: 1)
    for partition in (0, 1):
        traffic.produced("gone", partition, 100, 2)
        traffic.fetched("gone", partition, 100, 2)
    traffic.produced("kept", 0, 10, 1)
    traffic.forget("gone", 0)
    assert set(traffic.partition_bytes()) == {("gone", 1), ("kept", 0)}
    assert 'topic="gone"' in generate_latest(registry).decode()  # partition 1 is still open here
    traffic.forget("gone", 1)
    assert set(traffic.partition_bytes()) == {("kept", 0)}
    text = generate_latest(registry).decode()
    assert 'topic="gone"' not in text
    assert _sample(text, "fjord_topic_bytes_in_total", '{node="1",topic="kept"}') == 10
    traffic.produced("gone", 0, 5, 1)  # opened here again: counts from zero
    assert _sample(generate_latest(registry).decode(), "fjord_topic_bytes_in_total", '{node="1",topic="gone"}') == 5
