"""Client quotas (issue 13): AlterClientQuotas/DescribeClientQuotas as ``kafka-configs.sh`` sends them, the
controller's validation, the entity precedence, and real confluent-kafka clients held to their byte rates.

Neither confluent-kafka nor kafka-python has a client-quota admin API, so the admin requests go over a raw
``WireClient`` in the shape Kafka's ``kafka-configs.sh --entity-type users/clients`` sends them (AlterClientQuotas
v1, DescribeClientQuotas v1). One broker for the module, with ``quota.window.num=3`` so a client's rate settles
within seconds instead of Kafka's ten or more (a new client's allowance is ``quota.window.num - 1`` windows of
quota). Throughput is the slope of the client's own cumulative delivered/consumed bytes over ``MEASURE_S``, once the
allowance is spent: Kafka's windowed rate lets a greedy client through in bursts (one each time an old window is
dropped), so bytes counted between two instants swing with where the instants fall among the bursts, while the
least-squares slope over a few windows does not. The remote-controller path runs on in-process voters, the ACL
checks on the dispatcher's guard.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from kio.schema.errors import ErrorCode
from kio.static.constants import uuid_zero

from broker.authorization import BrokerAuthorizer
from broker.handlers.context import RequestContext
from broker.handlers.table import serve_authorized
from broker.quotas.busy_time import BusyTime, timed
from broker.quotas.manager import ClientQuotas, QuotaType, QuotaWindows
from broker.quotas.mutations import RequestMutations
from broker.quotas.resolution import QuotaTags, resolve
from broker.services import BrokerServices
from controller.controller import Controller
from controller.quorum import QuorumController
from metadata.admin import requests as admin_requests
from metadata.admin import topic_wire
from metadata.client_quotas import QuotaAlteration, plan_alter_client_quotas
from metadata.cluster_records import ClientQuotaRecord
from metadata.image import MetadataImage
from node.controller_handle import start_quorum_client
from settings.endpoint import Endpoint
from settings.security import STANDARD_AUTHORIZER, refusal
from settings.server import ServerConfig
from testkit.node_process import BrokerProcess, WireClient, start_broker
from testkit.waiting import eventually
from tests.metrics_scrape import metrics_url, scrape
from tests.quorum_fixtures import active_voter
from wire import codec, schema

QUOTA = 200_000.0  # bytes/s
VALUE = b"q" * 1000
# Measured from this long after the first throttle (the initial allowance is spent by then), for this long.
WARM_UP_S = 1.0
MEASURE_S = 8.0

Entity = list[tuple[str, str | None]]


@pytest.fixture(scope="module")
def quota_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = start_broker(tmp_path_factory.mktemp("quotas"), {"quota.window.num": "3", "metrics.port": "0"})
    try:
        yield process
    finally:
        assert process.stop() == 0, process.log_text()


def _alter(
    client: WireClient, entries: list[tuple[Entity, dict[str, float | None]]], validate_only: bool = False
) -> list[tuple[ErrorCode, str | None]]:
    cls = codec.request_class(49, 1)
    entry_cls = schema.field_entity(cls, "entries")
    request = schema.build(
        cls,
        validate_only=validate_only,
        entries=tuple(
            schema.build(
                entry_cls,
                entity=tuple(schema.build_nested(entry_cls, "entity", entity_type=t, entity_name=n) for t, n in entity),
                ops=tuple(
                    schema.build_nested(entry_cls, "ops", key=k, value=0.0 if v is None else v, remove=v is None)
                    for k, v in ops.items()
                ),
            )
            for entity, ops in entries
        ),
    )
    response = client.request(request)
    return [(ErrorCode(int(e.error_code)), e.error_message) for e in response.entries]


def _describe(client: WireClient, components: list[tuple[str, int, str | None]], strict: bool = False) -> Any:
    cls = codec.request_class(48, 1)
    return client.request(
        schema.build(
            cls,
            strict=strict,
            components=tuple(
                schema.build_nested(cls, "components", entity_type=t, match_type=m, match=name)
                for t, m, name in components
            ),
        )
    )


def _described(response: Any) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
    assert response.error_code == ErrorCode.none, response.error_message
    return {
        tuple(sorted((e.entity_type, e.entity_name) for e in entry.entity)): {v.key: v.value for v in entry.values}
        for entry in response.entries
    }


# ------------------------------------------------------------------------------------ pure: resolution, rules


def test_entity_precedence_follows_kafka() -> None:
    user_client = (("client-id", "app"), ("user", "alice"))
    levels = [
        (user_client, QuotaTags("alice", "app")),
        ((("client-id", None), ("user", "alice")), QuotaTags("alice", "app")),
        ((("user", "alice"),), QuotaTags("alice", "")),
        ((("client-id", "app"), ("user", None)), QuotaTags("alice", "app")),
        ((("client-id", None), ("user", None)), QuotaTags("alice", "app")),
        ((("user", None),), QuotaTags("alice", "")),
        ((("client-id", "app"),), QuotaTags("", "app")),
        ((("client-id", None),), QuotaTags("", "app")),
    ]
    quotas = {entity: {"producer_byte_rate": float(1000 + i)} for i, (entity, _) in enumerate(levels)}
    # Remove the most specific level one at a time: the next one in Kafka's order takes over.
    for i, (entity, tags) in enumerate(levels):
        resolved = resolve(quotas, "producer_byte_rate", "alice", "app")
        assert resolved is not None
        assert (resolved.entity, resolved.tags, resolved.limit) == (entity, tags, 1000 + i)
        del quotas[entity]
    assert resolve(quotas, "producer_byte_rate", "alice", "app") is None
    # Another user's quota or another key never applies; each key resolves on its own.
    other = {(("user", "bob"),): {"producer_byte_rate": 5.0}, (("user", None),): {"consumer_byte_rate": 7.0}}
    assert resolve(other, "producer_byte_rate", "alice", "app") is None
    fetch = resolve(other, "consumer_byte_rate", "alice", "app")
    assert fetch is not None and fetch.limit == 7.0


def test_rate_throttles_to_the_quota() -> None:
    quotas = {(("client-id", "p"),): {"producer_byte_rate": 1000.0}}
    manager = ClientQuotas(QuotaWindows(samples=3, window_s=1.0))

    def record(value: float, now: float) -> float:
        return manager.record(quotas, QuotaType.PRODUCE, user="ANONYMOUS", client_id="p", value=value, now=now)

    assert record(1500, 0.0) == 0  # 1500 over the 2-window floor: 750/s
    # 3000 over 2.5 s (0.5 s elapsed plus the floor) is 1200/s, 20 % above: 0.2 x 2.5 s brings it back.
    assert record(1500, 0.5) == pytest.approx(0.5)
    assert (
        manager.record(quotas, QuotaType.PRODUCE, user="ANONYMOUS", client_id="other", value=10**6, now=0.5) == 0
    )  # no quota for that client
    assert manager.record(quotas, QuotaType.FETCH, user="ANONYMOUS", client_id="p", value=10**6, now=0.5) == 0


def test_alterations_are_validated() -> None:
    def refusal(entity: Entity, ops: dict[str, float | None]) -> str | None:
        plan = plan_alter_client_quotas({}, [QuotaAlteration(tuple(entity), tuple(ops.items()))])
        result = plan.results[0]
        assert (result.error is ErrorCode.none) == (result.message is None)
        return result.message

    assert refusal([("user", "alice")], {"producer_byte_rate": 1024.0}) is None
    assert refusal([("user", None), ("client-id", "c")], {"request_percentage": 12.5}) is None
    assert "Invalid configuration key unknown_rate" in (refusal([("user", "a")], {"unknown_rate": 1.0}) or "")
    assert "must be a Long" in (refusal([("user", "a")], {"producer_byte_rate": 1.5}) or "")
    assert "greater than 0" in (refusal([("user", "a")], {"consumer_byte_rate": -1.0}) or "")
    assert "finite" in (refusal([("user", "a")], {"request_percentage": float("inf")}) or "")
    assert refusal([("user", "a")], {"controller_mutation_rate": 2.5}) is None  # partitions/s, not whole (KIP-599)
    assert "empty" in (refusal([], {"producer_byte_rate": 1.0}) or "")
    assert "Duplicate entity type" in (refusal([("user", "a"), ("user", "b")], {"producer_byte_rate": 1.0}) or "")
    assert "IP entity" in (refusal([("ip", "1.2.3.4"), ("user", "a")], {"producer_byte_rate": 1.0}) or "")
    assert "Unhandled client quota entity type: group" in (refusal([("group", "g")], {"producer_byte_rate": 1.0}) or "")


# ------------------------------------------------------------------------------------ the APIs on a broker


def test_alter_and_describe_client_quotas(quota_broker: BrokerProcess) -> None:
    alice: Entity = [("user", "alice")]
    default_clients: Entity = [("client-id", None)]
    alice_app: Entity = [("client-id", "app"), ("user", "alice")]  # --entity-type users --entity-type clients
    with WireClient(quota_broker.port) as client:
        # kafka-configs.sh --entity-type users --entity-name alice --alter --add-config producer_byte_rate=1024
        assert _alter(client, [(alice, {"producer_byte_rate": 1024.0})]) == [(ErrorCode.none, None)]
        # --entity-type clients --entity-default ..., and a user+client combination, in one request
        assert _alter(
            client,
            [
                (default_clients, {"consumer_byte_rate": 2048.0}),
                (alice_app, {"request_percentage": 50.0, "producer_byte_rate": 4096.0}),
            ],
        ) == [(ErrorCode.none, None), (ErrorCode.none, None)]
        # validate_only stores nothing; an invalid entry is refused alone, with a message
        assert _alter(client, [([("user", "bob")], {"producer_byte_rate": 1.0})], validate_only=True) == [
            (ErrorCode.none, None)
        ]
        results = _alter(
            client, [([("user", "carol")], {"bogus_rate": 1.0}), ([("user", "dave")], {"producer_byte_rate": 8.0})]
        )
        assert results[0][0] is ErrorCode.invalid_request and "bogus_rate" in (results[0][1] or "")
        assert results[1] == (ErrorCode.none, None)

        everything = _described(_describe(client, []))
        assert everything == {
            (("user", "alice"),): {"producer_byte_rate": 1024.0},
            (("client-id", None),): {"consumer_byte_rate": 2048.0},
            (("client-id", "app"), ("user", "alice")): {"request_percentage": 50.0, "producer_byte_rate": 4096.0},
            (("user", "dave"),): {"producer_byte_rate": 8.0},
        }
        # exact (0), default (1) and any (2) matches; strict leaves out entities with other types
        assert set(_described(_describe(client, [("user", 0, "alice")]))) == {
            (("user", "alice"),),
            (("client-id", "app"), ("user", "alice")),
        }
        assert set(_described(_describe(client, [("user", 0, "alice")], strict=True))) == {(("user", "alice"),)}
        assert set(_described(_describe(client, [("client-id", 1, None)]))) == {(("client-id", None),)}
        assert set(_described(_describe(client, [("client-id", 2, None)]))) == {
            (("client-id", None),),
            (("client-id", "app"), ("user", "alice")),
        }
        assert set(_described(_describe(client, [("user", 2, None), ("client-id", 0, "app")], strict=True))) == {
            (("client-id", "app"), ("user", "alice"))
        }
        refused = _describe(client, [("user", 0, None)])
        assert refused.error_code == ErrorCode.invalid_request and refused.entries is None

        # --delete-config: removing every key removes the entity; removing an unset key is no error
        assert (
            _alter(
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
        assert _described(_describe(client, [])) == {}


# ------------------------------------------------------------------------------------ enforcement, real clients


def _set_quota(broker: BrokerProcess, client_id: str, key: str, value: float | None) -> None:
    with WireClient(broker.port) as client:
        assert _alter(client, [([("client-id", client_id)], {key: value})]) == [(ErrorCode.none, None)]


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


def test_quota_window_keys_are_accepted() -> None:
    """The quota keys Fjord reads no longer stop a node (any other quota key still does: test_security_refusals)."""
    assert refusal("quota.window.num", "3") is None
    assert refusal("quota.window.size.seconds", "1") is None
    assert refusal("quota.producer.default", "1") is not None


def test_image_keeps_quotas_and_snapshots_them() -> None:
    entity = (("client-id", None), ("user", "alice"))
    image = MetadataImage("cluster").apply(
        [
            ClientQuotaRecord(entity, "producer_byte_rate", 1024.0),
            ClientQuotaRecord(entity, "request_percentage", 25.0),
            ClientQuotaRecord((("user", "bob"),), "consumer_byte_rate", 10.0),
            ClientQuotaRecord((("user", "bob"),), "consumer_byte_rate", 0.0, remove=True),
        ],
        3,
    )
    assert image.client_quotas == {entity: {"producer_byte_rate": 1024.0, "request_percentage": 25.0}}
    rebuilt = MetadataImage("cluster").apply(image.to_records(), 3)
    assert rebuilt.client_quotas == image.client_quotas


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
            # Muted: the next request is not even read until the throttle time has passed.
            client.send(metadata, client_id=client_id)
            client.sock.settimeout(min(throttle_ms / 2000, 0.5))
            with pytest.raises(TimeoutError):
                client.read_frame()
    finally:
        _set_quota(quota_broker, client_id, "request_percentage", None)


async def test_a_broker_of_a_quorum_alters_quotas_through_the_active_controller(
    voters: list[QuorumController], tmp_path: Path
) -> None:
    """The multi-process path, in this process: a broker's remote controller client forwards AlterClientQuotas to
    the active voter over the CONTROLLER listener, and sees the result in its own replica of the image."""
    await active_voter(voters)
    broker = ServerConfig.from_properties(
        {
            "process.roles": "broker",
            "node.id": "7",
            "controller.quorum.voters": ",".join(voters[0].config.value("controller.quorum.voters")),
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "controller.listener.names": "CONTROLLER",
            "log.dirs": str(tmp_path / "broker"),
            "s3.data.buckets": f"0@file://{tmp_path / 'objects'}",
        }
    )
    client = await start_quorum_client(broker, catch_up_timeout_s=20)
    try:
        alice = (("user", "alice"),)
        results = await client.alter_client_quotas(
            [
                QuotaAlteration(alice, (("producer_byte_rate", 1024.0),)),
                QuotaAlteration((("user", "bob"),), (("nonsense", 1.0),)),
            ],
            validate_only=False,
        )
        assert [r.error for r in results] == [ErrorCode.none, ErrorCode.invalid_request]
        assert "nonsense" in (results[1].message or "")
        assert client.image.client_quotas == {alice: {"producer_byte_rate": 1024.0}}
    finally:
        await client.close()


async def test_quota_apis_need_cluster_describe_configs_and_alter_configs() -> None:
    """Kafka's checks: DescribeClientQuotas needs DESCRIBE_CONFIGS and AlterClientQuotas ALTER_CONFIGS on the
    cluster; refused, the handler never runs and every entry carries CLUSTER_AUTHORIZATION_FAILED."""
    settings: dict[str, object] = {"authorizer.class.name": STANDARD_AUTHORIZER}
    authorizer = BrokerAuthorizer(settings.get, dict)  # no binding: nothing is allowed

    async def never(_ctx: RequestContext, _request: Any) -> Any:
        raise AssertionError("the handler ran without the ACL")

    def context(api_key: int) -> RequestContext:
        return RequestContext(
            api_key=api_key,
            api_version=1,
            correlation_id=1,
            client_id="quota-acl",
            client_host="127.0.0.1",
            broker=cast(BrokerServices, None),
            authorizer=authorizer,
        )

    describe = await serve_authorized(context(48), schema.build(codec.request_class(48, 1), components=()), never)
    assert describe.error_code == ErrorCode.cluster_authorization_failed
    alter_cls = codec.request_class(49, 1)
    entry = schema.build_nested(
        alter_cls,
        "entries",
        entity=(
            schema.build_nested(
                schema.field_entity(alter_cls, "entries"), "entity", entity_type="user", entity_name="alice"
            ),
        ),
        ops=(),
    )
    altered = await serve_authorized(context(49), schema.build(alter_cls, entries=(entry,)), never)
    assert [(e.error_code, [(x.entity_type, x.entity_name) for x in e.entity]) for e in altered.entries] == [
        (ErrorCode.cluster_authorization_failed, [("user", "alice")])
    ]


async def test_busy_time_counts_the_handlers_own_steps_not_its_waits() -> None:
    async def handler() -> str:
        spin_until = time.perf_counter() + 0.02
        while time.perf_counter() < spin_until:
            pass
        await asyncio.sleep(0.2)  # waiting (storage, a long poll) is not the handler's time
        return "done"

    busy = BusyTime()
    started = time.perf_counter()
    assert await timed(handler(), busy) == "done"
    assert 0.02 <= busy.seconds <= time.perf_counter() - started - 0.2


# ------------------------------------------------------------------ controller_mutation_rate (KIP-599)


def _create_topics_request(version: int, topics: dict[str, int]) -> Any:
    cls = codec.request_class(19, version)
    entries = tuple(
        schema.build_nested(
            cls, "topics", name=name, num_partitions=count, replication_factor=1, assignments=(), configs=()
        )
        for name, count in topics.items()
    )
    return schema.build(cls, topics=entries, timeout=15_000, validate_only=False)


async def test_admin_requests_charge_each_topics_partitions_checking_before_recording(tmp_path: Path) -> None:
    """Kafka's strict quota: a topic is refused only when the quota is already spent before it, and a topic
    charges its partitions (created, deleted, or added) once the controller made the change; the permissive quota
    of older versions refuses nothing and throttles the response."""
    controller = await Controller.start(ServerConfig.load(None, [f"log.dirs={tmp_path}"]))
    try:
        await controller.register_broker(1, (Endpoint("PLAINTEXT", "127.0.0.1", 9092),), None)
        now = [0.0]
        manager = ClientQuotas(QuotaWindows(samples=3, window_s=1.0))  # the rate is measured over >= 2 s
        alice = resolve(
            {(("user", "alice"),): {"controller_mutation_rate": 2.0}}, "controller_mutation_rate", "alice", "app"
        )
        assert alice is not None
        assert (
            resolve({(("user", "alice"),): {"controller_mutation_rate": 2.0}}, "controller_mutation_rate", "bob", "app")
            is None
        )  # another user has no quota: unbounded

        def quota(strict: bool) -> RequestMutations:
            return RequestMutations(manager, alice, user="alice", client_id="app", strict=strict, clock=lambda: now[0])

        ask_of = admin_requests.always(controller)
        # CreateTopics v6: 3 partitions (rate 0 before), 3 more (1.5/s before: within), then over (3/s): refused.
        strict = quota(True)
        ask = topic_wire.read_create_topics(_create_topics_request(6, {"m1": 3, "m2": 3, "m3": 1}), "app")
        response = await admin_requests.create_topics(codec.response_class(19, 6), ask, ask_of, strict)
        assert [(t.name, t.error_code) for t in response.topics] == [
            ("m1", ErrorCode.none),
            ("m2", ErrorCode.none),
            ("m3", ErrorCode.throttling_quota_exceeded),
        ]
        assert response.topics[2].error_message == admin_requests.THROTTLED
        assert "m3" not in controller.image.topics_by_name
        assert strict.throttle_s() == pytest.approx(1.0)  # (3/s - 2/s) / 2/s over the 2 s measured
        now[0] = 0.5
        assert strict.throttle_s() == pytest.approx(0.5)  # what is left of it when the response is sent

        # DeleteTopics v5, still over: refused, nothing deleted. Once the windows passed: both go, 6 charged.
        delete = topic_wire.read_delete_topics(
            schema.build(codec.request_class(20, 5), topic_names=("m1", "m2"), timeout=5000)
        )
        refused = await admin_requests.delete_topics(codec.response_class(20, 5), delete, ask_of, quota(True))
        assert {r.error_code for r in refused.responses} == {ErrorCode.throttling_quota_exceeded}
        assert {"m1", "m2"} <= set(controller.image.topics_by_name)
        now[0] = 3.0
        deleted = await admin_requests.delete_topics(codec.response_class(20, 5), delete, ask_of, quota(True))
        assert [(r.name, r.error_code) for r in deleted.responses] == [("m1", ErrorCode.none), ("m2", ErrorCode.none)]
        assert manager.over_quota(alice, QuotaType.CONTROLLER_MUTATION, now=3.0) == pytest.approx(1.0)

        # CreatePartitions v2 (permissive): over the quota, still done; charged the added partitions; throttled.
        now[0] = 6.0
        await admin_requests.create_topics(
            codec.response_class(19, 6),
            topic_wire.read_create_topics(_create_topics_request(6, {"grown": 1}), "app"),
            ask_of,
            None,
        )
        permissive = quota(False)
        assert not permissive.exhausted()
        grow_cls = codec.request_class(37, 2)
        grow = topic_wire.read_create_partitions(
            schema.build(
                grow_cls,
                topics=(schema.build_nested(grow_cls, "topics", name="grown", count=6, assignments=None),),
                timeout=5000,
                validate_only=False,
            )
        )
        grown = await admin_requests.create_partitions(codec.response_class(37, 2), grow, ask_of, permissive)
        assert [r.error_code for r in grown.results] == [ErrorCode.none]
        assert len(controller.image.topics_by_name["grown"].partitions) == 6
        assert permissive.throttle_s() == pytest.approx(0.5)  # 5 added: (2.5/s - 2/s) / 2/s over 2 s
    finally:
        await controller.close()


async def test_strict_quota_decides_before_the_controller_and_validates_first(tmp_path: Path) -> None:
    """Concurrent CreateTopics v6 of one client cannot overshoot the quota (each topic is checked and charged before
    any controller round trip: no more get through than sent one after the other), and a throttled client still gets
    TOPIC_ALREADY_EXISTS / INVALID_PARTITIONS for topics that would fail anyway, charged nothing; the throttle is
    counted once per request."""
    controller = await Controller.start(ServerConfig.load(None, [f"log.dirs={tmp_path}"]))
    try:
        await controller.register_broker(1, (Endpoint("PLAINTEXT", "127.0.0.1", 9092),), None)
        throttles: list[float] = []
        quotas = {(("user", "alice"),): {"controller_mutation_rate": 2.0}}
        alice = resolve(quotas, "controller_mutation_rate", "alice", "app")
        assert alice is not None
        ask_of = admin_requests.always(controller)

        def created_of(managers: ClientQuotas, names: list[str], sequential: bool) -> Any:
            def quota() -> RequestMutations:
                return RequestMutations(managers, alice, user="alice", client_id="app", strict=True, clock=lambda: 0.0)

            async def one(name: str) -> ErrorCode:
                ask = topic_wire.read_create_topics(_create_topics_request(6, {name: 1}), "app")
                response = await admin_requests.create_topics(codec.response_class(19, 6), ask, ask_of, quota())
                return ErrorCode(int(response.topics[0].error_code))

            async def run() -> list[ErrorCode]:
                if sequential:
                    return [await one(name) for name in names]
                return list(await asyncio.gather(*(one(name) for name in names)))

            return run()

        sequential = await created_of(ClientQuotas(QuotaWindows(3, 1.0)), [f"seq{i}" for i in range(8)], True)
        concurrent = await created_of(ClientQuotas(QuotaWindows(3, 1.0)), [f"par{i}" for i in range(8)], False)
        admitted = sequential.count(ErrorCode.none)
        assert 1 <= admitted < 8
        assert set(sequential[admitted:]) == {ErrorCode.throttling_quota_exceeded}
        assert concurrent.count(ErrorCode.none) <= admitted, concurrent
        assert set(concurrent) == {ErrorCode.none, ErrorCode.throttling_quota_exceeded}

        manager = ClientQuotas(QuotaWindows(3, 1.0), on_throttle=lambda _k, _u, seconds: throttles.append(seconds))
        manager.record_resolved(alice, QuotaType.CONTROLLER_MUTATION, user="alice", client_id="app", value=6.0,
                                now=0.0, check=False)
        spent = RequestMutations(manager, alice, user="alice", client_id="app", strict=True, clock=lambda: 0.0)
        bad = _create_topics_request(6, {"seq0": 1, "zero": 0, "fresh-a": 1, "fresh-b": 2})
        response = await admin_requests.create_topics(
            codec.response_class(19, 6), topic_wire.read_create_topics(bad, "app"), ask_of, spent
        )
        assert [(t.name, t.error_code) for t in response.topics] == [
            ("seq0", ErrorCode.topic_already_exists),
            ("zero", ErrorCode.invalid_partitions),
            ("fresh-a", ErrorCode.throttling_quota_exceeded),
            ("fresh-b", ErrorCode.throttling_quota_exceeded),
        ]
        assert "fresh-a" not in controller.image.topics_by_name
        assert manager.over_quota(alice, QuotaType.CONTROLLER_MUTATION, now=0.0) == pytest.approx(1.0)  # the 6 only
        gone = topic_wire.read_delete_topics(
            schema.build(codec.request_class(20, 5), topic_names=("seq0", "never-was"), timeout=5000)
        )
        deleted = await admin_requests.delete_topics(codec.response_class(20, 5), gone, ask_of, spent)
        assert [(r.name, r.error_code) for r in deleted.responses] == [
            ("seq0", ErrorCode.throttling_quota_exceeded),
            ("never-was", ErrorCode.unknown_topic_or_partition),
        ]
        assert spent.throttle_s() > 0 and spent.throttle_s() > 0
        assert len(throttles) == 1, "counted once for the request, not per refused topic"
    finally:
        await controller.close()


def test_a_late_give_back_is_never_credit() -> None:
    """A refused topic's charge is given back. Given back after the charge's window was forgotten, it once left a
    negative window that let the client's next topics through uncharged; now it takes off only what the windows
    hold, and a give-back within the window still cancels its charge."""
    quotas = {(("user", "alice"),): {"controller_mutation_rate": 2.0}}
    alice = resolve(quotas, "controller_mutation_rate", "alice", "app")
    assert alice is not None
    manager = ClientQuotas(QuotaWindows(samples=3, window_s=1.0))  # measured over >= 2 s, forgotten after 3 s
    now = [0.0]

    def quota() -> RequestMutations:
        return RequestMutations(manager, alice, user="alice", client_id="app", strict=True, clock=lambda: now[0])

    assert quota().admit(6)
    now[0] = 0.5
    quota().adjust(-6)
    assert manager.over_quota(alice, QuotaType.CONTROLLER_MUTATION, now=0.5) == 0.0, "given back in its window"
    assert quota().admit(4)
    now[0] = 10.0  # the 4's window is long forgotten when they are given back
    quota().adjust(-4)
    assert quota().admit(6)
    assert manager.over_quota(alice, QuotaType.CONTROLLER_MUTATION, now=10.0) == pytest.approx(1.0), (
        "the 6 charged in full: (3/s - 2/s) / 2/s over 2 s"
    )


async def test_a_topic_named_twice_is_refused_once_and_charged_nothing(tmp_path: Path) -> None:
    """DeleteTopics naming (or identifying) a topic twice: Kafka's controller answers INVALID_REQUEST once for it,
    and it must not be charged twice to the mutation quota (nor at all); CreateTopics likewise."""
    controller = await Controller.start(ServerConfig.load(None, [f"log.dirs={tmp_path}"]))
    try:
        await controller.register_broker(1, (Endpoint("PLAINTEXT", "127.0.0.1", 9092),), None)
        ask_of = admin_requests.always(controller)
        setup = topic_wire.read_create_topics(_create_topics_request(6, {"twice": 2, "by-id": 2, "once": 1}), "app")
        await admin_requests.create_topics(codec.response_class(19, 6), setup, ask_of, None)
        quotas = {(("user", "alice"),): {"controller_mutation_rate": 0.5}}
        alice = resolve(quotas, "controller_mutation_rate", "alice", "app")
        assert alice is not None
        manager = ClientQuotas(QuotaWindows(3, 1.0))

        def quota() -> RequestMutations:
            return RequestMutations(manager, alice, user="alice", client_id="app", strict=True, clock=lambda: 0.0)

        create_cls = codec.request_class(19, 6)
        twice = schema.build_nested(
            create_cls, "topics", name="new", num_partitions=1, replication_factor=1, assignments=(), configs=()
        )
        create = schema.build(create_cls, topics=(twice, twice), timeout=15_000, validate_only=False)
        created = await admin_requests.create_topics(
            codec.response_class(19, 6), topic_wire.read_create_topics(create, "app"), ask_of, quota()
        )
        assert [(t.name, t.error_code) for t in created.topics] == [("new", ErrorCode.invalid_request)]

        by_name = topic_wire.read_delete_topics(
            schema.build(codec.request_class(20, 5), topic_names=("twice", "twice"), timeout=5000)
        )
        deleted = await admin_requests.delete_topics(codec.response_class(20, 5), by_name, ask_of, quota())
        assert [(r.name, r.error_code, r.error_message) for r in deleted.responses] == [
            ("twice", ErrorCode.invalid_request, "Duplicate topic name.")
        ]
        cls = codec.request_class(20, 6)
        topic_id = controller.image.topics_by_name["by-id"].topic_id
        by_id = topic_wire.read_delete_topics(
            schema.build(
                cls,
                topics=(
                    schema.build_nested(cls, "topics", name=None, topic_id=topic_id),
                    schema.build_nested(cls, "topics", name=None, topic_id=topic_id),
                    schema.build_nested(cls, "topics", name="once", topic_id=uuid_zero),
                ),
                timeout=5000,
            )
        )
        deleted = await admin_requests.delete_topics(codec.response_class(20, 6), by_id, ask_of, quota())
        assert [(r.name, r.error_code, r.error_message) for r in deleted.responses] == [
            (None, ErrorCode.invalid_request, "Duplicate topic id."),
            ("once", ErrorCode.none, None),
        ]
        assert deleted.responses[0].topic_id == topic_id
        assert {"twice", "by-id"} <= set(
            controller.image.topics_by_name
        ) and "new" not in controller.image.topics_by_name
        assert manager.over_quota(alice, QuotaType.CONTROLLER_MUTATION, now=0.0) == 0.0, "only once's 1 partition"
    finally:
        await controller.close()


def _create_one(client: WireClient, version: int, name: str, client_id: str) -> tuple[ErrorCode, str | None, int]:
    correlation_id = client.send(_create_topics_request(version, {name: 1}), client_id=client_id)
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
        assert _alter(client, [(alice, {"controller_mutation_rate": 2.5})]) == [(ErrorCode.none, None)]
        try:
            described = _described(_describe(client, [("user", 0, "alice-mutations")]))
            assert described == {(("user", "alice-mutations"),): {"controller_mutation_rate": 2.5}}
        finally:
            assert _alter(client, [(alice, {"controller_mutation_rate": None})]) == [(ErrorCode.none, None)]
        assert _described(_describe(client, [("user", 0, "alice-mutations")])) == {}
