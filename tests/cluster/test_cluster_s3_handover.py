"""A broker that cannot write to S3 hands over (issue 24): on a 3-controller, 3-broker cluster with the S3 WAL, only
one broker's S3 traffic passes through testkit's fault-injecting proxy (as its HTTP proxy, so that its WAL bucket is
the same as the others' and they can replay its WAL), and the proxy goes away for longer than
``s3.wal.handover.ms``. That broker asks to be fenced, its partitions get leaders on the other brokers and take
writes while the outage lasts, its WAL is replayed by one of them, and the process restarts in place and waits for
S3 before registering; once S3 is back it registers and serves again, with nothing restarted from outside. An
idempotent acks=all producer writes throughout; every record it had acknowledged is consumed at the end.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from node.local_cluster import BROKER_ID_BASE, LocalCluster, NodeProcess, plan_cluster, wait_ready
from testkit.s3_fault_proxy import S3FaultProxy
from tests.cluster.cluster_support import FAST, assert_all_consumed, leaders, live_brokers, wait_for
from tests.cluster.test_cluster_s3_outages import (
    PARTITIONS,
    _create_topic,
    _every_partition_writable,
    idempotent_load,
)
from tests.conftest import S3Server

HANDOVER_MS = 6000
OUTAGE_S = 120.0  # far longer than the hand-over takes: the test ends it once the broker has handed over
FAULTY = BROKER_ID_BASE  # the broker whose S3 traffic meets the outage


@dataclass
class Cluster:
    cluster: LocalCluster
    proxy: S3FaultProxy

    @property
    def faulty(self) -> NodeProcess:
        return self.cluster.node(FAULTY)

    @property
    def healthy_bootstrap(self) -> str:
        return ",".join(n.spec.address for n in self.cluster.brokers if n.spec.node_id != FAULTY)


@pytest.fixture
def one_faulty_broker(s3_server: S3Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with S3FaultProxy(s3_server.endpoint, seed=24) as proxy:
        store = s3_server.bucket_url_text(s3_server.create_bucket("handover"))
        extra = {**FAST, "s3.wal.unwritable.max.ms": "3000", "s3.wal.handover.ms": str(HANDOVER_MS),
                 "s3.max.retries": "3"}
        cluster = LocalCluster(plan_cluster(tmp_path_factory.mktemp("s3-handover"), controllers=3, brokers=3,
                                            object_store=store, wal="s3", extra=extra))
        proxied = {"HTTP_PROXY": proxy.endpoint, "http_proxy": proxy.endpoint, "NO_PROXY": "", "no_proxy": ""}
        cluster.node(FAULTY).env.update(proxied)
        cluster.start_all()
        try:
            asyncio.run(wait_ready(cluster, 60))
        except BaseException:
            logs = cluster.logs()
            cluster.kill_all()
            raise AssertionError(f"the cluster did not start:\n{logs}") from None
        try:
            yield Cluster(cluster, proxy)
        finally:
            proxy.clear()
            cluster.stop_all(timeout=30)


def test_a_broker_that_cannot_write_to_s3_hands_its_partitions_over_and_rejoins(one_faulty_broker: Cluster) -> None:
    c = one_faulty_broker
    bootstrap = c.cluster.bootstrap_servers
    topic = _create_topic(bootstrap)
    assert FAULTY in leaders(bootstrap, topic, PARTITIONS).values(), "the faulty broker leads nothing to hand over"
    load = idempotent_load(c.healthy_bootstrap, topic)
    try:
        wait_for("the load to get going", lambda: len(load.acked) >= 100, 30)
        assert c.faulty.proc is not None
        pid = c.faulty.proc.pid
        c.proxy.outage(OUTAGE_S, mode="refuse")
        began = time.monotonic()
        # It asks to be fenced past s3.wal.handover.ms; broker 101 or 102 takes its WAL over, and the process
        # restarts in place and waits for S3 before it registers again.
        wait_for("the hand-over and the restart in place",
                 lambda: "registers once S3 answers" in c.faulty.log_text(tail=2_000_000), HANDOVER_MS / 1000 + 30)
        handed_over_s = time.monotonic() - began
        log = c.faulty.log_text(tail=2_000_000)
        assert "asks the controller to fence it" in log and "restarts in place" in log, log[-4000:]
        assert c.faulty.running and c.faulty.proc is not None and c.faulty.proc.pid == pid
        print(f"broker {FAULTY} handed over and restarted {handed_over_s:.1f}s into the outage")
        # While S3 is still away for it, every partition has a leader among the others and takes writes.
        wait_for("every partition led by a healthy broker",
                 lambda: FAULTY not in leaders(c.healthy_bootstrap, topic, PARTITIONS).values(), 30)
        took = _every_partition_writable(c.healthy_bootstrap, topic, timeout=30)
        print(f"every partition writable {took:.2f}s after the hand-over, the outage still on")
        acked_after = len(load.acked)
        wait_for("the load to go on during the outage", lambda: len(load.acked) >= acked_after + 200, 60)
        assert FAULTY not in live_brokers(c.healthy_bootstrap), "it registered while S3 was away for it"
        # S3 back: by itself it registers again and serves.
        c.proxy.end_outage()
        wait_for(f"broker {FAULTY} to rejoin", lambda: FAULTY in live_brokers(c.healthy_bootstrap), 60)
        wait_for(f"broker {FAULTY} to serve", lambda: "serving" in c.faulty.log_text(tail=2_000_000).split(
            "registers once S3 answers")[-1], 60)
        _every_partition_writable(bootstrap, topic, timeout=30)
    finally:
        load.stop()
    assert not load.failed, f"{len(load.failed)} records failed, e.g. {load.failed[:3]}"
    assert_all_consumed(c.healthy_bootstrap, topic, PARTITIONS, load.acked, timeout=90)
