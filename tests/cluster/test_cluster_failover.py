"""Failures of a 3-controller, 3-broker cluster under real clients: the active controller killed (-9) under
produce load, a broker killed (-9), and a stale broker (paused past its session timeout, then resumed)."""

from __future__ import annotations

import asyncio
import functools
import signal
import time
from collections import Counter

import pytest

from controller.quorum import RAFT_DIR_NAME
from controller.shell_sources import from_controllers
from metadata.image import is_cluster_record
from metadata.rpc.connection import ControllerConnection
from metadata.rpc.error_codes import RpcError
from metadata.rpc.stream_rpcs import CommitStreamSetObject, PrepareObjects, StreamRequest
from node.local_cluster import LocalCluster
from storage.metadata.api import CommitStreamSetObjectRequest, NodeIdentity, ObjectStreamRange
from storage.metadata.record_codec import MetadataRecord
from testkit.waiting import eventually_async
from tests.cluster.cluster_support import (
    SESSION_TIMEOUT_S,
    ProduceLoad,
    assert_all_consumed,
    consume_all,
    data_dir_of,
    kill_active_controller,
    leaders,
    live_brokers,
    produce,
    shell_in_process,
    table_rows,
    topic_name,
    wait_for,
)
from tests.topics import create_topic

ELECTION_LIMIT_S = 3.0


def _bootstrap_without(cluster: LocalCluster, node_id: int) -> str:
    return ",".join(b.spec.address for b in cluster.brokers if b.spec.node_id != node_id)


def _controller_states(cluster: LocalCluster) -> list[tuple[int, list[MetadataRecord]]]:
    """(applied offset, records) of every running controller, each asked on its own."""
    out: list[tuple[int, list[MetadataRecord]]] = []
    for node in cluster.controllers:
        if node.running:
            loaded = asyncio.run(from_controllers([("127.0.0.1", node.spec.quorum_port)]))
            offset = int(loaded.source.rsplit("offset ", 1)[1].rstrip(")"))
            out.append((offset, list(loaded.records)))
    return out


def test_killing_the_active_controller_under_load_loses_nothing(cluster_factory: object) -> None:
    cluster: LocalCluster = cluster_factory()  # type: ignore[operator]
    bootstrap = cluster.bootstrap_servers
    topic = topic_name("ctrl-kill")
    create_topic(bootstrap, topic, 6)
    leaders(bootstrap, topic, 6)
    load = ProduceLoad(bootstrap, topic).start()
    try:
        load.wait_acked(300, timeout=30)
        victim, successor, elected_after = kill_active_controller(cluster)
        assert successor != victim
        assert elected_after < ELECTION_LIMIT_S, f"the new leader took {elected_after:.1f} s"
        before = len(load.acked)
        load.wait_acked(before + 300, timeout=30)  # producers carry on through the failover
        # Metadata writes go to the new active controller.
        second = topic_name("after-failover")
        create_topic(bootstrap, second, 3)
        leaders(bootstrap, second, 3)
    finally:
        load.stop()
    assert not load.failed, load.failed[:5]
    assert_all_consumed(bootstrap, topic, 6, load.acked)

    # The killed controller comes back and converges on exactly the others' metadata: nothing committed was lost.
    cluster.node(victim).start()

    def converged() -> bool:
        states = _controller_states(cluster)
        return len(states) == 3 and len({offset for offset, _ in states}) == 1 and all(
            records == states[0][1] for _, records in states
        )

    wait_for("the three controllers holding identical metadata", converged, timeout=30, interval=0.5)
    shell = shell_in_process(cluster)
    assert {topic, second} <= {row[0] for row in table_rows(shell.run("ls /topics"))}

    # Restart every controller: the quorum comes back with the same image (brokers, topics, partitions, configs).
    before_offset, before_records = _controller_states(cluster)[0]
    image_before = [r for r in before_records if is_cluster_record(r)]
    streams_before = {row[0] for row in table_rows(shell.run("ls /streams"))}
    for node in cluster.controllers:
        node.terminate()
    for node in cluster.controllers:
        assert node.wait(30) == 0, node.log_text()
    for node in cluster.controllers:
        node.start()
    wait_for("the restarted controllers replaying their logs",
             lambda: converged() and _controller_states(cluster)[0][0] >= before_offset, timeout=30, interval=0.5)
    after = [r for r in _controller_states(cluster)[0][1] if is_cluster_record(r)]
    assert after == image_before
    assert streams_before <= {row[0] for row in table_rows(shell_in_process(cluster).run("ls /streams"))}


@pytest.mark.parametrize("wal", ["file"])
def test_a_killed_brokers_partitions_move_and_its_data_returns_when_it_restarts(
    cluster_factory: object, wal: str
) -> None:
    # Small snapshot thresholds: controllers and the brokers' metadata replicas snapshot as they go, so the
    # restarted broker rebuilds its metadata from its own snapshot plus the log after it.
    cluster: LocalCluster = cluster_factory(  # type: ignore[operator]
        wal=wal, extra={"metadata.log.max.record.bytes.between.snapshots": "4096"}
    )
    bootstrap = cluster.bootstrap_servers
    topic = topic_name("broker-kill")
    create_topic(bootstrap, topic, 6)
    placement = leaders(bootstrap, topic, 6)
    first = produce(bootstrap, topic, [f"a{i}" for i in range(240)])
    assert len(first) == 240

    victim = placement[0]
    led_by_victim = {p for p, leader in placement.items() if leader == victim}
    others = _bootstrap_without(cluster, victim)
    # The replica snapshots in the background once its log passes the threshold; a loaded machine may take a while.
    snapshots = data_dir_of(cluster, victim) / "metadata" / RAFT_DIR_NAME / "snapshots"
    wait_for(f"broker {victim} to snapshot its metadata replica", lambda: list(snapshots.glob("*.checkpoint")),
             timeout=30)
    killed_at = time.monotonic()
    cluster.node(victim).kill()

    def moved() -> dict[int, int] | None:
        now = leaders(others, topic)
        return now if all(now.get(p, victim) not in (victim, -1) for p in led_by_victim) else None

    after = wait_for(f"partitions {sorted(led_by_victim)} led by a live broker", moved, timeout=SESSION_TIMEOUT_S + 10)
    assert time.monotonic() - killed_at >= SESSION_TIMEOUT_S * 0.5, "moved before the session could time out"
    wait_for(f"broker {victim} gone from Metadata", lambda: victim not in live_brokers(others), timeout=10)
    assert set(after.values()) <= {b.spec.node_id for b in cluster.brokers} - {victim}

    # What the dead broker acknowledged but had not uploaded is in its file WAL only, on its own disk: it comes back
    # when the broker restarts (recovery uploads it and closes the streams, and the new leaders open them). With the
    # s3 WAL a live broker replays it instead (the test below).
    cluster.node(victim).start()
    second = produce(bootstrap, topic, [f"b{i}" for i in range(240)], timeout=90)
    assert len(second) == 240, (
        f"only {len(second)} of 240 records acknowledged after the broker came back\n{cluster.logs(4000)}"
    )
    expected = first | second
    seen = consume_all(bootstrap, topic, 6, expected, timeout=60)
    missing = expected - set(seen)
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. {sorted(missing)[:5]}"
    assert len(seen) == len(set(seen)), "records were duplicated"


def test_a_killed_s3_wal_brokers_acknowledged_records_are_served_without_it(cluster_factory: object) -> None:
    # Nothing is uploaded on a timer: whatever a broker acknowledged is in its S3 WAL only, until a live broker
    # replays the dead one's WAL, which it does in place (its v2 objects copied inside S3 and committed).
    cluster: LocalCluster = cluster_factory(wal="s3", extra={"s3.wal.upload.interval.ms": "600000"})  # type: ignore[operator]
    bootstrap = cluster.bootstrap_servers
    topic = topic_name("wal-failover")
    create_topic(bootstrap, topic, 6)
    placement = leaders(bootstrap, topic, 6)
    victim = placement[0]
    led_by_victim = {p for p, leader in placement.items() if leader == victim}
    others = _bootstrap_without(cluster, victim)
    load = ProduceLoad(bootstrap, topic, idempotent=True).start()
    try:
        load.wait_acked(300, timeout=30)
        cluster.node(victim).kill()
        at_kill = len(load.acked)

        def moved() -> dict[int, int] | None:
            now = leaders(others, topic)
            return now if all(now.get(p, victim) not in (victim, -1) for p in led_by_victim) else None

        wait_for(f"partitions {sorted(led_by_victim)} led by a live broker", moved, timeout=SESSION_TIMEOUT_S + 10)

        def failover_done() -> list[str] | None:
            rows = {r[0]: r for r in table_rows(shell_in_process(cluster).run("ls /failovers"))}
            row = rows.get(str(victim))
            return row if row is not None and row[5] == "done" else None

        row = wait_for(f"the WAL failover of broker {victim}", failover_done, timeout=30)
        assert int(row[2]) != victim
        load.wait_acked(at_kill + 300, timeout=60)  # producers carry on with the new leaders
    finally:
        load.stop()
    assert not load.failed, load.failed[:5]
    # Every acknowledged record, also those only the dead broker's WAL held, is served by the live brokers.
    seen = consume_all(others, topic, 6, load.acked, timeout=60)
    missing = load.acked - set(seen)
    assert not missing, f"{len(missing)} acknowledged records lost without broker {victim}, e.g. {sorted(missing)[:5]}"
    assert [v for v, n in Counter(seen).items() if n > 1] == [], "the failover duplicated records"
    assert f"WAL recovery of node {victim} (failover by node {row[2]}): committed in place" in cluster.logs(10**7), (
        "the failover did not commit the WAL in place"
    )

    # The victim restarts on its emptied WAL: it replays nothing a second time, and serves again.
    cluster.node(victim).start()
    wait_for(f"broker {victim} back in Metadata", lambda: victim in live_brokers(bootstrap), timeout=30)
    second = produce(bootstrap, topic, [f"b{i}" for i in range(120)], timeout=90)
    assert len(second) == 120, f"only {len(second)} of 120 acknowledged after the restart\n{cluster.logs(4000)}"
    after = Counter(consume_all(bootstrap, topic, 6, load.acked | second, timeout=60))
    missing = (load.acked | second) - set(after)
    assert not missing, f"{len(missing)} acknowledged records lost after the restart, e.g. {sorted(missing)[:5]}"
    before = Counter(seen)
    assert {v: after[v] for v in before} == dict(before), "the restart replayed records a second time"
    assert all(after[v] == 1 for v in second), "records were duplicated"
    fresh = topic_name("after-restart")
    create_topic(bootstrap, fresh, 3)
    assert victim in set(leaders(bootstrap, fresh, 3).values())
    assert len(produce(bootstrap, fresh, [f"c{i}" for i in range(30)], timeout=60)) == 30


def test_a_paused_broker_is_fenced_and_cannot_commit(cluster_factory: object) -> None:
    cluster: LocalCluster = cluster_factory()  # type: ignore[operator]
    bootstrap = cluster.bootstrap_servers
    topic = topic_name("stale")
    create_topic(bootstrap, topic, 3)
    placement = leaders(bootstrap, topic, 3)
    first = produce(bootstrap, topic, [f"a{i}" for i in range(90)])
    victim = placement[0]
    shell = shell_in_process(cluster)
    epoch = {int(r[0]): int(r[1]) for r in table_rows(shell.run("ls /brokers"))}[victim]
    owned = [r for r in table_rows(shell.run("ls /streams")) if r[5] == str(victim) and f"topic={topic}," in r[6]]
    assert owned, "the victim owns no stream"
    stream_id, stream_epoch, end = int(owned[0][0]), int(owned[0][1]), int(owned[0][4])

    node = cluster.node(victim)
    node.signal(signal.SIGSTOP)
    try:
        others = _bootstrap_without(cluster, victim)
        wait_for(f"broker {victim} fenced", lambda: victim not in live_brokers(others), SESSION_TIMEOUT_S + 10)
        wait_for(f"the metadata showing broker {victim} fenced", lambda: {
            int(r[0]): r[2] for r in table_rows(shell_in_process(cluster).run("ls /brokers"))
        }[victim] == "fenced", timeout=10)

        # Whatever the stale broker still has to say is refused by its epoch: no object commit, no prepare.
        identity = NodeIdentity(victim, epoch)
        commit = CommitStreamSetObjectRequest(identity, 10_000_000, 100,
                                              (ObjectStreamRange(stream_id, end, end + 1, stream_epoch),))
        codes = asyncio.run(_ask_active(cluster, [CommitStreamSetObject(identity, commit),
                                                  PrepareObjects(identity, 1, 60_000)]))
        assert codes == [RpcError.NODE_FENCED, RpcError.NODE_FENCED], codes
    finally:
        node.signal(signal.SIGCONT)

    # Resumed, it steps down or rejoins; either way every partition serves again and nothing acknowledged is lost.
    second = produce(bootstrap, topic, [f"b{i}" for i in range(90)], timeout=90)
    assert len(second) == 90, f"only {len(second)} of 90 acknowledged after the resume\n{cluster.logs(4000)}"
    expected = first | second
    seen = consume_all(bootstrap, topic, 3, expected, timeout=60)
    missing = expected - set(seen)
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. {sorted(missing)[:5]}"
    assert len(seen) == len(set(seen)), "records were duplicated"


async def _ask_active(cluster: LocalCluster, requests: list[StreamRequest]) -> list[int]:
    """Sends each request to whichever controller answers as active; returns the error codes."""
    codes: list[int] = []
    for request in requests:
        codes.append(await eventually_async(
            functools.partial(_answer_of_active, cluster, request), until=lambda code: code is not None,  # 0 is NONE
            timeout=10, interval=0.1, what=f"an active controller to answer {type(request).__name__}",
        ))
    return codes


async def _answer_of_active(cluster: LocalCluster, request: StreamRequest) -> int | None:
    """The error code of the first controller that does not answer NOT_CONTROLLER; None if none answered."""
    for node in cluster.controllers:
        connection = ControllerConnection("127.0.0.1", node.spec.quorum_port, client_id="stale-test")
        try:
            await connection.connect(timeout=2)
            response = await connection.stream_request(request, timeout=5)
        except (OSError, TimeoutError):
            continue
        finally:
            await connection.close()
        if response.error_code != RpcError.NOT_CONTROLLER:
            return int(response.error_code)
    return None


def test_a_resumed_broker_whose_s3_wal_was_taken_over_exits_and_restarts(cluster_factory: object) -> None:
    cluster: LocalCluster = cluster_factory(wal="s3")  # type: ignore[operator]
    bootstrap = cluster.bootstrap_servers
    topic = topic_name("zombie")
    create_topic(bootstrap, topic, 3)
    victim = leaders(bootstrap, topic, 3)[0]
    first = produce(bootstrap, topic, [f"a{i}" for i in range(60)])
    node = cluster.node(victim)
    node.signal(signal.SIGSTOP)
    try:
        def failover_target() -> str | None:
            rows = {r[0]: r for r in table_rows(shell_in_process(cluster).run("ls /failovers"))}
            row = rows.get(str(victim))
            return row[2] if row is not None and row[5] == "done" else None

        target = wait_for(f"another broker replaying broker {victim}'s WAL", failover_target,
                          timeout=SESSION_TIMEOUT_S + 30)
    finally:
        node.signal(signal.SIGCONT)

    # Resumed, it finds its WAL taken over: one ERROR line naming itself and the taker, then a non-zero exit.
    status = node.wait(timeout=30)
    log = node.log_text(20_000)
    assert status not in (0, -9), f"broker {victim} exited with {status}\n{log[-3000:]}"
    halt_lines = [line for line in log.splitlines() if "took over its S3 WAL" in line]
    assert len(halt_lines) == 1, log[-3000:]
    assert "ERROR" in halt_lines[0] and f"node {victim} " in halt_lines[0] and f"broker {target} " in halt_lines[0]
    assert "restarted" in halt_lines[0]

    # What a supervisor does: start it again. It rejoins, leads partitions again and nothing is lost.
    node.start()
    wait_for(f"broker {victim} back in Metadata", lambda: victim in live_brokers(bootstrap), timeout=30)
    fresh = topic_name("after-halt")
    create_topic(bootstrap, fresh, 3)
    assert victim in set(leaders(bootstrap, fresh, 3).values())
    assert len(produce(bootstrap, fresh, [f"c{i}" for i in range(30)], timeout=60)) == 30
    seen = consume_all(bootstrap, topic, 3, first, timeout=60)
    assert first <= set(seen) and len(seen) == len(set(seen))
