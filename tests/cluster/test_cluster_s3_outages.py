"""S3 that misbehaves under a running 3-broker cluster (issue 24): the brokers' S3 traffic passes through
testkit's fault-injecting proxy, and the tests take S3 away (5 s and 15 s) or throttle half its requests while an
idempotent acks=all producer keeps writing. After each fault every partition takes writes again within
``WRITABLE_AGAIN_S`` of S3 answering, with no restart of anything, and every acknowledged record is consumed at the
end. The module runs once with the S3 WAL and once with the file WAL (one cluster each, shared by its tests).
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import TopicPartition as KafkaTopicPartition
from kafka.admin import KafkaAdminClient
from kio.schema.errors import ErrorCode

from node.local_cluster import LocalCluster
from testkit.s3_fault_proxy import S3FaultProxy
from testkit.waiting import eventually
from tests.cluster.cluster_support import (
    SESSION_TIMEOUT_S,
    ProduceLoad,
    assert_all_consumed,
    leaders,
    live_brokers,
    request_once,
    shell_in_process,
    table_rows,
    topic_name,
    wait_for,
)
from tests.cluster.conftest import start_cluster
from tests.conftest import S3Server
from wire import codec, schema
from wire.record_batch import Record, build_batch

PARTITIONS = 6
UNWRITABLE_MAX_MS = 8000
"""The S3 WAL refuses new appends (retriably) once S3 has refused its writes this long: the 15 s outage reaches it."""
REPLAY_OUTAGE_S = 6.0
"""The outage that lands in a WAL failover replay: long enough that the replay's reads and uploads meet it."""
WRITABLE_AGAIN_S = 10.0
"""Bound on the time from S3 answering again to every partition having acknowledged a new write (measured: about
1-3 s; the bound leaves room for a loaded 2-core CI machine)."""


@dataclass
class Cluster:
    cluster: LocalCluster
    proxy: S3FaultProxy
    wal: str

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap_servers

    def broker_pids(self) -> list[int]:
        return [n.proc.pid for n in self.cluster.brokers if n.proc is not None and n.running]


@pytest.fixture(scope="module", params=["s3", "file"])
def faulty(request: pytest.FixtureRequest, s3_server: S3Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[
    Cluster
]:
    wal = str(request.param)
    with S3FaultProxy(s3_server.endpoint, seed=24) as proxy:
        cluster = start_cluster(
            tmp_path_factory.mktemp(f"s3-outages-{wal}"),
            S3Server(proxy.endpoint),
            wal=wal,
            extra={"s3.wal.unwritable.max.ms": str(UNWRITABLE_MAX_MS), "s3.max.retries": "4"},
        )
        try:
            yield Cluster(cluster, proxy, wal)
        finally:
            proxy.clear()
            codes = cluster.stop_all(timeout=30)
            assert all(code == 0 for code in codes.values()), f"unclean stop {codes}:\n{cluster.logs()}"


def idempotent_load(bootstrap: str, topic: str) -> ProduceLoad:
    """An idempotent acks=all producer writing numbered records round-robin over the partitions until stopped,
    patient enough (``message.timeout.ms`` 150 s) to outlast every outage of this module."""
    return ProduceLoad(bootstrap, topic, idempotent=True, partitions=PARTITIONS, timeout_s=150).start()


def _create_topic(bootstrap: str) -> str:
    topic = topic_name("s3-faults")
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the answer arrives
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])[topic].result(30)
    leaders(bootstrap, topic, PARTITIONS)
    return topic


def _every_partition_writable(bootstrap: str, topic: str, timeout: float) -> float:
    """Writes one record to every partition with a fresh producer; the seconds until all were acknowledged."""
    started = time.monotonic()
    done: dict[int, float] = {}
    errors: list[str] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": int(timeout * 1000)})

    def delivered(err: KafkaError | None, msg: Any) -> None:
        if err is None:
            done[msg.partition()] = time.monotonic() - started
        else:
            errors.append(f"{msg.partition()}: {err}")

    for partition in range(PARTITIONS):
        producer.produce(topic, value=f"probe-{uuid.uuid4().hex[:6]}".encode(), partition=partition,
                         on_delivery=delivered)
    producer.flush(timeout + 5)
    assert not errors and len(done) == PARTITIONS, f"partitions not writable within {timeout}s: {errors}"
    return max(done.values())


def _tracebacks(cluster: LocalCluster) -> list[str]:
    found = []
    for node in cluster.brokers:
        text = node.log_text(tail=2_000_000)
        found += [m.group(0) for m in re.finditer(r"Traceback[^\n]*\n(?:[ \t].*\n)*.*", text)]
    return found


@pytest.mark.parametrize(("seconds", "mode"), [(5.0, "blackhole"), (15.0, "refuse")])
def test_an_s3_outage_during_produce_loses_nothing_and_every_partition_takes_writes_again(
    faulty: Cluster, seconds: float, mode: str
) -> None:
    _outage_during_produce(faulty, seconds, mode)


@pytest.mark.parametrize("faulty", ["s3"], indirect=True)
def test_a_minute_long_s3_outage_on_the_s3_wal_is_ridden_out_without_a_hand_over(faulty: Cluster) -> None:
    """60 s without S3: twice past ``s3.wal.unwritable.max.ms`` (appends refused, retriably), but short of
    ``s3.wal.handover.ms`` (120 s by default), so every broker keeps its partitions and takes writes again by
    itself once S3 answers."""
    _outage_during_produce(faulty, 60.0, "refuse")
    log = "".join(n.log_text(tail=2_000_000) for n in faulty.cluster.brokers)
    assert "asks the controller to fence it" not in log, "a broker handed over within s3.wal.handover.ms"


def _outage_during_produce(faulty: Cluster, seconds: float, mode: str) -> None:
    topic = _create_topic(faulty.bootstrap)
    pids = faulty.broker_pids()
    tracebacks_before = len(_tracebacks(faulty.cluster))
    load = idempotent_load(faulty.bootstrap, topic)
    try:
        _wait(lambda: len(load.acked) >= 100, 30, "the load to get going")
        faulty.proxy.outage(seconds, mode=mode)  # type: ignore[arg-type]
        time.sleep(seconds)  # the outage lasts this long whatever the brokers do
        _wait(lambda: not faulty.proxy.in_outage, 5, "the outage to end")
        took = _every_partition_writable(faulty.bootstrap, topic, timeout=60)
        print(f"{faulty.wal} WAL, {seconds:.0f}s {mode} outage: every partition writable {took:.2f}s after it ended")
        assert took <= WRITABLE_AGAIN_S, f"every partition took writes again only {took:.1f}s after S3 answered"
        acked_after = len(load.acked)
        _wait(lambda: len(load.acked) >= acked_after + 200, 60, "the load to go on after the outage")
    finally:
        load.stop()
    assert not load.failed, f"{len(load.failed)} records failed, e.g. {load.failed[:3]}"
    assert faulty.broker_pids() == pids, "a broker exited during the outage"
    assert_all_consumed(faulty.bootstrap, topic, PARTITIONS, load.acked, timeout=90)
    if faulty.wal == "s3" and mode == "refuse" and seconds * 1000 > UNWRITABLE_MAX_MS + 3000:
        refused = "new appends are refused" in "".join(n.log_text(tail=2_000_000) for n in faulty.cluster.brokers)
        assert refused, "the outage outlasted s3.wal.unwritable.max.ms but no WAL refused appends"
    new_tracebacks = _tracebacks(faulty.cluster)[tracebacks_before:]
    assert not new_tracebacks, f"{len(new_tracebacks)} tracebacks in the brokers' logs, e.g.\n{new_tracebacks[0]}"


def test_a_slow_down_storm_during_produce_and_fetch(faulty: Cluster) -> None:
    topic = _create_topic(faulty.bootstrap)
    load = idempotent_load(faulty.bootstrap, topic)
    consumer = Consumer({"bootstrap.servers": faulty.bootstrap, "group.id": f"storm-{uuid.uuid4().hex[:6]}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    seen: set[str] = set()
    try:
        _wait(lambda: len(load.acked) >= 100, 30, "the load to get going")
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        faulty.proxy.faults.slow_down = 0.5
        storm_ends = time.monotonic() + 8
        while time.monotonic() < storm_ends:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                seen.add((msg.value() or b"").decode())
        faulty.proxy.faults.slow_down = 0.0
        assert faulty.proxy.stats.slow_downs > 0
        acked_after = len(load.acked)
        _wait(lambda: len(load.acked) >= acked_after + 200, 60, "the load to go on after the storm")
    finally:
        faulty.proxy.faults.slow_down = 0.0
        load.stop()
        consumer.close()
    assert not load.failed, f"{len(load.failed)} records failed, e.g. {load.failed[:3]}"
    assert seen, "the consumer read nothing during the storm"
    assert_all_consumed(faulty.bootstrap, topic, PARTITIONS, load.acked, timeout=90)


def test_a_partition_moved_during_an_outage_lands_and_its_new_leader_reads_it_from_objects_in_a_slow_down_storm(
    faulty: Cluster,
) -> None:
    """The move's source must close the partition's stream, which needs S3 (its last records uploaded, the
    stream's end committed): it waits the outage out, then lands. The target never held the partition, so with
    caches cold it serves the records from before the move from S3 objects, here through 50% SlowDown."""
    topic = _create_topic(faulty.bootstrap)
    placement = leaders(faulty.bootstrap, topic, PARTITIONS)
    brokers = sorted(b.spec.node_id for b in faulty.cluster.brokers)
    source = placement[0]
    target = next(b for b in brokers if b != source)
    admin = KafkaAdminClient(bootstrap_servers=faulty.bootstrap, request_timeout_ms=30_000)
    load = idempotent_load(faulty.bootstrap, topic)
    try:
        _wait(lambda: len(load.acked) >= 300, 30, "the load to get going")
        faulty.proxy.outage(6.0, mode="refuse")
        result = admin.alter_partition_reassignments({KafkaTopicPartition(topic, 0): [target]})
        assert result == {KafkaTopicPartition(topic, 0): None}, result
        _wait(lambda: not faulty.proxy.in_outage, 15, "the outage to end")
        _wait(lambda: leaders(faulty.bootstrap, topic).get(0) == target, WRITABLE_AGAIN_S + 20,
              f"{topic}-0 led by broker {target} after the outage")
        _wait(lambda: admin.list_partition_reassignments() == {}, 30, "the move to be done")
        took = _every_partition_writable(faulty.bootstrap, topic, timeout=60)
        assert took <= WRITABLE_AGAIN_S, f"every partition took writes again only {took:.1f}s after the move"
        acked_after = len(load.acked)
        _wait(lambda: len(load.acked) >= acked_after + 100, 60, "the load to go on after the move")
    finally:
        load.stop()
        admin.close()
    assert not load.failed, f"{len(load.failed)} records failed, e.g. {load.failed[:3]}"
    # Partition 0 from offset 0 on a leader that never held it: stream objects read through 50% SlowDown.
    moved = {v for v in load.acked if int(v[1:]) % PARTITIONS == 0}
    gets = faulty.proxy.stats.gets
    faulty.proxy.faults.slow_down = 0.5
    try:
        seen = assert_all_consumed(faulty.bootstrap, topic, 1, moved, timeout=90)
    finally:
        faulty.proxy.faults.slow_down = 0.0
    # The reads went to S3 while half its answers were SlowDown (how many met one is chance: the records of
    # before the move sit in a few objects, so a few GETs read them).
    assert faulty.proxy.stats.gets > gets, "the new leader read nothing from S3"
    numbered = [v for v in seen if not v.startswith("probe-")]
    assert sorted(numbered, key=lambda v: int(v[1:])) == numbered, "partition 0 read out of order"
    assert set(numbered) <= {f"r{n}" for n in range(0, load.sent, PARTITIONS)}, "records of other partitions read"
    assert_all_consumed(faulty.bootstrap, topic, PARTITIONS, load.acked, timeout=90)


@pytest.mark.parametrize("faulty", ["file"], indirect=True)  # the source's last upload is the same with either WAL
def test_a_move_waiting_on_s3_sends_producers_to_its_target_before_the_election(faulty: Cluster) -> None:
    """While a move's source cannot upload its last records the partition has no leader. The source's refusal of a
    produce names the target already, with the leader epoch its election will give it (KIP-951), and the target holds
    a produce sent to it then and appends it once elected: a producer's retry backoff runs during the hand-over."""
    topic = _create_topic(faulty.bootstrap)
    source = leaders(faulty.bootstrap, topic, PARTITIONS)[0]
    target = next(b.spec.node_id for b in faulty.cluster.brokers if b.spec.node_id != source)
    source_port, target_port = (faulty.cluster.node(n).spec.port for n in (source, target))
    appended = [_produce_at(source_port, topic)]
    assert appended[0].error_code == ErrorCode.none, appended
    admin = KafkaAdminClient(bootstrap_servers=faulty.bootstrap, request_timeout_ms=30_000)
    moved = KafkaTopicPartition(topic, 0)
    faulty.proxy.refuse_writes()
    try:
        assert admin.alter_partition_reassignments({moved: [target]}) == {moved: None}

        def refusal() -> Any:
            answer = _produce_at(source_port, topic)
            if answer.error_code == ErrorCode.none:
                appended.append(answer)  # the source had not seen the move yet
                return None
            return answer

        refused = wait_for(f"broker {source} to refuse {topic}-0", refusal, timeout=15)
        assert refused.error_code == ErrorCode.not_leader_or_follower, refused
        assert refused.current_leader.leader_id == target, refused
        assert moved in admin.list_partition_reassignments(), "elected although the source could not close"
        # Metadata, from either broker, says what the refusal said, so a client refreshing now goes to the target.
        for port in (source_port, target_port):
            assert _leader_and_epoch(port, topic) == (target, refused.current_leader.leader_epoch)
        # A fetch is not held: the target, a replica at the epoch before the election, answers at once as Kafka's
        # replicas do (KIP-320): a consumer at the election's epoch is ahead (UNKNOWN_LEADER_EPOCH, retry), one at
        # the source's is behind (FENCED_LEADER_EPOCH, refresh).
        named = refused.current_leader.leader_epoch
        assert _fetch_error_at(target_port, topic, named) == ErrorCode.unknown_leader_epoch
        assert _fetch_error_at(target_port, topic, named - 2) == ErrorCode.fenced_leader_epoch
        with ThreadPoolExecutor(2) as pool:
            held = pool.submit(_produce_at, target_port, topic)
            end_asked = pool.submit(_end_offset_at, target_port, topic)
            time.sleep(0.5)  # the requests reach the target, which cannot lead the partition before the election
            assert not held.done(), f"broker {target} answered before the move's election: {held.result()}"
            assert not end_asked.done(), f"broker {target} answered before the move's election: {end_asked.result()}"
            faulty.proxy.clear()
            answer = held.result(timeout=60)
            end = end_asked.result(timeout=60)
    finally:
        faulty.proxy.clear()
        admin.close()
    assert answer.error_code == ErrorCode.none, answer
    assert answer.base_offset == appended[-1].base_offset + 1
    assert end.error_code == ErrorCode.none, end
    assert end.offset in (answer.base_offset, answer.base_offset + 1), end  # before or after the held produce
    assert _leader_and_epoch(target_port, topic) == (target, refused.current_leader.leader_epoch)


def _produce_at(port: int, topic: str) -> Any:
    """One record to ``topic``-0 at the broker on ``port`` (Produce v12, acks=all): its partition response."""
    request = codec.request_class(0, 12)
    topic_cls = schema.field_entity(request, "topic_data")
    batch = build_batch([Record(None, b"moving")])
    data = schema.build(topic_cls, name=topic, partition_data=(
        schema.build_nested(topic_cls, "partition_data", index=0, records=batch),))
    sent = schema.build(request, transactional_id=None, acks=-1, timeout=30_000, topic_data=(data,))
    return request_once(port, sent, "s3-outages-test", timeout=60).responses[0].partition_responses[0]


def _end_offset_at(port: int, topic: str) -> Any:
    """The latest offset of ``topic``-0 at the broker on ``port`` (ListOffsets v7): its partition response."""
    request = codec.request_class(2, 7)
    topic_cls = schema.field_entity(request, "topics")
    asked = schema.build(topic_cls, name=topic, partitions=(
        schema.build_nested(topic_cls, "partitions", partition_index=0, current_leader_epoch=-1, timestamp=-1),))
    sent = schema.build(request, replica_id=-1, isolation_level=0, topics=(asked,))
    return request_once(port, sent, "s3-outages-test", timeout=60).topics[0].partitions[0]


def _fetch_error_at(port: int, topic: str, leader_epoch: int) -> ErrorCode:
    """The error of a Fetch v12 of ``topic``-0 at the broker on ``port`` with this current leader epoch."""
    request = codec.request_class(1, 12)
    topic_cls = schema.field_entity(request, "topics")
    asked = schema.build(topic_cls, topic=topic, partitions=(
        schema.build_nested(topic_cls, "partitions", partition=0, current_leader_epoch=leader_epoch, fetch_offset=0,
                            last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20),))
    sent = schema.build(request, replica_id=-1, max_wait=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                        session_id=0, session_epoch=-1, topics=(asked,), forgotten_topics_data=(), rack_id="")
    return ErrorCode(request_once(port, sent, "s3-outages-test").responses[0].partitions[0].error_code)


def _leader_and_epoch(port: int, topic: str) -> tuple[int, int]:
    request = codec.request_class(3, 12)
    asked = schema.build_nested(request, "topics", name=topic, topic_id=None)
    found = request_once(port, schema.build(request, topics=(asked,)), "s3-outages-test").topics[0].partitions
    return next((p.leader_id, p.leader_epoch) for p in found if p.partition_index == 0)


@pytest.mark.parametrize("faulty", ["s3"], indirect=True)  # a WAL failover replay is the S3 WAL's
def test_a_broker_killed_during_an_outage_fails_over_once_s3_answers(faulty: Cluster) -> None:
    """kill -9 while S3 is away: the controller fences the broker after its session, but its S3 WAL can be
    replayed only once S3 answers; then its partitions are led by live brokers and every record it acknowledged
    is served. It restarts on its emptied WAL and leads again."""

    def outage_then_kill(victim: int) -> None:
        faulty.proxy.outage(SESSION_TIMEOUT_S + 4, mode="refuse")
        faulty.cluster.node(victim).kill()

    _kill_a_broker_and_fail_over(faulty, outage_then_kill)


@pytest.mark.parametrize("faulty", ["s3"], indirect=True)
def test_an_outage_that_lands_in_a_wal_failover_replay_is_waited_out(faulty: Cluster) -> None:
    """kill -9, and S3 goes away at the replay's first read of the dead broker's WAL objects (the proxy starts
    the outage on that GET, so it lands inside the replay however long fencing and assignment take): the replay,
    its reservation already taken, waits S3 out and finishes; the partitions serve and nothing acknowledged is
    lost."""
    tracebacks_before = len(_tracebacks(faulty.cluster))

    def kill_then_outage_in_replay(victim: int) -> None:
        faulty.cluster.node(victim).kill()
        # Only a replay GETs a WAL's objects (their keys: wal/<namespace>/<node>/<epoch>/<start>-<end>); the
        # writer, now dead, only put them.
        faulty.proxy.outage_at(rf"^GET /[^/ ]+/wal/[^/ ]+/{victim}/\d{{20}}/", REPLAY_OUTAGE_S)
        began = faulty.proxy.outage_started.wait(SESSION_TIMEOUT_S + 30)
        assert began, f"no replay read broker {victim}'s WAL objects"
        replaying = [n for n in faulty.cluster.brokers if n.spec.node_id != victim
                     and f"replays the WAL of broker {victim}" in n.log_text(tail=2_000_000)]
        assert replaying, "the outage began outside a WAL failover replay"

    _kill_a_broker_and_fail_over(faulty, kill_then_outage_in_replay)
    new_tracebacks = _tracebacks(faulty.cluster)[tracebacks_before:]
    assert not new_tracebacks, f"{len(new_tracebacks)} tracebacks in the brokers' logs, e.g.\n{new_tracebacks[0]}"


def _kill_a_broker_and_fail_over(faulty: Cluster, kill_with_outage: Callable[[int], None]) -> None:
    """Kills the leader of partition 0 under an idempotent load (``kill_with_outage`` kills it and takes S3 away
    around that), then: once S3 answers, its partitions are led by live brokers within ``WRITABLE_AGAIN_S`` + 20
    s, its WAL failover is done, every partition takes writes, every acknowledged record is consumed; it restarts
    and is back in Metadata."""
    topic = _create_topic(faulty.bootstrap)
    placement = leaders(faulty.bootstrap, topic, PARTITIONS)
    victim = placement[0]
    led_by_victim = {p for p, leader in placement.items() if leader == victim}
    others = ",".join(b.spec.address for b in faulty.cluster.brokers if b.spec.node_id != victim)
    load = idempotent_load(others, topic)
    try:
        try:
            _wait(lambda: len(load.acked) >= 300, 30, "the load to get going")
            kill_with_outage(victim)
            _wait(lambda: not faulty.proxy.in_outage, 20, "the outage to end")

            def moved() -> bool:
                now = leaders(others, topic)
                return all(now.get(p, victim) not in (victim, -1) for p in led_by_victim)

            _wait(moved, WRITABLE_AGAIN_S + 20, f"partitions {sorted(led_by_victim)} led by a live broker")

            def failover_done() -> bool:
                rows = {r[0]: r for r in table_rows(shell_in_process(faulty.cluster).run("ls /failovers"))}
                row = rows.get(str(victim))
                return row is not None and row[5] == "done"

            _wait(failover_done, 60, f"the WAL failover of broker {victim}")
            took = _every_partition_writable(others, topic, timeout=60)
            assert took <= WRITABLE_AGAIN_S, f"every partition took writes again only {took:.1f}s after the failover"
            acked_after = len(load.acked)
            _wait(lambda: len(load.acked) >= acked_after + 100, 60, "the load to go on after the failover")
        finally:
            load.stop()
        assert not load.failed, f"{len(load.failed)} records failed, e.g. {load.failed[:3]}"
        assert_all_consumed(others, topic, PARTITIONS, load.acked, timeout=90)
    finally:
        if not faulty.cluster.node(victim).running:  # after a failure too: the module's cluster then stops cleanly
            faulty.cluster.node(victim).start()
    _wait(lambda: victim in live_brokers(faulty.bootstrap), 30, f"broker {victim} back in Metadata")


def _wait(check: Any, timeout: float, what: str) -> None:
    eventually(check, timeout=timeout, what=what)
