"""KIP-714 client telemetry against a real node: client-metrics subscriptions set with IncrementalAlterConfigs, a
librdkafka producer pushing its metrics, those metrics on the broker's /metrics, and hostile pushes answered with
Kafka's error codes on a connection that stays open."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest
from confluent_kafka import Producer
from kio.schema.errors import ErrorCode
from prometheus_client.parser import text_string_to_metric_families

from broker.authorization import BrokerAuthorizer
from broker.handlers.context import RequestContext
from broker.handlers.table import serve_authorized
from broker.services import BrokerServices
from broker.telemetry.exported import PushedMetrics
from broker.telemetry.manager import ClientAttributes, TelemetryManager
from broker.telemetry.otlp import MetricPoint, OtlpTooLarge, decode_metrics
from metadata.admin import config_wire
from metadata.controller_api import ConfigResource, IncrementalOp
from metadata.image import MetadataImage
from settings.security import STANDARD_AUTHORIZER
from testkit.node_process import BrokerProcess, WireClient, api_versions_request, start_broker
from testkit.waiting import eventually
from tests.metrics_scrape import metrics_url, sample, scrape
from tests.telemetry_wire import (
    CLIENT_METRICS,
    describe,
    get_subscriptions,
    list_resources,
    otlp_gauges,
    push,
    subscribe,
)
from wire import codec, schema
from wire.compression import Compression, compress

MAX_BYTES = 16384
MAX_SERIES = 40


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = start_broker(tmp_path_factory.mktemp("telemetry"), {
        "metrics.port": "0",
        "telemetry.max.bytes": str(MAX_BYTES),
        "fjord.client.telemetry.max.series.per.client": str(MAX_SERIES),
    })
    try:
        yield process
    finally:
        assert process.stop() == 0, process.log_text()


@pytest.fixture
def client(node: BrokerProcess) -> Iterator[WireClient]:
    with WireClient(node.port) as wire:
        yield wire


def _client_samples(url: str) -> list[tuple[str, dict[str, str], float]]:
    """Every pushed-client sample on the endpoint, parsed by Prometheus' own parser (which fails on a broken page)."""
    return [
        (s.name, s.labels, s.value)
        for family in text_string_to_metric_families(scrape(url))
        for s in family.samples
        if s.name.startswith("fjord_client_")
    ]


# ------------------------------------------------------------------ tests


def test_subscriptions_are_client_metrics_config_resources(client: WireClient) -> None:
    assert subscribe(client, "sub-a", {"metrics": "org.apache.kafka.producer., org.apache.kafka.consumer.",
                                       "interval.ms": "2000", "match": "client_id=app-.*"}) == (ErrorCode.none, None)
    described = describe(client, "sub-a")
    assert described["metrics"] == ("org.apache.kafka.producer.,org.apache.kafka.consumer.", 7)
    assert described["interval.ms"] == ("2000", 7)
    assert described["match"] == ("client_id=app-.*", 7)
    listed = list_resources(client)
    assert ("sub-a", CLIENT_METRICS) in {(r.resource_name, int(r.resource_type)) for r in listed.config_resources}
    assert "sub-a" in {r.resource_name for r in list_resources(client, version=0).config_resources}
    assert list_resources(client, types=(99,)).error_code == ErrorCode.unsupported_version
    # Kafka's refusals: nothing is written.
    assert subscribe(client, "sub-a", {"interval.ms": "50"})[0] == ErrorCode.invalid_request
    assert subscribe(client, "sub-a", {"interval.ms": "soon"})[0] == ErrorCode.invalid_config  # does not parse
    assert subscribe(client, "sub-a", {"no.such.key": "1"})[0] == ErrorCode.invalid_request
    assert subscribe(client, "sub-a", {"match": "hostname=.*"})[0] == ErrorCode.invalid_config
    assert subscribe(client, "sub-a", {"match": "client_id=("})[0] == ErrorCode.invalid_config
    # Java's String.split("=") drops trailing empty parts: no regex is refused, a trailing "=" is ignored.
    assert subscribe(client, "sub-a", {"match": "client_id="})[0] == ErrorCode.invalid_config
    assert subscribe(client, "sub-a", {"match": "client_id==a"})[0] == ErrorCode.invalid_config
    assert subscribe(client, "", {"metrics": "*"})[0] == ErrorCode.invalid_request
    assert describe(client, "sub-a")["interval.ms"] == ("2000", 7)
    assert subscribe(client, "sub-a", {"match": "client_id=app-.*="})[0] == ErrorCode.none
    # Deleting every key deletes the subscription.
    assert subscribe(client, "sub-a", {"metrics": None, "interval.ms": None, "match": None})[0] == ErrorCode.none
    listed = list_resources(client, types=(CLIENT_METRICS,))
    assert "sub-a" not in {r.resource_name for r in listed.config_resources}
    assert describe(client, "sub-a")["interval.ms"] == ("300000", 5)


def test_a_subscription_change_changes_the_subscription_id(client: WireClient) -> None:
    first = get_subscriptions(client, client_id="resub-client")
    assert first.error_code == ErrorCode.none
    assert tuple(first.requested_metrics) == ()  # nothing subscribed yet: the client pushes nothing
    assert first.push_interval == 300_000 or int(first.push_interval.total_seconds() * 1000) == 300_000
    assert subscribe(client, "sub-resub", {"metrics": "*", "interval.ms": "100000",
                                           "match": "client_id=resub-.*"})[0] == ErrorCode.none
    instance = first.client_instance_id
    assert push(client, instance, first.subscription_id, client_id="resub-client") == ErrorCode.unknown_subscription_id
    again = get_subscriptions(client, instance, client_id="resub-client")  # never throttled after that error
    assert again.error_code == ErrorCode.none
    assert again.client_instance_id == instance
    assert again.subscription_id != first.subscription_id
    assert tuple(again.requested_metrics) == ("*",)
    assert sorted(int(c) for c in again.accepted_compression_types) == [1, 2, 3, 4]
    assert again.delta_temporality is True
    assert again.telemetry_max_bytes == MAX_BYTES


def test_hostile_pushes_get_kafka_error_codes_and_keep_the_connection(client: WireClient) -> None:
    assert subscribe(client, "sub-hostile", {"metrics": "*", "interval.ms": "100000",
                                             "match": "client_id=hostile"})[0] == ErrorCode.none

    def fresh() -> tuple[uuid.UUID, int]:
        answer = get_subscriptions(client, client_id="hostile")
        assert answer.error_code == ErrorCode.none and tuple(answer.requested_metrics) == ("*",)
        return answer.client_instance_id, int(answer.subscription_id)

    def push_fresh(payload: bytes = b"", **kwargs: Any) -> ErrorCode:
        instance, subscription = fresh()
        return push(client, instance, kwargs.pop("subscription", subscription), payload, client_id="hostile",
                    **kwargs)

    good = otlp_gauges({"app.queue.depth": 3.0})
    assert push_fresh(good) == ErrorCode.none
    assert push_fresh(good + b"\x00" * MAX_BYTES) == ErrorCode.telemetry_too_large
    assert push_fresh(good, subscription=12345) == ErrorCode.unknown_subscription_id
    assert push_fresh(good, compression=9) == ErrorCode.unsupported_compression_type
    assert push_fresh(b"\xff" * 64) == ErrorCode.invalid_record
    assert push_fresh(good, compression=int(Compression.GZIP)) == ErrorCode.invalid_record  # says gzip, is not
    # A zip bomb: a few KiB that would inflate far beyond what a push may hold. Too large, not unreadable: a Java
    # client retries TELEMETRY_TOO_LARGE at its next interval, but stops pushing for good on INVALID_RECORD.
    for codec_id in (Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD):
        bomb = compress(codec_id, b"\x0a" * (11 * MAX_BYTES))  # more than MAX_INFLATION times MAX_BYTES
        assert len(bomb) <= MAX_BYTES, codec_id
        assert push_fresh(bomb, compression=int(codec_id)) == ErrorCode.telemetry_too_large, codec_id
    for codec_id in (Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD):
        assert push_fresh(compress(codec_id, good), compression=int(codec_id)) == ErrorCode.none, codec_id
    assert push(client, uuid.UUID(int=0), 1, good, client_id="hostile") == ErrorCode.invalid_request

    instance, subscription = fresh()
    assert push(client, instance, subscription, good, client_id="hostile") == ErrorCode.none
    assert push(client, instance, subscription, good, client_id="hostile") == ErrorCode.throttling_quota_exceeded
    assert get_subscriptions(client, instance, client_id="hostile").error_code == ErrorCode.throttling_quota_exceeded
    # A terminating push is never throttled, and nothing is accepted after it.
    assert push(client, instance, subscription, good, terminating=True, client_id="hostile") == ErrorCode.none
    assert push(client, instance, subscription, good, client_id="hostile") == ErrorCode.invalid_request

    assert client.request(api_versions_request(3)).error_code == ErrorCode.none


def test_client_controlled_labels_cannot_shape_the_endpoint(node: BrokerProcess, client: WireClient) -> None:
    url = metrics_url(node.log_text())
    hostile_id = "evil\n# TYPE fjord_broker_partitions counter\x1b[31m" + "x" * 30_000
    assert subscribe(client, "sub-labels", {"metrics": "*", "interval.ms": "100000",
                                            "match": "client_id=(?s)evil.*"})[0] == ErrorCode.none
    answer = get_subscriptions(client, client_id=hostile_id)
    assert tuple(answer.requested_metrics) == ("*",)
    metrics = {f"evil.metric\n{i}\x1b[0m" + "n" * 300: float(i) for i in range(MAX_SERIES + 25)}
    payload = compress(Compression.ZSTD, otlp_gauges(metrics, {"topic": "t\n\x1b" + "a" * 1000}))
    assert len(payload) <= MAX_BYTES
    assert push(client, answer.client_instance_id, answer.subscription_id, payload,
                compression=int(Compression.ZSTD), client_id=hostile_id) == ErrorCode.none
    instance = str(answer.client_instance_id)
    text = scrape(url)
    assert "\x1b" not in text
    assert max(len(line) for line in text.splitlines()) < 1000
    mine = [s for s in _client_samples(url) if s[1]["client_instance_id"] == instance]
    assert len(mine) == MAX_SERIES  # the rest are not exported
    assert all(s[0].startswith("fjord_client_evil_metric_") and len(s[0]) <= 200 for s in mine)
    assert all(s[1]["client_id"].startswith("evil?# TYPE") and len(s[1]["client_id"]) <= 128 for s in mine)
    assert all("\n" not in s[1]["attributes"] for s in mine)
    assert sample(text, "fjord_broker_partitions", '{node="0"}') is not None  # the broker's own family is intact
    # A 30 KiB metric name and attribute value from another instance of the same client.
    second = get_subscriptions(client, client_id=hostile_id)
    huge = otlp_gauges({"big." + "\x1b[2J" * 5000: 1.0}, {"k": "v\r\n" * 10_000})
    assert push(client, second.client_instance_id, second.subscription_id, compress(Compression.LZ4, huge),
                compression=int(Compression.LZ4), client_id=hostile_id) == ErrorCode.none
    (big,) = [s for s in _client_samples(url) if s[1]["client_instance_id"] == str(second.client_instance_id)]
    assert len(big[0]) <= len("fjord_client_") + 150 and len(big[1]["attributes"]) <= 256
    assert "\x1b" not in scrape(url)


def test_a_producer_pushes_its_metrics_to_the_brokers_endpoint(node: BrokerProcess, client: WireClient) -> None:
    url = metrics_url(node.log_text())
    # Matched on the software name its ApiVersions named too (KIP-511), as kafka-client-metrics.sh --match does.
    match = "client_id=telemetry-producer,client_software_name=confluent-kafka-python"
    assert subscribe(client, "sub-producers", {"metrics": "org.apache.kafka.producer.", "interval.ms": "500",
                                               "match": match})[0] == ErrorCode.none
    producer = Producer({"bootstrap.servers": node.bootstrap, "client.id": "telemetry-producer", "linger.ms": 5})

    def pushed() -> list[tuple[str, dict[str, str], float]]:
        producer.produce("telemetry-topic", b"value")
        producer.poll(0.1)
        return [s for s in _client_samples(url) if s[1]["client_id"] == "telemetry-producer"]

    try:
        found = eventually(pushed, timeout=30, what="the producer's pushed metrics on /metrics")
        names = {name for name, _labels, _value in found}
        assert all(name.startswith("fjord_client_org_apache_kafka_producer_") for name in names), names
        assert "fjord_client_org_apache_kafka_producer_record_queue_time_max" in names
        assert len({labels["client_instance_id"] for _n, labels, _v in found}) == 1
        assert producer.flush(10) == 0
    finally:
        producer.close()  # closing the client sends its terminating push: its series go
    eventually(lambda: not [s for s in _client_samples(url) if s[1]["client_id"] == "telemetry-producer"],
               timeout=15, what="the terminated producer's series to leave /metrics")


def test_without_a_matching_subscription_nothing_is_pushed(broker_factory: Callable[..., BrokerProcess]) -> None:
    node = broker_factory(overrides={"metrics.port": "0"})
    url = metrics_url(node.log_text())
    producer = Producer({"bootstrap.servers": node.bootstrap, "client.id": "quiet-producer"})
    try:
        producer.produce("quiet-topic", b"value")
        assert producer.flush(15) == 0
        eventually(lambda: sample(scrape(url), "fjord_broker_request_seconds_count",
                                  '{api="GetTelemetrySubscriptions"}'),
                   timeout=15, what="librdkafka to ask for its telemetry subscription")
        text = scrape(url)
        assert sample(text, "fjord_broker_request_seconds_count", '{api="PushTelemetry"}') is None
        assert "fjord_client_" not in text
    finally:
        producer.flush(5)


# ------------------------------------------------------------------ the bounds, on a clock the test moves


def _families(pushed: PushedMetrics, now_ms: float) -> dict[tuple[str, str], float]:
    return {(s.name, s.labels["client_instance_id"]): s.value for f in pushed.families(now_ms) for s in f.samples}


def test_pushed_metrics_are_bounded_accumulate_deltas_and_expire() -> None:
    pushed = PushedMetrics(max_clients=2, max_series_per_client=3)
    a, b, c = (uuid.UUID(int=n) for n in (10, 11, 12))
    pushed.record(a, "a", [MetricPoint("sent.total", (), 5.0, delta=True),
                           MetricPoint("queue", (), 7.0, delta=False)], interval_ms=1000, now_ms=0)
    pushed.record(a, "a", [MetricPoint("sent.total", (), 2.0, delta=True),
                           MetricPoint("queue", (), 1.0, delta=False)], interval_ms=1000, now_ms=1000)
    assert _families(pushed, 1000) == {("fjord_client_sent_total", str(a)): 7.0, ("fjord_client_queue", str(a)): 1.0}
    pushed.record(b, "b", [MetricPoint(f"m{i}", (), 1.0, delta=False) for i in range(10)], 1000, now_ms=2000)
    assert len([k for k in _families(pushed, 2000) if k[1] == str(b)]) == 3 and pushed.dropped_series == 7
    pushed.record(c, "c", [MetricPoint("m", (), 1.0, delta=False)], 100_000, now_ms=3000)  # a, pushed least lately
    assert {k[1] for k in _families(pushed, 3000)} == {str(b), str(c)}
    # b is stale a minute after its last push (3 intervals of 1 s are less); c's 3 intervals are 300 s.
    assert {k[1] for k in _families(pushed, 62_001)} == {str(c)}
    assert _families(pushed, 303_001) == {}


def test_a_client_reconnecting_is_subscribed_afresh(node: BrokerProcess, client: WireClient) -> None:
    """Kafka's ClientMetricsManager forgets an instance when its connection closes: within its push interval the
    same instance id is throttled on its connection, but answered afresh once that connection is gone."""
    assert subscribe(client, "sub-reconnect", {"metrics": "*", "interval.ms": "100000",
                                               "match": "client_id=reconnecting"})[0] == ErrorCode.none
    with WireClient(node.port) as first:
        answer = get_subscriptions(first, client_id="reconnecting")
        assert answer.error_code == ErrorCode.none
        instance = answer.client_instance_id
        again = get_subscriptions(first, instance, client_id="reconnecting")
        assert again.error_code == ErrorCode.throttling_quota_exceeded  # within its push interval
    eventually(lambda: get_subscriptions(client, instance, client_id="reconnecting").error_code,
               until=lambda code: code == ErrorCode.none, timeout=10, interval=0.1,
               what="the closed connection's instance to be forgotten")


def test_instances_expire_and_re_evaluate_their_subscriptions() -> None:
    ids = iter(uuid.UUID(int=n) for n in range(100, 200))
    manager = TelemetryManager(max_bytes=100, new_id=lambda: next(ids))
    who = ClientAttributes("app-1", "librdkafka", "2.16.0", "127.0.0.1", 5555)
    manager.update_subscriptions({"s": {"metrics": "a.,b.", "interval.ms": "1000",
                                        "match": "client_software_name=lib.*"}})
    first = manager.get_subscriptions(None, who, now_ms=0)
    assert first.instance is not None and first.instance.metrics == ("a.", "b.")
    assert first.instance.push_interval_ms == 1000
    instance_id = first.instance.instance_id
    other = manager.get_subscriptions(None, ClientAttributes("x", "java", "4.2", "10.0.0.1", 1), now_ms=0).instance
    assert other is not None and other.metrics == () and other.push_interval_ms == 300_000
    old_id = first.instance.subscription_id
    manager.update_subscriptions({"s": {"metrics": "a.", "interval.ms": "1000"}})
    again = manager.get_subscriptions(instance_id, who, now_ms=10)  # re-evaluated at once, never throttled
    assert again.error == ErrorCode.none and again.instance is not None
    assert again.instance.metrics == ("a.",) and again.instance.subscription_id != old_id
    assert manager.expire(60_009) == []  # a minute after its last request (three 1 s intervals are less)
    assert manager.expire(60_010) == [instance_id]
    assert manager.expire(899_999) == []  # three intervals of five minutes after its only request
    assert manager.expire(900_000) == [other.instance_id]
    assert len(manager) == 0


def test_matching_subscriptions_merge_their_prefixes_and_take_the_shortest_interval() -> None:
    manager = TelemetryManager(max_bytes=100)
    who = ClientAttributes("app-1", "librdkafka", "2.16.0", "10.1.2.3", 40000)
    manager.update_subscriptions({
        "slow": {"metrics": "b.,a.", "interval.ms": "60000"},
        "fast": {"metrics": "a.,c.", "interval.ms": "1000", "match": "client_source_address=10\\..*"},
        "other": {"metrics": "z.", "interval.ms": "100", "match": "client_id=someone-else"},
    })
    merged = manager.get_subscriptions(None, who, now_ms=0).instance
    assert merged is not None and merged.metrics == ("a.", "b.", "c.") and merged.push_interval_ms == 1000
    manager.update_subscriptions({"slow": {"metrics": "b."}, "all": {"metrics": "*", "match": "client_id=app-.*"}})
    every = manager.get_subscriptions(None, who, now_ms=0).instance
    assert every is not None and every.metrics == ("*",) and every.push_interval_ms == 300_000


def test_otlp_decoding_refuses_truncation_and_reads_what_it_understands() -> None:
    payload = otlp_gauges({"a.b": 1.5}, {"node.id": "3"})
    assert decode_metrics(payload) == [MetricPoint("a.b", (("node.id", "3"),), 1.5, delta=False)]
    for cut in (1, 5, len(payload) - 1):
        with pytest.raises(ValueError):
            decode_metrics(payload[:cut])
    assert decode_metrics(b"") == []
    # However small its fields, a payload is walked only so far.
    tiny = b"\x18\x01" * 300_000
    with pytest.raises(OtlpTooLarge, match="protobuf fields"):
        decode_metrics(b"\x0a" + bytes([0x80 | (len(tiny) & 0x7F), 0x80 | (len(tiny) >> 7 & 0x7F), len(tiny) >> 14])
                       + tiny)


# ------------------------------------------------------------------ authorization, as Kafka's KafkaApis checks it


async def test_client_metrics_resources_need_cluster_config_acls_and_telemetry_none() -> None:
    """No ACL at all: the client-metrics admin requests are refused (CLUSTER DESCRIBE_CONFIGS / ALTER_CONFIGS),
    the telemetry requests are not (a client pushes its own metrics)."""
    asked: list[int] = []

    async def handler(ctx: RequestContext, request: Any) -> Any:
        asked.append(ctx.api_key)
        return ctx.build()

    async def serve(api_key: int, version: int, request: Any) -> Any:
        ctx = RequestContext(api_key=api_key, api_version=version, correlation_id=1, client_id="acl",
                             client_host="127.0.0.1", broker=cast(BrokerServices, None),
                             authorizer=BrokerAuthorizer({"authorizer.class.name": STANDARD_AUTHORIZER}.get,
                                                         lambda: MetadataImage("c").acls))
        response = await serve_authorized(ctx, request, handler)
        codec.encode_response(1, response)
        return response

    listed = await serve(74, 1, schema.build(codec.request_class(74, 1)))
    assert listed.error_code == ErrorCode.cluster_authorization_failed
    alter = config_wire.alter_configs_request(ConfigResource(CLIENT_METRICS, "s"), {"metrics": "*"},
                                              {"metrics": IncrementalOp.SET}, False)
    altered = await serve(44, 1, alter)
    assert [r.error_code for r in altered.responses] == [ErrorCode.cluster_authorization_failed]
    assert asked == []
    await serve(71, 0, schema.build(codec.request_class(71, 0), client_instance_id=uuid.UUID(int=0)))
    assert asked == [71]
