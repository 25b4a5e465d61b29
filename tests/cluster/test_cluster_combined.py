"""Three combined nodes (process.roles=broker,controller, every one a voter and a broker) as real processes: one
is the active controller, all three serve Kafka clients; kill -9 the node that is the active controller and a new
one is elected, the dead node's partitions move to live nodes, producers carry on and nothing acknowledged is
missing. The nodes use the s3 WAL, so a live node replays the dead one's WAL (with the file WAL, the dead node's
partitions would wait for it to restart: their tail is on its disk only)."""

from __future__ import annotations

import pytest

from node.local_cluster import LocalCluster
from tests.cluster.cluster_support import (
    SESSION_TIMEOUT_S,
    ProduceLoad,
    assert_all_consumed,
    kill_active_controller,
    leaders,
    live_brokers,
    wait_for,
)
from tests.topics import create_topic

pytestmark = pytest.mark.timeout(240)

ELECTION_LIMIT_S = 3.0


def test_three_combined_nodes_survive_killing_the_active_controller(cluster_factory: object) -> None:
    cluster: LocalCluster = cluster_factory(combined=3, controllers=0, brokers=0, wal="s3")  # type: ignore[operator]
    assert [n.spec.role for n in cluster.nodes] == ["combined"] * 3
    bootstrap = cluster.bootstrap_servers
    assert live_brokers(bootstrap) == {0, 1, 2}
    topic = "combined-orders"
    create_topic(bootstrap, topic, 6)
    placement = leaders(bootstrap, topic, 6)
    assert set(placement.values()) == {0, 1, 2}, f"partitions are not spread over the three nodes: {placement}"

    load = ProduceLoad(bootstrap, topic).start()
    try:
        load.wait_acked(200, timeout=30)
        victim, successor, elected_after = kill_active_controller(cluster)
        assert successor != victim
        assert elected_after < ELECTION_LIMIT_S, f"the new leader took {elected_after:.1f} s"

        survivors = ",".join(n.spec.address for n in cluster.brokers if n.spec.node_id != victim)

        def moved() -> dict[int, int] | None:
            now = leaders(survivors, topic, 6)
            return now if victim not in now.values() else None

        placement = wait_for(f"node {victim}'s partitions led elsewhere", moved, timeout=SESSION_TIMEOUT_S + 20)
        assert set(placement.values()) <= {0, 1, 2} - {victim}
        before = len(load.acked)
        load.wait_acked(before + 200, timeout=40)  # producers carry on without the dead node
    finally:
        load.stop()
    assert not load.failed, load.failed[:5]
    assert_all_consumed(survivors, topic, 6, load.acked)

    cluster.node(victim).start()  # the restarted node joins the quorum and serves again
    wait_for(f"node {victim} serving again", lambda: live_brokers(bootstrap) == {0, 1, 2}, timeout=60)
