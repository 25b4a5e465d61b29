"""Scale-in (issue 12): a broker drained with ``fjord cluster drain``, stopped with SIGTERM (a controlled shutdown)
and unregistered (UnregisterBroker, as ``kafka-cluster.sh unregister`` sends it), under an idempotent producer's
load: every acknowledged record is read exactly once in order, the producer keeps being acknowledged through the
moves (no moved partition waits long for an acknowledgement), the stopped broker led nothing and left its WAL
empty, and the cluster then lists two brokers."""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

from confluent_kafka.admin import AdminClient
from kio.schema.errors import ErrorCode

from node.local_cluster import REPO_ROOT, LocalCluster
from testkit.node_process import WireClient
from tests.cluster.cluster_support import (
    OrderedLoad,
    leaders,
    live_brokers,
    metadata_shell,
    table_rows,
    topic_name,
    wait_for,
)
from tests.topics import create_topic
from wire import codec, schema

PARTITIONS = 6
UNREGISTER_BROKER = 64
MOVE_LIMIT_S = 30.0  # bounds a hang only: a move takes a fraction of a second
MOVE_GAP_S = 3.0  # generous (test_cluster_reassign.py says why): the longest a drained partition's producer waits


def _unregister(port: int, broker_id: int) -> Any:
    with WireClient(port, timeout=30) as client:
        return client.request(schema.build(codec.request_class(UNREGISTER_BROKER, 0), broker_id=broker_id))


def _drain(bootstrap: str, node: int) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "node.cli", "cluster", "drain", "--bootstrap-server", bootstrap]
    argv += ["--node", str(node), "--timeout", str(MOVE_LIMIT_S)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=MOVE_LIMIT_S + 30, cwd=REPO_ROOT, check=False)


def test_drained_broker_stops_with_nothing_lost_and_is_unregistered(cluster_factory: Any) -> None:
    cluster: LocalCluster = cluster_factory(extra={"controlled.shutdown.enable": "true"})
    ids = sorted(b.spec.node_id for b in cluster.brokers)
    drained = ids[-1]
    staying = cluster.node(ids[0])
    bootstrap = cluster.bootstrap_servers
    topic = topic_name("drain")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    create_topic(bootstrap, topic, PARTITIONS)  # placed round-robin: each broker leads two
    led_before = leaders(bootstrap, topic, PARTITIONS)
    moved = sorted(p for p, leader in led_before.items() if leader == drained)
    assert moved, led_before

    # Unregistering a live broker is refused: it must stop (and drain) first.
    refused = _unregister(staying.spec.port, drained)
    assert refused.error_code == ErrorCode.invalid_request, refused

    load = OrderedLoad(bootstrap, topic, PARTITIONS).start()
    try:
        load.wait_more(300, timeout=30)
        drain_started = time.monotonic()
        result = _drain(staying.spec.address, drained)
        assert result.returncode == 0, f"drain failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
        rows = [line.split() for line in result.stdout.splitlines()]  # TOPIC PARTITION FROM TO
        table = {int(row[1]): (int(row[2]), int(row[3])) for row in rows if len(row) == 4 and row[0] == topic}
        assert sorted(table) == moved, result.stdout
        assert all(source == drained and target != drained for source, target in table.values()), result.stdout
        assert f"broker {drained} leads no partition" in result.stdout
        assert f"broker {drained} excluded from auto-balancing" in result.stdout  # nothing moves back
        led_after = leaders(bootstrap, topic, PARTITIONS)
        assert drained not in led_after.values(), led_after
        assert {p: led_after[p] for p in moved} == {p: table[p][1] for p in moved}
        # Serving: every moved partition acknowledges records again, at its new leader.
        for partition in moved:
            acked = len(load.acked[partition])
            wait_for(
                f"{topic}-{partition} acknowledged after its move",
                lambda p=partition, n=acked: len(load.acked[p]) > n + 20,
                timeout=MOVE_LIMIT_S,
            )
        drained_at = time.monotonic()
        for partition in moved:  # the producer barely noticed the moves (as test_cluster_reassign.py checks)
            gap = load.longest_gap(partition, drain_started, drained_at)
            assert gap < MOVE_GAP_S, f"{topic}-{partition} acknowledged nothing for {gap:.2f} s while drained"

        # SIGTERM: a controlled shutdown that finds nothing left to move, then the WAL is uploaded and emptied.
        node = cluster.node(drained)
        assert node.stop(timeout=MOVE_LIMIT_S) == 0, node.log_text()
        log = node.log_text(200_000)
        assert f"node {drained}: controlled shutdown done in" in log and "it leads 0 partitions" in log, log[-4000:]
        assert f"storage engine of node {drained} stopped; WAL empty" in log, log[-4000:]
        load.wait_more(300, timeout=30)
    finally:
        load.stop()
    assert not load.failed, load.failed[:5]
    load.assert_read_exactly_once(bootstrap)

    unknown = _drain(staying.spec.address, 999)
    assert unknown.returncode == 1 and unknown.stdout == "", unknown
    assert unknown.stderr.strip().splitlines() == [
        f"fjord cluster drain: broker 999 is not a live broker of this cluster (live: {', '.join(map(str, ids[:-1]))})"
    ]

    # kafka-cluster.sh unregister --id N: the stopped broker leaves the cluster's metadata.
    wait_for(f"broker {drained} fenced", lambda: drained not in live_brokers(staying.spec.address), timeout=30)
    answer = _unregister(staying.spec.port, drained)
    assert answer.error_code == ErrorCode.none, answer
    again = _unregister(staying.spec.port, drained)
    assert again.error_code == ErrorCode.broker_id_not_registered, again
    described = admin.describe_cluster(request_timeout=30).result(timeout=30)
    assert sorted(n.id for n in described.nodes) == ids[:-1]
    registered = [int(row[0]) for row in table_rows(metadata_shell(cluster, "ls /brokers"))]
    assert registered == ids[:-1], registered


def _excluded(bootstrap: str) -> str | None:
    """The cluster-wide autobalancer.controller.exclude.broker.ids, as DescribeConfigs of the default broker
    shows it."""
    cls = codec.request_class(32, 4)  # DescribeConfigs
    key = "autobalancer.controller.exclude.broker.ids"
    resource = schema.build_nested(cls, "resources", resource_type=4, resource_name="", configuration_keys=(key,))
    with WireClient(int(bootstrap.rsplit(":", 1)[1]), timeout=30) as client:
        (result,) = client.request(schema.build(cls, resources=(resource,))).results
    return next((entry.value for entry in result.configs), None)


def test_a_refused_drain_leaves_the_broker_to_the_balancer(cluster_factory: Any) -> None:
    """One broker leading partitions has nobody to move them to: the drain fails with one line and leaves
    autobalancer.controller.exclude.broker.ids as it was (it excludes the broker only once it moves partitions)."""
    cluster: LocalCluster = cluster_factory(controllers=1, brokers=1)
    (broker,) = cluster.brokers
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, topic_name("lonely"), 2)
    before = _excluded(bootstrap)
    result = _drain(bootstrap, broker.spec.node_id)
    assert result.returncode == 1, result
    assert result.stderr.strip().splitlines() == [
        f"fjord cluster drain: broker {broker.spec.node_id} leads 2 partitions and no other live broker can take them"
    ]
    assert "excluded" not in result.stdout, result.stdout
    assert _excluded(bootstrap) == before
