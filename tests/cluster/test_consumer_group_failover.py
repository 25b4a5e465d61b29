"""A KIP-848 consumer group (``group.protocol=consumer``, confluent-kafka) across a coordinator failover in a
3-broker cluster on the S3 WAL: the broker coordinating the group is killed (-9) while three members consume
under produce load with manual synchronous commits.

What a user must see: another broker becomes the coordinator (the group's ``__consumer_offsets`` partition moves to
it), it rebuilds the group from the records the old coordinator wrote, and the members carry on with exactly the
partitions they had (no new group epoch, no revocation, so no reassignment storm); every acknowledged record is
consumed, and a record is consumed twice only if it was consumed but not yet committed when the coordinator died
(or by the members between which its partition moved while the group formed, which is counted apart).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition

from node.local_cluster import LocalCluster
from testkit.node_process import WireClient
from tests.cluster.cluster_support import SESSION_TIMEOUT_S, ProduceLoad, leaders, topic_name, wait_for
from tests.cluster.conftest import start_cluster
from tests.topics import create_topic
from wire import codec, schema
from wire.stored_schema import partition_for

if TYPE_CHECKING:
    from tests.conftest import S3Server

PARTITIONS = 6
MEMBERS = 3
OFFSETS_PARTITIONS = 10
#: Heartbeats every half second; a session long enough to outlive the broker's session time-out (how long the
#: controller takes to move the dead coordinator's partitions) plus the WAL replay and the group's reload.
GROUP_SETTINGS = {
    "group.consumer.heartbeat.interval.ms": "500",
    "group.consumer.min.heartbeat.interval.ms": "500",
    "group.consumer.session.timeout.ms": "20000",
    "group.consumer.min.session.timeout.ms": "6000",
    "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
}
FAILOVER_LIMIT_S = SESSION_TIMEOUT_S + 20


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, s3_server: S3Server) -> Iterator[LocalCluster]:
    """One S3-WAL cluster for the module; its tests kill brokers, so teardown does not ask for a clean stop."""
    started = start_cluster(tmp_path_factory.mktemp("cg-failover"), s3_server, wal="s3", extra=GROUP_SETTINGS)
    try:
        yield started
    finally:
        started.stop_all(timeout=30)


@dataclass(frozen=True)
class GroupView:
    """ConsumerGroupDescribe as the coordinator answers it: epochs and each member's partitions of one topic."""

    group_epoch: int
    assignment_epoch: int
    members: dict[str, tuple[int, frozenset[int]]]  # member id -> (member epoch, partitions)


def describe_group(port: int, group: str) -> GroupView:
    """ConsumerGroupDescribe v1 sent to the broker on ``port``; raises unless it answers for the group."""
    with WireClient(port) as client:
        request = schema.build(codec.request_class(69, 1), group_ids=(group,), include_authorized_operations=False)
        (described,) = client.request(request).groups
    assert described.error_code == 0, f"ConsumerGroupDescribe: {described.error_code} {described.error_message}"
    return GroupView(
        described.group_epoch,
        described.assignment_epoch,
        {
            m.member_id: (m.member_epoch, frozenset(p for t in m.assignment.topic_partitions for p in t.partitions))
            for m in described.members
        },
    )


def coordinator_of(ports: list[int], group: str) -> int:
    """The broker FindCoordinator (v4, as confluent-kafka 2.16 asks) names for ``group``, asked of the first of
    ``ports`` that answers; raises while the group has no coordinator."""
    for port in ports:
        try:
            client = WireClient(port, timeout=5)
        except OSError:
            continue
        with client:
            request = schema.build(codec.request_class(10, 4), key_type=0, coordinator_keys=(group,))
            (found,) = client.request(request).coordinators
        assert found.error_code == 0, f"FindCoordinator: {found.error_code} {found.error_message}"
        return int(found.node_id)
    raise AssertionError(f"no broker on {ports} answered")


@dataclass
class Member:
    """One confluent-kafka consumer of the group on its own thread: consumes, and commits what it consumed
    synchronously after every batch. Remembers every (partition, offset) it consumed, each assignment it had, what
    was consumed but not committed at any instant (under ``lock``), and what was so when it lost a partition
    (``released``: the next owner reads those records again, as at-least-once delivery allows)."""

    bootstrap: str
    group: str
    topic: str
    name: str
    consumed: list[tuple[int, int, str]] = field(default_factory=list)
    consumed_at: list[float] = field(default_factory=list)  # when each of ``consumed`` was read (monotonic)
    assignments: list[tuple[float, frozenset[int]]] = field(default_factory=list)
    committed: dict[int, int] = field(default_factory=dict)
    position: dict[int, int] = field(default_factory=dict)
    released: list[tuple[int, tuple[int, int]]] = field(default_factory=list)
    commit_errors: list[str] = field(default_factory=list)
    member_id: str | None = None
    last_commit_at: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Member:
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        consumer = Consumer({
            "bootstrap.servers": self.bootstrap, "group.id": self.group, "group.protocol": "consumer",
            "client.id": self.name, "enable.auto.commit": False, "auto.offset.reset": "earliest",
        })
        consumer.subscribe([self.topic])
        try:
            while not self._stop.is_set():
                messages = consumer.consume(200, 0.1)
                with self.lock:
                    for msg in messages:
                        partition, offset = msg.partition(), msg.offset()
                        if msg.error() is None and partition is not None and offset is not None:
                            self.consumed.append((partition, offset, (msg.value() or b"").decode()))
                            self.consumed_at.append(time.monotonic())
                            self.position[partition] = offset + 1
                # After the batch: a partition revoked during this call may have records in it.
                self._note_assignment(consumer)
                with self.lock:
                    owned = self.assignments[-1][1] if self.assignments else frozenset()
                    pending = {p: o for p, o in self.position.items() if p in owned and self.committed.get(p) != o}
                if pending:
                    self._commit(consumer, pending)
        finally:
            consumer.close()

    def _note_assignment(self, consumer: Consumer) -> None:
        owned = frozenset(tp.partition for tp in consumer.assignment() if tp.topic == self.topic)
        with self.lock:
            if not self.assignments or self.assignments[-1][1] != owned:
                lost = self.assignments[-1][1] - owned if self.assignments else frozenset()
                self.released += [(p, w) for p, w in self._uncommitted().items() if p in lost]
                self.assignments.append((time.monotonic(), owned))
        if self.member_id is None:
            self.member_id = consumer.memberid()

    def _commit(self, consumer: Consumer, pending: dict[int, int]) -> None:
        try:
            consumer.commit(offsets=[TopicPartition(self.topic, p, o) for p, o in pending.items()], asynchronous=False)
        except KafkaException as exc:
            # NOT_COORDINATOR and the like while the coordinator fails over: the next batch commits again.
            self.commit_errors.append(str(exc.args[0]))
            return
        with self.lock:
            self.committed.update(pending)
            self.last_commit_at = time.monotonic()

    def owned(self) -> frozenset[int]:
        with self.lock:
            return self.assignments[-1][1] if self.assignments else frozenset()

    def uncommitted(self) -> dict[int, tuple[int, int]]:
        """partition -> (committed offset, next offset to consume) where some consumed records are uncommitted."""
        with self.lock:
            return self._uncommitted()

    def _uncommitted(self) -> dict[int, tuple[int, int]]:
        return {p: (self.committed.get(p, 0), o) for p, o in self.position.items() if self.committed.get(p, 0) < o}

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
            assert not self._thread.is_alive(), f"{self.name} did not stop"


def _reads_of(members: list[Member], records: list[tuple[int, int]], killed_at: float) -> str:
    """Who read the first of ``records`` and when (seconds after the kill), each member's assignments and commit
    errors: what a failure needs to tell a re-read after a lost commit from one after a position reset."""
    if not records:
        return "no record outside the windows"
    first = min(records)
    reads = [
        (m.name, round(at - killed_at, 2))
        for m in members
        for (p, o, _), at in zip(m.consumed, m.consumed_at, strict=True)
        if (p, o) == first
    ]
    history = {m.name: [(round(at - killed_at, 2), sorted(s)) for at, s in m.assignments] for m in members}
    errors = {m.name: m.commit_errors[:3] for m in members}
    return f"{first} read by {reads}; assignments {history}; commit errors {errors}"


def _rereads_while_forming(members: list[Member], settled_at: float) -> Counter[tuple[int, int]]:
    """For each record, the reads of it that the group's forming explains: a member's first read of a record another
    member read before, of a partition the member was given before the group settled. A member's own second read is
    never one of them, so a commit lost at the failover still shows."""
    given: dict[tuple[str, int], float] = {}  # (member, partition) -> when it first got the partition
    for m in members:
        held: frozenset[int] = frozenset()
        for at, owned in m.assignments:
            if at > settled_at:
                break
            for partition in owned - held:
                given.setdefault((m.name, partition), at)
            held = owned
    readers: dict[tuple[int, int], list[str]] = {}
    rereads: Counter[tuple[int, int]] = Counter()
    timeline = sorted(
        (at, m.name, p, o) for m in members for (p, o, _), at in zip(m.consumed, m.consumed_at, strict=True)
    )
    for at, name, p, o in timeline:
        before = readers.setdefault((p, o), [])
        if before and name not in before and (name, p) in given and at >= given[(name, p)]:
            rereads[(p, o)] += 1
        before.append(name)
    return rereads


def _port_of(cluster: LocalCluster, node_id: int) -> int:
    return cluster.node(node_id).spec.port


def _ports_without(cluster: LocalCluster, node_id: int) -> list[int]:
    return [b.spec.port for b in cluster.brokers if b.spec.node_id != node_id]


def test_a_consumer_group_keeps_its_partitions_and_records_when_its_coordinator_is_killed(
    cluster: LocalCluster,
) -> None:
    bootstrap = cluster.bootstrap_servers
    topic = topic_name("cg-failover")
    group = f"cg-{uuid.uuid4().hex[:8]}"
    ports = [b.spec.port for b in cluster.brokers]
    create_topic(bootstrap, topic, PARTITIONS)
    leaders(bootstrap, topic, PARTITIONS)
    load = ProduceLoad(bootstrap, topic).start()
    members = [Member(bootstrap, group, topic, f"member-{i}").start() for i in range(MEMBERS)]
    try:
        # Every member owns a share and the group is stable at its target epoch.
        def settled() -> GroupView | None:
            coordinator = coordinator_of(ports, group)
            view = describe_group(_port_of(cluster, coordinator), group)
            owned = [m.owned() for m in members]
            complete = (
                len(view.members) == MEMBERS
                and all(epoch == view.assignment_epoch == view.group_epoch for epoch, _ in view.members.values())
                and sorted(p for s in owned for p in s) == list(range(PARTITIONS))
                and all(owned)
                and sorted(p for _, s in view.members.values() for p in s) == list(range(PARTITIONS))
            )
            return view if complete else None

        before: GroupView = wait_for("a stable group of three sharing the six partitions", settled, timeout=60)
        settled_at = time.monotonic()
        load.wait_acked(len(load.acked) + 300, timeout=30)
        wait_for("every member consuming", lambda: all(m.consumed for m in members), timeout=30)
        owned_before = {m.name: m.owned() for m in members}
        names = {m.member_id: m.name for m in members}
        described = {names.get(i): s for i, (_, s) in before.members.items()}
        assert described == owned_before, f"the coordinator says {described}, the clients {owned_before}"

        victim = coordinator_of(ports, group)
        offsets_partition = partition_for(group, OFFSETS_PARTITIONS)
        assert leaders(bootstrap, "__consumer_offsets")[offsets_partition] == victim
        uncommitted_at_kill = {m.name: m.uncommitted() for m in members}
        cluster.node(victim).kill()
        killed_at = time.monotonic()
        survivor_ports = _ports_without(cluster, victim)
        survivors = ",".join(f"127.0.0.1:{port}" for port in survivor_ports)

        # Another broker leads the group's __consumer_offsets partition and answers for the group, restored from
        # its records: same group epoch, same member epochs, same partitions.
        def restored() -> tuple[int, GroupView] | None:
            successor = leaders(survivors, "__consumer_offsets").get(offsets_partition, -1)
            if successor in (victim, -1) or coordinator_of(survivor_ports, group) != successor:
                return None
            return successor, describe_group(_port_of(cluster, successor), group)

        successor, after = wait_for("another broker coordinating the group", restored, timeout=FAILOVER_LIMIT_S)
        failover_s = time.monotonic() - killed_at
        assert successor != victim
        assert (after.group_epoch, after.assignment_epoch) == (before.group_epoch, before.assignment_epoch), (
            f"the group rebalanced over the failover: epochs {before} -> {after}"
        )
        assert after.members == before.members, f"members or their partitions changed: {before} -> {after}"

        # The members themselves never lost or gained a partition, and go on consuming under the new coordinator.
        load.wait_acked(len(load.acked) + 300, timeout=60)
        for m in members:
            changes = [(round(at - killed_at, 2), sorted(s)) for at, s in m.assignments if at >= killed_at]
            assert not changes, f"{m.name} had {sorted(owned_before[m.name])}, then {changes}"
            assert m.owned() == owned_before[m.name]
        wait_for("every member's commits accepted by the new coordinator",
                 lambda: all(m.last_commit_at > killed_at for m in members), timeout=30)
    finally:
        load.stop()
    assert not load.failed, load.failed[:5]

    # Every acknowledged record is consumed by the group; a (partition, offset) twice only if it was consumed and
    # not committed when the coordinator died, or when its consumer lost the partition while the group formed.
    def everything_consumed() -> bool:
        seen = {value for m in members for _, _, value in m.consumed}
        return load.acked <= seen

    try:
        wait_for(f"all {len(load.acked)} acknowledged records consumed", everything_consumed, timeout=60)
    finally:
        for m in members:
            m.stop()
    reads = Counter((p, o) for m in members for p, o, _ in m.consumed)
    # While the group forms, two members may read the same records: librdkafka 2.16, given all partitions at one
    # epoch and a smaller share at the next while it still hands the first to the application, finishes the stale
    # assignment and acknowledges it at the new epoch (the coordinator, as Kafka's, had already given the rest to
    # others on the member's report that it owned nothing yet). Seen in librdkafka's debug log in a fresh cluster,
    # where that heartbeat's answer took half a second. The subject here is the failover, so those reads count apart.
    forming = _rereads_while_forming(members, settled_at)
    duplicates = {po: n - forming[po] for po, n in reads.items() if n - forming[po] > 1}
    windows = [window for by_partition in uncommitted_at_kill.values() for window in by_partition.items()]
    windows += [window for m in members for window in m.released]
    bound = sum(end - start for _, (start, end) in windows)
    outside = [
        (p, o) for p, o in duplicates if not any(wp == p and start <= o < end for wp, (start, end) in windows)
    ]
    assert not outside and sum(n - 1 for n in duplicates.values()) <= bound, (
        f"{len(duplicates)} records consumed twice (bound {bound}: consumed but uncommitted at the kill or when a "
        f"member lost the partition), "
        f"{len(outside)} of them committed before it, e.g. {sorted(outside)[:5]}; "
        f"{_reads_of(members, outside, killed_at)}"
    )
    print(f"failover {failover_s:.1f} s, {len(reads)} records, {len(duplicates)} duplicates (bound {bound}), "
          f"{sum(forming.values())} re-read while the group formed")
