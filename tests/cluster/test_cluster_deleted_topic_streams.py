"""A topic deleted while the brokers leading its partitions are frozen: they can delete none of its streams, and are
killed before they can. After their restart the streams are closed and no broker will open them again; the active
controller of the Raft quorum deletes them (``controller.orphan_streams``), so the topic's data leaves the bucket,
while a live topic keeps every stream. Real processes: 3 controllers, 3 brokers, S3 on the suite's server."""

from __future__ import annotations

import signal

from node.local_cluster import LocalCluster
from tests.cluster.cluster_support import leaders, produce, shell_in_process, table_rows, topic_name, wait_for
from tests.topics import create_topic, delete_topic

PARTITIONS = 6


def test_streams_a_killed_broker_could_not_delete_are_deleted_by_the_controller(cluster_factory: object) -> None:
    cluster: LocalCluster = cluster_factory(extra={"deleted.topic.streams.check.interval.ms": "500"})  # type: ignore[operator]
    bootstrap = cluster.bootstrap_servers
    doomed, kept = topic_name("doomed"), topic_name("kept")
    for topic in (doomed, kept):
        create_topic(bootstrap, topic, PARTITIONS)
        produce(bootstrap, topic, [f"r{i}" for i in range(60)])
    placement = leaders(bootstrap, doomed, PARTITIONS)
    front = min(placement.values())  # answers the deletion; the brokers leading the rest are frozen meanwhile
    victims = [cluster.node(n) for n in set(placement.values()) - {front}]
    assert victims, placement

    def streams_of(topic: str) -> list[list[str]]:
        rows = table_rows(shell_in_process(cluster).run("ls /streams"))  # ID EPOCH STATE START END OWNER TAGS
        return [r for r in rows if f"topic={topic}," in r[6]]

    kept_streams = {r[0] for r in streams_of(kept)}
    for victim in victims:
        victim.signal(signal.SIGSTOP)
    try:
        delete_topic(cluster.node(front).spec.address, doomed)
        victim_ids = {str(v.spec.node_id) for v in victims}
        left = wait_for(f"broker {front} to delete its own partitions' streams",
                        lambda: (rows := streams_of(doomed)) and all(r[5] in victim_ids for r in rows) and rows,
                        timeout=30)
    finally:
        for victim in victims:
            victim.kill()
    assert len(left) == 3 * sum(1 for leader in placement.values() if leader != front)  # meta, log, time each

    for victim in victims:
        victim.start()
    wait_for(f"the streams of {doomed} left by the killed brokers deleted", lambda: not streams_of(doomed),
             timeout=60)
    assert {r[0] for r in streams_of(kept)} == kept_streams
    assert "of deleted topics their brokers left behind" in cluster.logs(20000)
