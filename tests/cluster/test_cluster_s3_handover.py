"""A broker that cannot write to S3 hands over (issue 24): on a 3-controller, 3-broker cluster with the S3 WAL, only
one broker's S3 traffic passes through testkit's fault-injecting proxy (as its HTTP proxy, so that its WAL bucket is
the same as the others' and they can replay its WAL), and the proxy goes away for longer than
``s3.wal.handover.ms``. That broker asks to be fenced, its partitions get leaders on the other brokers and take
writes while the outage lasts, its WAL is replayed by one of them, and the process restarts in place and waits for
S3 before registering; while S3 answers its reads but refuses its writes it still waits (its check is a probe write),
and once S3 is back it registers and serves again, with nothing restarted from outside, its ``/metrics`` counting the
hand-over. An idempotent acks=all producer writes throughout; every record it had acknowledged is consumed at the end.

On the same cluster, a SIGTERM while S3 black-holes that broker's requests stops it within a bound (its controlled
shutdown gives its partitions up; the appends its WAL cannot write are abandoned, never acknowledged) instead of
waiting on the upload pipeline's retries, and nothing acknowledged is lost.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from node.local_cluster import BROKER_ID_BASE, LocalCluster, NodeProcess, plan_cluster, wait_ready
from testkit.s3_fault_proxy import S3FaultProxy
from tests.cluster.cluster_support import (
    FAST,
    ProduceLoad,
    assert_all_consumed,
    leaders,
    live_brokers,
    topic_name,
    wait_for,
)
from tests.cluster.test_cluster_s3_outages import (
    PARTITIONS,
    _create_topic,
    _every_partition_writable,
    idempotent_load,
)
from tests.conftest import S3Server
from tests.metrics_scrape import metrics_url, sample, scrape

HANDOVER_MS = 6000
OUTAGE_S = 120.0  # far longer than the hand-over takes: the test ends it once the broker has handed over
FAULTY = BROKER_ID_BASE  # the broker whose S3 traffic meets the outage
CONTROLLED_SHUTDOWN_MS = 5000
SHUTDOWN_UPLOAD_MS = 3000
SHUTDOWN_BOUND_S = (CONTROLLED_SHUTDOWN_MS + SHUTDOWN_UPLOAD_MS) / 1000 + 10
"""A SIGTERM during an outage: the controlled shutdown's bound, the last uploads' bound (``s3.shutdown.upload.max.ms``)
and a few seconds for the rest of the stop (measured: about 13 s; the margin is for a loaded 2-core CI machine)."""


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


@pytest.fixture(scope="module")
def one_faulty_broker(s3_server: S3Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with S3FaultProxy(s3_server.endpoint, seed=24) as proxy:
        store = s3_server.bucket_url_text(s3_server.create_bucket("handover"))
        extra = {**FAST, "s3.wal.unwritable.max.ms": "3000", "s3.wal.handover.ms": str(HANDOVER_MS),
                 "s3.max.retries": "3", "metrics.port": "0", "controlled.shutdown.enable": "true",
                 "controlled.shutdown.timeout.ms": str(CONTROLLED_SHUTDOWN_MS),
                 "s3.shutdown.upload.max.ms": str(SHUTDOWN_UPLOAD_MS)}
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
        # S3 answers its reads again but still refuses its writes: its probe writes fail, so it keeps waiting.
        refused = c.proxy.stats.internal_errors
        c.proxy.refuse_writes()
        c.proxy.end_outage()
        wait_for("two probe writes refused", lambda: c.proxy.stats.internal_errors >= refused + 8, 30)
        assert FAULTY not in live_brokers(c.healthy_bootstrap), "it registered while S3 refused its writes"
        # S3 back: by itself it registers again and serves.
        c.proxy.clear()
        wait_for(f"broker {FAULTY} to rejoin", lambda: FAULTY in live_brokers(c.healthy_bootstrap), 60)
        wait_for(f"broker {FAULTY} to serve", lambda: "serving" in c.faulty.log_text(tail=2_000_000).split(
            "registers once S3 answers")[-1], 60)
        _every_partition_writable(bootstrap, topic, timeout=30)
        # The restarted incarnation's /metrics counts the hand-over of the one before it.
        text = scrape(metrics_url(c.faulty.log_text(tail=2_000_000).split("restarts in place")[-1]))
        assert sample(text, "fjord_wal_handovers_total") == 1, text
        assert sample(text, "fjord_wal_handing_over") == 0, text
    finally:
        load.stop()
    assert not load.failed, f"{len(load.failed)} records failed, e.g. {load.failed[:3]}"
    assert_all_consumed(c.healthy_bootstrap, topic, PARTITIONS, load.acked, timeout=90)


def test_a_sigterm_during_an_s3_outage_stops_the_broker_within_a_bound(one_faulty_broker: Cluster) -> None:
    c = one_faulty_broker
    assert c.faulty.running, "the hand-over test left the faulty broker stopped"
    partitions = PARTITIONS  # as _every_partition_writable writes
    topic = topic_name("s3-sigterm")
    admin = AdminClient({"bootstrap.servers": c.cluster.bootstrap_servers})
    admin.create_topics([NewTopic(topic, partitions, replica_assignment=[[FAULTY]] * partitions)])[topic].result(30)
    assert set(leaders(c.cluster.bootstrap_servers, topic, partitions).values()) == {FAULTY}
    load = ProduceLoad(c.cluster.bootstrap_servers, topic, idempotent=True, partitions=partitions,
                       timeout_s=150).start()
    try:
        wait_for("the load to get going", lambda: len(load.acked) >= 100, 30)
        held = c.proxy.stats.black_holed
        c.proxy.outage(OUTAGE_S, mode="blackhole")
        wait_for("its WAL's writes to hang", lambda: c.proxy.stats.black_holed > held, 10)
        began = time.monotonic()
        c.faulty.terminate()
        status = c.faulty.wait(SHUTDOWN_BOUND_S)
        took = time.monotonic() - began
        print(f"broker {FAULTY} stopped {took:.1f}s after its SIGTERM, S3 black-holed")
        assert status == 0, f"exit status {status} after {took:.1f}s:\n{c.faulty.log_text(tail=6000)}"
        # Its partitions went to the others, which take writes.
        _every_partition_writable(c.healthy_bootstrap, topic, timeout=30)
        acked = len(load.acked)
        wait_for("the load to go on", lambda: len(load.acked) >= acked + 100, 60)
    finally:
        load.stop()
        c.proxy.clear()
    assert not load.failed, f"{len(load.failed)} records failed, e.g. {load.failed[:3]}"
    assert_all_consumed(c.healthy_bootstrap, topic, partitions, load.acked, timeout=90)
