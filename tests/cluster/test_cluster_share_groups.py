"""A share group's record states move with their partition (issue 22): a 1-controller, 3-broker cluster on the S3
WAL, confluent-kafka ShareConsumers, and the partition's leader changed under records in flight, (a) by a
reassignment (kafka-python's ``alter_partition_reassignments``, as ``kafka-reassign-partitions.sh`` sends it) and (b)
by killing the leader (-9), whose S3 WAL another broker replays.

Before each change a consumer accepts, rejects and releases three quarters of a batch and holds the rest, frozen
(:mod:`tests.broker.share_holder`), and records nobody has seen are produced after it. What a user must see after
the move: the group's other consumer, reading from the new leader, gets the released records as second deliveries,
the held records again and every record never delivered, each once, and never an accepted or rejected one. A
second share group reads the same partition (its state in the same share stream) in small batches through the
move, a batch of it in flight when its leader changes: every record reaches it, and none whose acknowledgement the
broker confirmed comes back. Then DescribeShareGroupOffsets, as ``kafka-share-groups.sh`` sends it, shows the first
group done with the partition on its new leader, and FindCoordinator's share key names that leader. The reassigned
partition then moves back to its first leader, which served the reading group's share session before, and the
group reads on from the state the other broker wrote.

One cluster for the module: the reassignment test leaves it whole, the failover test, last, kills a broker.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pytest
from confluent_kafka import ShareConsumer, TopicCollection
from confluent_kafka.admin import AdminClient
from kafka import TopicPartition as KafkaTopicPartition
from kafka.admin import KafkaAdminClient
from kio.schema.errors import ErrorCode

from node.local_cluster import LocalCluster
from testkit.node_process import WireClient
from tests.broker.cg_clients import unique
from tests.broker.share_clients import drain, set_group_config, share_consumer_factory
from tests.broker.share_holder import Held, LiveReader, holder, note_once
from tests.cluster.cluster_support import SESSION_TIMEOUT_S, leaders, produce, topic_name, wait_for
from tests.cluster.conftest import start_cluster
from tests.topics import create_topic
from wire import codec, schema

if TYPE_CHECKING:
    from tests.conftest import S3Server

FIRST, TOTAL, BACK = 60, 200, 100
MOVE_LIMIT_S = 30.0
FAILOVER_LIMIT_S = SESSION_TIMEOUT_S + 30
#: No upload on a timer: what the killed leader wrote (its share stream's acknowledgements too) is in its S3 WAL
#: only, so the survivors have it from replaying that WAL.
NO_UPLOADS = {"s3.wal.upload.interval.ms": "600000"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, s3_server: S3Server) -> Iterator[LocalCluster]:
    """One S3-WAL cluster for the module; its last test kills a broker, so teardown does not ask for a clean stop."""
    started = start_cluster(tmp_path_factory.mktemp("share-moves"), s3_server, controllers=1, brokers=3, wal="s3",
                            extra=NO_UPLOADS)
    try:
        yield started
    finally:
        started.stop_all(timeout=30)


@pytest.fixture
def bootstrap(cluster: LocalCluster) -> list[str]:
    """The bootstrap the test's consumers use: the test narrows it to the live brokers before it kills one."""
    return [cluster.bootstrap_servers]


@pytest.fixture
def share_consumer(bootstrap: list[str]) -> Iterator[Callable[..., ShareConsumer]]:
    yield from share_consumer_factory(lambda: bootstrap[-1])


def _in_flight(bootstrap: str) -> tuple[str, str, int]:
    """A one-partition topic, its share group reading from the earliest offset, and the partition's leader."""
    topic, group = topic_name("share-move"), unique("share-move-group")
    create_topic(bootstrap, topic, 1)
    source = leaders(bootstrap, topic, 1)[0]
    set_group_config(bootstrap, group, {"share.auto.offset.reset": "earliest"})
    _produce(bootstrap, topic, range(FIRST))
    return topic, group, source


def _produce(bootstrap: str, topic: str, values: range) -> None:
    # Batches of 10: a share consumer acquires whole batches, and the reading group reads 10 at a time.
    acked = produce(bootstrap, topic, [str(v) for v in values], batch_records=10)
    assert len(acked) == len(values), f"{len(values) - len(acked)} records not acknowledged by the producer"


def _live_reader(share_consumer: Callable[..., ShareConsumer], bootstrap: str, topic: str) -> LiveReader:
    group = unique("share-live-group")
    set_group_config(bootstrap, group, {"share.auto.offset.reset": "earliest"})
    reader = LiveReader(share_consumer(group, topic, **{"share.acknowledgement.mode": "explicit",
                                                        "max.poll.records": 10}))
    reader.read_until(TOTAL // 4, "the reading group's first records")
    reader.hold_a_batch()
    return reader


def _consume_after_move(consumer: ShareConsumer, held: Held) -> None:
    seen: dict[int, int] = {}
    expected = set(range(TOTAL)) - held.acknowledged
    drain([consumer], lambda: expected <= seen.keys(), lambda _, m: note_once(seen, m),
          "the held and the undelivered records from the new leader", timeout=60)
    consumer.poll(0.05)  # implicit mode: accepts what the last poll returned
    consumer.commit_sync(10)
    held.check_redelivered(seen, range(TOTAL))


def _described_offsets(cluster: LocalCluster, group: str, topic: str, exclude: int | None = None) -> tuple[int, int]:
    """(start offset, lag) of ``topic``-0 as DescribeShareGroupOffsets v1 answers (``kafka-share-groups.sh
    --describe``), asked of the group's coordinator, which reads the state on the partition's leader."""
    ports = [b.spec.port for b in cluster.brokers if b.spec.node_id != exclude]
    with WireClient(ports[0]) as client:
        find = schema.build(codec.request_class(10, 4), key_type=0, coordinator_keys=(group,))
        (found,) = client.request(find).coordinators
    assert found.error_code == ErrorCode.none, found
    group_cls = schema.field_entity(codec.request_class(90, 1), "groups")
    asked = schema.build(group_cls, group_id=group,
                         topics=(schema.build_nested(group_cls, "topics", topic_name=topic, partitions=(0,)),))
    with WireClient(cluster.node(int(found.node_id)).spec.port) as client:
        (described,) = client.request(schema.build(codec.request_class(90, 1), groups=(asked,))).groups
    assert described.error_code == ErrorCode.none, described
    ((partition,),) = [t.partitions for t in described.topics]
    assert partition.error_code == ErrorCode.none, partition
    return partition.start_offset, partition.lag


def _share_coordinator(cluster: LocalCluster, group: str, topic: str, exclude: int) -> int:
    """The broker FindCoordinator v6 names for the share key ``group:topicId:0`` (where the partition's share
    state is, asked as a broker of Kafka's asks for it)."""
    servers = ",".join(b.spec.address for b in cluster.brokers if b.spec.node_id != exclude)
    admin = AdminClient({"bootstrap.servers": servers})  # kept alive until the answer is in
    (future,) = admin.describe_topics(TopicCollection([topic])).values()
    key = f"{group}:{future.result(timeout=15).topic_id}:0"
    ports = [b.spec.port for b in cluster.brokers if b.spec.node_id != exclude]
    with WireClient(ports[0]) as client:
        find = schema.build(codec.request_class(10, 6), key_type=2, coordinator_keys=(key,))
        (found,) = client.request(find).coordinators
    assert found.error_code == ErrorCode.none, found
    return int(found.node_id)


def _check_described_done(cluster: LocalCluster, group: str, topic: str, exclude: int | None = None) -> None:
    """The operator sees the group done with the partition on its new leader: start offset at the end, no lag."""
    wait_for(f"{group}'s start offset on {topic}-0 at {TOTAL}, lag 0",
             lambda: _described_offsets(cluster, group, topic, exclude) == (TOTAL, 0), timeout=30)


def test_share_state_moves_with_a_reassigned_partition(
    cluster: LocalCluster, bootstrap: list[str], share_consumer: Callable[..., ShareConsumer]
) -> None:
    servers = cluster.bootstrap_servers
    topic, group, source = _in_flight(servers)
    target = next(b.spec.node_id for b in cluster.brokers if b.spec.node_id != source)
    with holder(servers, group, topic) as held:
        _produce(servers, topic, range(FIRST, TOTAL))
        reader = _live_reader(share_consumer, servers, topic)
        _reassign(servers, topic, target)
        reader.read_until(TOTAL, "the reading group's records after the move")
        _consume_after_move(share_consumer(group, topic), held)
    reader.check(range(TOTAL))
    _check_described_done(cluster, group, topic)
    # Back to the broker that led it first, which served the reading group's share session before: the group
    # reads on from the state the other broker wrote.
    _produce(servers, topic, range(TOTAL, TOTAL + BACK))
    reader.read_until(TOTAL + BACK // 2, "the reading group's records before the move back")
    reader.hold_a_batch()
    _reassign(servers, topic, source)
    reader.read_until(TOTAL + BACK, "the reading group's records after the move back")
    reader.check(range(TOTAL + BACK))


def _reassign(servers: str, topic: str, target: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=servers, request_timeout_ms=30000)
    try:
        tp = KafkaTopicPartition(topic, 0)
        assert admin.alter_partition_reassignments({tp: [target]}) == {tp: None}
        wait_for(f"{topic}-0 led by broker {target}", lambda: leaders(servers, topic).get(0) == target,
                 timeout=MOVE_LIMIT_S)
    finally:
        admin.close()


def test_share_state_survives_the_leaders_death_on_the_s3_wal(
    cluster: LocalCluster, bootstrap: list[str], share_consumer: Callable[..., ShareConsumer]
) -> None:
    servers = cluster.bootstrap_servers
    topic, group, victim = _in_flight(servers)
    with holder(servers, group, topic) as held:
        _produce(servers, topic, range(FIRST, TOTAL))
        reader = _live_reader(share_consumer, servers, topic)
        cluster.node(victim).kill()
        survivors = ",".join(b.spec.address for b in cluster.brokers if b.spec.node_id != victim)
        bootstrap.append(survivors)
        wait_for(f"{topic}-0 led by a live broker", lambda: leaders(survivors, topic).get(0) not in (None, -1, victim),
                 timeout=FAILOVER_LIMIT_S)
        assert _share_coordinator(cluster, group, topic, victim) == leaders(survivors, topic)[0]
        reader.read_until(TOTAL, "the reading group's records after the move")
        _consume_after_move(share_consumer(group, topic), held)
    reader.check(range(TOTAL))
    _check_described_done(cluster, group, topic, victim)
