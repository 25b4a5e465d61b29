"""Client quotas (issue 13) on a real broker process: AlterClientQuotas/DescribeClientQuotas as ``kafka-configs.sh``
sends them, and each kind of quota held on real clients: ``producer_byte_rate`` and ``consumer_byte_rate`` on
confluent-kafka clients, ``request_percentage`` (a throttled and muted connection) and ``controller_mutation_rate``
(KIP-599). The rules without a broker are ``test_quota_rules.py``, ``test_quota_admin.py`` and
``test_quota_controller_mutations.py``.

One broker for the module, with ``quota.window.num=3`` so a client's rate settles within seconds instead of Kafka's
ten or more (a new client's allowance is ``quota.window.num - 1`` windows of quota). Throughput is the slope of the
client's own cumulative delivered/consumed bytes over ``MEASURE_S``, once the allowance is spent: Kafka's windowed
rate lets a greedy client through in bursts (one each time an old window is dropped), so bytes counted between two
instants swing with where the instants fall among the bursts, while the least-squares slope over a few windows does
not.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from kio.schema.errors import ErrorCode

from metadata.admin import requests as admin_requests
from testkit.node_process import BrokerProcess, WireClient, start_broker
from testkit.waiting import eventually
from tests.broker.quota_wire import Entity, alter_quotas, by_entity, create_topics_request, describe_quotas
from tests.metrics_scrape import metrics_url, scrape
from wire import codec, schema

QUOTA = 200_000.0  # bytes/s
VALUE = b"q" * 1000
# Measured from this long after the first throttle (the initial allowance is spent by then), for this long.
WARM_UP_S = 1.0
MEASURE_S = 8.0


@pytest.fixture(scope="module")
def quota_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = start_broker(tmp_path_factory.mktemp("quotas"), {"quota.window.num": "3", "metrics.port": "0"})
    try:
        yield process
    finally:
        assert process.stop() == 0, process.log_text()


def test_alter_and_describe_client_quotas(quota_broker: BrokerProcess) -> None:
    alice: Entity = [("user", "alice")]
    default_clients: Entity = [("client-id", None)]
    alice_app: Entity = [("client-id", "app"), ("user", "alice")]  # --entity-type users --entity-type clients
    with WireClient(quota_broker.port) as client:
        # kafka-configs.sh --entity-type users --entity-name alice --alter --add-config producer_byte_rate=1024
        assert alter_quotas(client, [(alice, {"producer_byte_rate": 1024.0})]) == [(ErrorCode.none, None)]
        # --entity-type clients --entity-default ..., and a user+client combination, in one request
        assert alter_quotas(
            client,
            [
                (default_clients, {"consumer_byte_rate": 2048.0}),
                (alice_app, {"request_percentage": 50.0, "producer_byte_rate": 4096.0}),
            ],
        ) == [(ErrorCode.none, None), (ErrorCode.none, None)]
        # validate_only stores nothing; an invalid entry is refused alone, with a message
        assert alter_quotas(client, [([("user", "bob")], {"producer_byte_rate": 1.0})], validate_only=True) == [
            (ErrorCode.none, None)
        ]
        results = alter_quotas(
            client, [([("user", "carol")], {"bogus_rate": 1.0}), ([("user", "dave")], {"producer_byte_rate": 8.0})]
        )
        assert results[0][0] is ErrorCode.invalid_request and "bogus_rate" in (results[0][1] or "")
        assert results[1] == (ErrorCode.none, None)

        everything = by_entity(describe_quotas(client, []))
        assert everything == {
            (("user", "alice"),): {"producer_byte_rate": 1024.0},
            (("client-id", None),): {"consumer_byte_rate": 2048.0},
            (("client-id", "app"), ("user", "alice")): {"request_percentage": 50.0, "producer_byte_rate": 4096.0},
            (("user", "dave"),): {"producer_byte_rate": 8.0},
        }
        # exact (0), default (1) and any (2) matches; strict leaves out entities with other types
        assert set(by_entity(describe_quotas(client, [("user", 0, "alice")]))) == {
            (("user", "alice"),),
            (("client-id", "app"), ("user", "alice")),
        }
        assert set(by_entity(describe_quotas(client, [("user", 0, "alice")], strict=True))) == {(("user", "alice"),)}
        assert set(by_entity(describe_quotas(client, [("client-id", 1, None)]))) == {(("client-id", None),)}
        assert set(by_entity(describe_quotas(client, [("client-id", 2, None)]))) == {
            (("client-id", None),),
            (("client-id", "app"), ("user", "alice")),
        }
        assert set(by_entity(describe_quotas(client, [("user", 2, None), ("client-id", 0, "app")], strict=True))) == {
            (("client-id", "app"), ("user", "alice"))
        }
        refused = describe_quotas(client, [("user", 0, None)])
        assert refused.error_code == ErrorCode.invalid_request and refused.entries is None
        # An entity type Kafka does not know is UNSUPPORTED_VERSION (ClientQuotasImage.describe), not INVALID_REQUEST.
        unknown = describe_quotas(client, [("group", 2, None)])
        assert (unknown.error_code, unknown.error_message, unknown.entries) == (
            ErrorCode.unsupported_version, "Unsupported entity type group", None)

        # --delete-config: removing every key removes the entity; removing an unset key is no error
        assert (
            alter_quotas(
                client,
                [
                    (alice, {"producer_byte_rate": None}),
                    (default_clients, {"consumer_byte_rate": None}),
                    (alice_app, {"request_percentage": None, "producer_byte_rate": None}),
                    ([("user", "dave")], {"producer_byte_rate": None, "consumer_byte_rate": None}),
                ],
            )
            == [(ErrorCode.none, None)] * 4
        )
        assert by_entity(describe_quotas(client, [])) == {}


def _set_quota(broker: BrokerProcess, client_id: str, key: str, value: float | None) -> None:
    with WireClient(broker.port) as client:
        assert alter_quotas(client, [([("client-id", client_id)], {key: value})]) == [(ErrorCode.none, None)]


def _measured_rate(deliveries: list[tuple[float, int]], first_throttle: float) -> float:
    """Bytes per second: the least-squares slope of the cumulative bytes against time over the measured span."""
    start = first_throttle + WARM_UP_S
    end = start + MEASURE_S
    points: list[tuple[float, float]] = []
    total = 0
    for at, size in deliveries:
        total += size
        if start <= at < end:
            points.append((at, total))
    assert len(points) > 10, f"only {len(points)} deliveries in the measured span"
    mean_t = sum(t for t, _ in points) / len(points)
    mean_b = sum(b for _, b in points) / len(points)
    return sum((t - mean_t) * (b - mean_b) for t, b in points) / sum((t - mean_t) ** 2 for t, _ in points)


def test_throttled_producer_stays_within_its_quota(quota_broker: BrokerProcess) -> None:
    topic = f"quota-produce-{uuid.uuid4().hex[:8]}"
    client_id = "quota-producer"
    _set_quota(quota_broker, client_id, "producer_byte_rate", QUOTA)
    throttles: list[tuple[float, float]] = []
    deliveries: list[tuple[float, int]] = []
    producer = Producer(
        {
            "bootstrap.servers": quota_broker.bootstrap,
            "client.id": client_id,
            "linger.ms": 5,
            "batch.size": 16384,
            "queue.buffering.max.kbytes": 128,
            # librdkafka also reports the end of a throttle (0 ms); only the throttles count here
            "throttle_cb": lambda event: (
                event.throttle_time > 0 and throttles.append((time.monotonic(), event.throttle_time))
            ),
        }
    )

    def delivered(err: Any, msg: Any) -> None:
        assert err is None, err
        deliveries.append((time.monotonic(), len(msg.value())))

    deadline = time.monotonic() + 20.0
    while time.monotonic() < deadline and (not throttles or time.monotonic() < throttles[0][0] + WARM_UP_S + MEASURE_S):
        try:
            producer.produce(topic, VALUE, on_delivery=delivered)
        except BufferError:
            producer.poll(0.01)
        producer.poll(0)
    producer.flush(10)
    _set_quota(quota_broker, client_id, "producer_byte_rate", None)
    assert throttles, "the producer never saw a throttle time"
    rate = _measured_rate(deliveries, throttles[0][0])
    assert abs(rate - QUOTA) <= 0.1 * QUOTA, f"{rate:.0f} B/s against a quota of {QUOTA:.0f}"
    eventually(
        lambda: (
            f"client '{client_id}' of principal User:ANONYMOUS exceeds its producer_byte_rate quota"
            in quota_broker.log_text()
        ),
        timeout=5.0,
        what="the throttled producer to be logged",
    )
    assert quota_broker.log_text().count(f"client '{client_id}' of principal User:ANONYMOUS exceeds") == 1
    metrics = scrape(metrics_url(quota_broker.log_text()))
    throttled = [
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith('fjord_broker_quota_throttle_seconds_total{quota="produce",user="ANONYMOUS"}')
    ]
    assert throttled and throttled[0] > 0, metrics


def test_throttled_consumer_stays_within_its_quota(quota_broker: BrokerProcess) -> None:
    topic = f"quota-fetch-{uuid.uuid4().hex[:8]}"
    client_id = "quota-consumer"
    loader = Producer(
        {"bootstrap.servers": quota_broker.bootstrap, "client.id": "quota-loader", "linger.ms": 5, "batch.size": 16384}
    )
    for _ in range(4500):  # ~4.5 MB: more than the allowances plus WARM_UP_S + MEASURE_S at the quota
        loader.produce(topic, VALUE)
        loader.poll(0)
    assert loader.flush(20) == 0
    _set_quota(quota_broker, client_id, "consumer_byte_rate", QUOTA)
    throttles: list[tuple[float, float]] = []
    deliveries: list[tuple[float, int]] = []
    consumer = Consumer(
        {
            "bootstrap.servers": quota_broker.bootstrap,
            "client.id": client_id,
            "group.id": f"quota-group-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "max.partition.fetch.bytes": 65536,
            # librdkafka also reports the end of a throttle (0 ms); only the throttles count here
            "throttle_cb": lambda event: (
                event.throttle_time > 0 and throttles.append((time.monotonic(), event.throttle_time))
            ),
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])  # no group join to wait for
        deadline = time.monotonic() + 20.0
        while time.monotonic() < deadline and (
            not throttles or time.monotonic() < throttles[0][0] + WARM_UP_S + MEASURE_S
        ):
            for message in consumer.consume(num_messages=100, timeout=0.05):
                assert message.error() is None, message.error()
                deliveries.append((time.monotonic(), len(message.value() or b"")))
    finally:
        consumer.close()
        _set_quota(quota_broker, client_id, "consumer_byte_rate", None)
    assert throttles, "the consumer never saw a throttle time"
    assert sum(size for _, size in deliveries) < 4500 * len(VALUE), "the consumer ran out of data to fetch"
    rate = _measured_rate(deliveries, throttles[0][0])
    assert abs(rate - QUOTA) <= 0.1 * QUOTA, f"{rate:.0f} B/s against a quota of {QUOTA:.0f}"


def test_request_percentage_throttles_and_mutes_the_connection(quota_broker: BrokerProcess) -> None:
    client_id = "quota-busy"
    _set_quota(quota_broker, client_id, "request_percentage", 0.01)  # 0.1 ms of event loop per second
    metadata = schema.build(codec.request_class(3, 12), topics=(), allow_auto_topic_creation=False)
    try:
        with WireClient(quota_broker.port) as client:
            throttle_ms = 0
            for _ in range(50):
                correlation_id = client.send(metadata, client_id=client_id)
                got, response = client.receive(3, 12)
                assert got == correlation_id
                throttle_ms = schema.millis(response.throttle_time)
                if throttle_ms > 0:
                    break
            assert throttle_ms > 0, "50 Metadata requests were never throttled"
            assert throttle_ms <= 1000  # Kafka bounds a request-time throttle at one window (1 s here)
            # Muted: the next request is not even read until the throttle time has passed.
            client.send(metadata, client_id=client_id)
            client.sock.settimeout(min(throttle_ms / 2000, 0.5))
            with pytest.raises(TimeoutError):
                client.read_frame()
    finally:
        _set_quota(quota_broker, client_id, "request_percentage", None)


def _create_one(client: WireClient, version: int, name: str, client_id: str) -> tuple[ErrorCode, str | None, int]:
    correlation_id = client.send(create_topics_request(version, {name: 1}), client_id=client_id)
    got, response = client.receive(19, version)
    assert got == correlation_id
    (topic,) = response.topics
    return ErrorCode(int(topic.error_code)), topic.error_message, schema.millis(response.throttle_time)


def test_controller_mutation_rate_refuses_new_clients_and_throttles_old_ones(quota_broker: BrokerProcess) -> None:
    """``kafka-configs.sh --add-config controller_mutation_rate=2``: CreateTopics v6 of one partition at a time is
    accepted for the initial burst, then refused with THROTTLING_QUOTA_EXCEEDED and a throttle time; a client
    without the quota is unaffected; CreateTopics v5 is never refused, only throttled."""
    strict_id, permissive_id = f"mut-strict-{uuid.uuid4().hex[:6]}", f"mut-old-{uuid.uuid4().hex[:6]}"
    for client_id in (strict_id, permissive_id):
        _set_quota(quota_broker, client_id, "controller_mutation_rate", 2.0)
    created: list[str] = []
    try:
        with WireClient(quota_broker.port) as client:
            outcome = (ErrorCode.none, None, 0)
            for i in range(30):
                name = f"{strict_id}-{i}"
                outcome = _create_one(client, 6, name, strict_id)
                if outcome[0] != ErrorCode.none:
                    break
                assert outcome[2] == 0, "an accepted topic's response is not throttled (strict quota)"
                created.append(name)
            assert outcome[:2] == (ErrorCode.throttling_quota_exceeded, admin_requests.THROTTLED), outcome
            assert outcome[2] > 0
            assert 1 <= len(created) < 30
        with WireClient(quota_broker.port) as other:
            name = f"mut-free-{uuid.uuid4().hex[:6]}"
            assert _create_one(other, 6, name, "mut-free") == (ErrorCode.none, None, 0)
            created.append(name)
        with WireClient(quota_broker.port) as old:
            throttled = 0
            for i in range(30):
                name = f"{permissive_id}-{i}"
                code, message, throttled = _create_one(old, 5, name, permissive_id)
                assert (code, message) == (ErrorCode.none, None)
                created.append(name)
                if throttled > 0:
                    break
            assert throttled > 0, "30 CreateTopics v5 over the quota were never throttled"
    finally:
        for client_id in (strict_id, permissive_id):
            _set_quota(quota_broker, client_id, "controller_mutation_rate", None)
        with WireClient(quota_broker.port) as client:
            cls = codec.request_class(20, 5)
            deleted = client.request(schema.build(cls, topic_names=tuple(created), timeout=15_000))
            assert {r.error_code for r in deleted.responses} <= {ErrorCode.none}


def test_controller_mutation_rate_round_trips_through_the_quota_apis(quota_broker: BrokerProcess) -> None:
    alice: Entity = [("user", "alice-mutations")]
    with WireClient(quota_broker.port) as client:
        assert alter_quotas(client, [(alice, {"controller_mutation_rate": 2.5})]) == [(ErrorCode.none, None)]
        try:
            described = by_entity(describe_quotas(client, [("user", 0, "alice-mutations")]))
            assert described == {(("user", "alice-mutations"),): {"controller_mutation_rate": 2.5}}
        finally:
            assert alter_quotas(client, [(alice, {"controller_mutation_rate": None})]) == [(ErrorCode.none, None)]
        assert by_entity(describe_quotas(client, [("user", 0, "alice-mutations")])) == {}
