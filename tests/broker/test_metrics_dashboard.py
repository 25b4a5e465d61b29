"""The Prometheus metric set of a running node, and the Grafana dashboard built on it.

An in-process embedded node (broker and its single controller) serves ``/metrics`` on a port of its own; a client
produces, a consumer group consumes and commits part of what it read, a share group accepts, releases and rejects
the records, and another share group's consumer holds records past their lock. The scrape must then hold every
metric the dashboard (config/grafana/fjord-dashboard.json) queries, and the values must follow what the clients
did. The
auto-balancer runs only on a Raft quorum's controllers, so the balancer panel's metrics are looked for on a
controller-only node, as docker-compose.yml runs them.
"""

from __future__ import annotations

import asyncio
import json
import re
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from confluent_kafka import AcknowledgeType, Message, ShareConsumer
from prometheus_client.parser import text_string_to_metric_families

from node.process import Node
from settings.server import ServerConfig
from storage.metrics import SNAPSHOT_ATTEMPTS, loop_state_snapshot
from testkit.node_process import default_overrides
from testkit.waiting import eventually_async
from tests.broker.share_clients import drain, set_group_config
from wire.ports import free_port

DASHBOARD = Path(__file__).resolve().parents[2] / "config" / "grafana" / "fjord-dashboard.json"
TOPIC = "metrics-dashboard"
GROUP = "metrics-dashboard-group"
RECORDS = 10
COMMITTED = 6
SHARE_GROUP = "metrics-dashboard-share"
#: A share group whose consumer never acknowledges: its records' 1 s locks run out.
LOCKS_GROUP = "metrics-dashboard-locks"
#: What the share group does with a record the first time, by its number modulo 3 (ACCEPT when it comes back).
FIRST_ACK = (AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE, AcknowledgeType.REJECT)
#: PromQL functions, aggregations and keywords: every other identifier outside braces and brackets is a metric.
PROMQL_WORDS = frozenset(
    {
        "sum",
        "max",
        "min",
        "avg",
        "count",
        "rate",
        "irate",
        "increase",
        "histogram_quantile",
        "clamp_min",
        "by",
        "without",
        "on",
        "ignoring",
        "and",
        "or",
        "unless",
        "bool",
        "offset",
    }
)

Samples = dict[str, list[tuple[dict[str, str], float]]]


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: label matchers, grouping label lists, range durations and
    strings removed, then every identifier that is not a function call nor a keyword."""
    expr = re.sub(r'"[^"]*"', "", expr)
    expr = re.sub(r"\{[^}]*\}", "{}", expr)
    expr = re.sub(r"\[[^\]]*\]", "[]", expr)
    expr = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", "", expr)
    names = set(re.findall(r"(?<![\w$.])([a-zA-Z_:][\w:]*)(?![\w:]|\s*\()", expr))
    return names - PROMQL_WORDS


def dashboard_queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in dashboard["panels"] if p["type"] != "row" for t in p["targets"]]


def test_metric_names_of_promql() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (api, le) (rate(fjord_broker_request_seconds_bucket{api=~"Produce|x"}'
        "[$__rate_interval]))) / clamp_min(sum (fjord_a_total) + fjord_b, 1e-9)"
    )
    assert metric_names(expr) == {"fjord_broker_request_seconds_bucket", "fjord_a_total", "fjord_b"}


def test_a_scrape_reads_loop_state_again_when_it_changed_under_it() -> None:
    failures = [RuntimeError("dictionary changed size during iteration")] * (SNAPSHOT_ATTEMPTS - 1)

    def read() -> str:
        if failures:
            raise failures.pop()
        return "copied"

    assert loop_state_snapshot(read) == "copied"
    failures.extend([RuntimeError("deque mutated during iteration")] * SNAPSHOT_ATTEMPTS)
    with pytest.raises(RuntimeError, match="deque mutated"):
        loop_state_snapshot(read)


async def scrape(port: int) -> Samples:
    def fetch() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            return str(response.read().decode())

    samples: Samples = {}
    for family in text_string_to_metric_families(await asyncio.to_thread(fetch)):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((dict(sample.labels), float(sample.value)))
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    found = [v for have, v in samples.get(name, []) if labels.items() <= have.items()]
    assert len(found) == 1, f"{name}{labels}: {samples.get(name)}"
    return found[0]


async def _lock_timeouts(port: int, labels: dict[str, str]) -> float | None:
    """The lock time-outs counted for ``labels``, None (not yet) while there are none."""
    found = [v for have, v in (await scrape(port)).get("fjord_share_lock_timeouts_total", [])
             if labels.items() <= have.items()]
    return found[0] if found and found[0] > 0 else None


def config(overrides: dict[str, str]) -> ServerConfig:
    return ServerConfig.load(None, [f"{k}={v}" for k, v in overrides.items()])


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    overrides = {**default_overrides(tmp_path / "node"), "metrics.port": "0", "group.initial.rebalance.delay.ms": "0",
                 "group.share.min.record.lock.duration.ms": "1000", "group.share.heartbeat.interval.ms": "500",
                 "group.share.min.heartbeat.interval.ms": "500"}
    started = Node(config(overrides))
    await started.start()
    try:
        yield started
    finally:
        await started.stop()


@pytest.fixture
async def controller_node(tmp_path: Path) -> AsyncIterator[Node]:
    port = free_port()
    overrides = {
        **default_overrides(tmp_path / "controller"),
        "process.roles": "controller",
        "controller.quorum.voters": f"0@127.0.0.1:{port}",
        "listeners": f"CONTROLLER://127.0.0.1:{port}",
        "metrics.port": "0",
    }
    started = Node(config(overrides))
    await started.start()
    try:
        yield started
    finally:
        await started.stop()


async def produce_and_consume(bootstrap: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(TOPIC, num_partitions=1, replication_factor=1)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
    await producer.start()
    try:
        for i in range(RECORDS):
            await producer.send_and_wait(TOPIC, f"record-{i}".encode())
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(
        TOPIC, bootstrap_servers=bootstrap, group_id=GROUP, enable_auto_commit=False, auto_offset_reset="earliest"
    )
    await consumer.start()
    try:
        read = 0
        async with asyncio.timeout(30):
            while read < RECORDS:
                batches = await consumer.getmany(timeout_ms=1000)
                read += sum(len(records) for records in batches.values())
        assert read == RECORDS
        await consumer.commit({TopicPartition(TOPIC, 0): COMMITTED})
    finally:
        await consumer.stop()


def share_consume(bootstrap: str) -> None:
    """A share group (explicit acknowledgement) reads the topic's records: accepts, releases or rejects each by its
    number (:data:`FIRST_ACK`) and accepts the released ones when they come back."""
    set_group_config(bootstrap, SHARE_GROUP, {"share.auto.offset.reset": "earliest"})
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": SHARE_GROUP,
                              "share.acknowledgement.mode": "explicit"})
    try:
        consumer.subscribe([TOPIC])
        seen: set[int] = set()
        back: set[int] = set()

        def judge(consumer: ShareConsumer, message: Message) -> None:
            number = int((message.value() or b"").decode().rsplit("-", 1)[1])
            if number in seen:
                back.add(number)
                consumer.acknowledge(message, AcknowledgeType.ACCEPT)
            else:
                seen.add(number)
                consumer.acknowledge(message, FIRST_ACK[number % 3])

        released = {n for n in range(RECORDS) if n % 3 == 1}
        drain([consumer], lambda: len(seen) == RECORDS and back >= released, judge, "released records to return")
        consumer.commit_sync(10)
        assert back == released, "an accepted or rejected record came back, or a released one did not"
    finally:
        consumer.close()


def hold_records(bootstrap: str) -> ShareConsumer:
    """A consumer of :data:`LOCKS_GROUP` (1 s locks) that got records and will not acknowledge them."""
    set_group_config(bootstrap, LOCKS_GROUP, {"share.auto.offset.reset": "earliest",
                                              "share.record.lock.duration.ms": "1000"})
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": LOCKS_GROUP,
                              "share.acknowledgement.mode": "explicit"})
    consumer.subscribe([TOPIC])
    got: list[Message] = []
    drain([consumer], lambda: bool(got), lambda _c, message: got.append(message), "records for the lock holder")
    return consumer


async def test_every_dashboard_metric_is_served_and_follows_the_clients(node: Node, controller_node: Node) -> None:
    assert node.metrics_port is not None and controller_node.metrics_port is not None
    before = await scrape(node.metrics_port)
    assert not any(labels.get("topic") == TOPIC for labels, _ in before.get("fjord_topic_bytes_in_total", []))
    bootstrap = f"127.0.0.1:{node.broker.server.bound_port}"
    await produce_and_consume(bootstrap)
    await asyncio.to_thread(share_consume, bootstrap)
    holder = await asyncio.to_thread(hold_records, bootstrap)
    try:
        held = {"node": str(node.node_id), "group": LOCKS_GROUP, "topic": TOPIC}
        await eventually_async(
            lambda: _lock_timeouts(node.metrics_port, held), timeout=15, what="the held records' locks to run out"
        )
    finally:
        await asyncio.to_thread(holder.close)

    served = await scrape(node.metrics_port)
    node_id = str(node.node_id)
    assert value(served, "fjord_topic_messages_in_total", node=node_id, topic=TOPIC) == RECORDS
    assert value(served, "fjord_topic_bytes_in_total", node=node_id, topic=TOPIC) > 0
    assert value(served, "fjord_topic_messages_out_total", node=node_id, topic=TOPIC) >= RECORDS
    assert value(served, "fjord_topic_bytes_out_total", node=node_id, topic=TOPIC) > 0
    partition = {"topic": TOPIC, "partition": "0"}
    assert value(served, "fjord_log_end_offset", **partition) == RECORDS
    assert value(served, "fjord_log_start_offset", **partition) == 0
    assert value(served, "fjord_consumer_group_committed_offset", group=GROUP, **partition) == COMMITTED
    assert value(served, "fjord_consumer_group_lag", group=GROUP, **partition) == RECORDS - COMMITTED
    # The topic and __consumer_offsets at least, every one of them led here.
    assert value(served, "fjord_broker_partitions", node=node_id) >= 2
    assert value(served, "fjord_broker_leaders", node=node_id) == value(served, "fjord_broker_partitions")
    assert value(served, "fjord_wal_append_seconds_count") >= RECORDS
    assert value(served, "fjord_wal_appends_total") >= RECORDS
    assert value(served, "fjord_wal_flush_seconds_count") >= 1
    assert value(served, "fjord_log_cache_hits_total") >= 1  # the consumer read the fresh records from memory
    assert value(served, "fjord_controller_active") == 1
    assert value(served, "fjord_controller_leader_id") == node.node_id
    assert value(served, "fjord_controller_metadata_offset") > value(before, "fjord_controller_metadata_offset")
    # The share-group row: 10 records, a third of them released and delivered again, a third rejected.
    share = {"node": node_id, "group": SHARE_GROUP, "topic": TOPIC}
    thirds = len(range(1, RECORDS, 3)), len(range(2, RECORDS, 3))
    assert value(served, "fjord_share_acquired_records_total", **share) == RECORDS + thirds[0]
    assert value(served, "fjord_share_redeliveries_total", **share) == thirds[0]
    assert value(served, "fjord_share_acknowledged_records_total", **share) == RECORDS - thirds[1]
    assert value(served, "fjord_share_released_records_total", **share) == thirds[0]
    assert value(served, "fjord_share_rejected_records_total", **share) == thirds[1]
    assert value(served, "fjord_share_lock_timeouts_total", **share) == 0
    assert value(served, "fjord_share_lock_timeouts_total", group=LOCKS_GROUP, topic=TOPIC) >= 1
    commits = "fjord_controller_commit_seconds_count"
    assert value(served, commits) > value(before, commits)
    # S3 answered throughout: the misbehaviour row's series exist from the start and read zero.
    assert value(served, "fjord_object_store_errors_total", operation="put", code="SlowDown") == 0
    assert value(served, "fjord_object_store_retries_total") == 0
    assert value(served, "fjord_wal_unwritable") == 0
    assert value(served, "fjord_wal_unwritable_seconds_total") == 0
    assert value(served, "fjord_wal_handovers_total") == 0
    assert value(served, "fjord_wal_handing_over") == 0

    # The controller-only node: a Raft voter with the auto-balancer, once it leads its one-voter quorum.
    quorum = controller_node.quorum
    assert quorum is not None
    await eventually_async(lambda: quorum.is_active or None, timeout=15, what="the voter to lead its quorum")
    controller = await scrape(controller_node.metrics_port)
    assert value(controller, "fjord_controller_active") == 1
    assert value(controller, "fjord_controller_epoch") >= 1
    assert value(controller, "fjord_autobalancer_moves_total", goal="leader_count") == 0

    queried = {name for expr in dashboard_queries() for name in metric_names(expr)}
    assert len(queried) >= 30, sorted(queried)
    missing = sorted(name for name in queried if name not in served and name not in controller)
    assert not missing, f"the dashboard queries metrics no node serves: {missing}"
