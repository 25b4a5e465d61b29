"""Transactions across the brokers of a cluster: a transaction whose partitions are led by different brokers, so
the coordinator writes its markers on other brokers (WriteTxnMarkers over the wire) and those brokers verify the
producer's first batches with the coordinator (AddPartitionsToTxn ``verify_only``, KIP-890 part 1)."""

from __future__ import annotations

from collections.abc import Callable

from confluent_kafka import IsolationLevel, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from kafka import KafkaAdminClient
from kafka import TopicPartition as KafkaTopicPartition

from broker.transactions.log_schema import partition_for
from node.local_cluster import LocalCluster
from testkit.waiting import eventually
from tests.cluster.cluster_support import SESSION_TIMEOUT_S, leaders, topic_name
from tests.reading import read_to_end
from tests.topics import create_topic

TRANSACTION_TOPIC = "__transaction_state"

PARTITIONS = 6
DEADLINE_S = 60.0


def test_a_transaction_over_partitions_of_several_brokers(cluster_factory: Callable[..., LocalCluster]) -> None:
    cluster = cluster_factory(controllers=1, brokers=2)
    bootstrap = cluster.bootstrap_servers
    topic = topic_name("spread-txn")
    create_topic(bootstrap, topic, PARTITIONS)
    placement = eventually(
        lambda: leaders(bootstrap, topic, PARTITIONS),
        until=lambda found: len(set(found.values())) == 2,
        timeout=DEADLINE_S,
        what="partitions led by both brokers",
    )
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": topic_name("tid"), "linger.ms": 5})
    producer.init_transactions(DEADLINE_S)
    producer.begin_transaction()
    for i in range(PARTITIONS * 2):
        producer.produce(topic, value=f"committed-{i}".encode(), partition=i % PARTITIONS)
    producer.commit_transaction(DEADLINE_S)
    producer.begin_transaction()
    for i in range(PARTITIONS):
        producer.produce(topic, value=f"aborted-{i}".encode(), partition=i)
    producer.flush(DEADLINE_S)
    producer.abort_transaction(DEADLINE_S)
    producer.begin_transaction()
    producer.produce(topic, value=b"committed-last", partition=PARTITIONS - 1)
    producer.commit_transaction(DEADLINE_S)

    seen = sorted(v.decode() for _, v in read_to_end(bootstrap, topic, PARTITIONS))
    expected = sorted([f"committed-{i}" for i in range(PARTITIONS * 2)] + ["committed-last"])
    assert seen == expected, f"placement {placement}"


def test_the_coordinator_stops_mid_transaction_and_its_successor_completes_it(
    cluster_factory: Callable[..., LocalCluster],
) -> None:
    cluster = cluster_factory(controllers=1, brokers=2)
    bootstrap = cluster.bootstrap_servers
    topic = topic_name("failover-txn")
    create_topic(bootstrap, topic, PARTITIONS)
    transactional_id = topic_name("tid")
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 5, "retries": 1000}
    )
    producer.init_transactions(DEADLINE_S)
    producer.begin_transaction()
    for i in range(PARTITIONS):
        producer.produce(topic, value=f"before-{i}".encode(), partition=i)
    producer.flush(DEADLINE_S)

    state_partitions = leaders(bootstrap, TRANSACTION_TOPIC)
    victim = state_partitions[partition_for(transactional_id, len(state_partitions))]
    assert cluster.node(victim).stop(timeout=30) == 0, cluster.logs(4000)
    survivor = next(b for b in cluster.brokers if b.spec.node_id != victim)
    others = survivor.spec.address
    eventually(
        lambda: leaders(others, topic, PARTITIONS),
        until=lambda found: victim not in found.values() and -1 not in found.values(),
        timeout=SESSION_TIMEOUT_S + DEADLINE_S,
        what=f"partitions of {topic} led by a broker other than {victim}",
    )
    for i in range(PARTITIONS):
        producer.produce(topic, value=f"after-{i}".encode(), partition=i)
    producer.commit_transaction(DEADLINE_S)

    seen = sorted(v.decode() for _, v in read_to_end(others, topic, PARTITIONS))
    assert seen == sorted([f"before-{i}" for i in range(PARTITIONS)] + [f"after-{i}" for i in range(PARTITIONS)])


def _stable_ends(bootstrap: str, topic: str) -> dict[int, tuple[int, int]]:
    """partition -> (last stable offset, log end offset), as ListOffsets reports them."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    ends: dict[IsolationLevel, dict[int, int]] = {}
    for isolation in (IsolationLevel.READ_COMMITTED, IsolationLevel.READ_UNCOMMITTED):
        asked = {TopicPartition(topic, p): OffsetSpec.latest() for p in range(PARTITIONS)}
        futures = admin.list_offsets(asked, isolation_level=isolation, request_timeout=10)
        ends[isolation] = {tp.partition: f.result(timeout=15).offset for tp, f in futures.items()}
    return {
        p: (ends[IsolationLevel.READ_COMMITTED][p], ends[IsolationLevel.READ_UNCOMMITTED][p]) for p in range(PARTITIONS)
    }


def test_partitions_moved_mid_transaction_keep_it_open_then_commit_or_abort_it(
    cluster_factory: Callable[..., LocalCluster],
) -> None:
    cluster = cluster_factory(controllers=1, brokers=2)
    bootstrap = cluster.bootstrap_servers
    brokers = sorted(b.spec.node_id for b in cluster.brokers)
    topic = topic_name("moved-txn")
    create_topic(bootstrap, topic, PARTITIONS)
    placement = leaders(bootstrap, topic, PARTITIONS)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": topic_name("tid"), "linger.ms": 5})
    producer.init_transactions(DEADLINE_S)

    def move_every_partition() -> None:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
        try:
            for partition in range(PARTITIONS):
                source = leaders(bootstrap, topic, PARTITIONS)[partition]
                target = brokers[(brokers.index(source) + 1) % len(brokers)]
                result = admin.alter_partition_reassignments({KafkaTopicPartition(topic, partition): [target]})
                assert result == {KafkaTopicPartition(topic, partition): None}, result
                eventually(
                    lambda p=partition, t=target: leaders(bootstrap, topic).get(p) == t,
                    timeout=DEADLINE_S,
                    what=f"{topic}-{partition} led by broker {target}",
                )
        finally:
            admin.close()

    # A transaction open across the moves: its records stay invisible (the new leaders know it is open) ...
    producer.begin_transaction()
    for i in range(PARTITIONS):
        producer.produce(topic, value=f"kept-{i}".encode(), partition=i)
    producer.flush(DEADLINE_S)
    move_every_partition()
    ends = _stable_ends(bootstrap, topic)
    assert all(stable < end for stable, end in ends.values()), f"an open transaction exposed after a move: {ends}"
    # ... and it goes on and commits on the new leaders.
    for i in range(PARTITIONS):
        producer.produce(topic, value=f"kept-late-{i}".encode(), partition=i)
    producer.commit_transaction(DEADLINE_S)

    # Another one moved back mid-transaction and aborted: none of it may appear.
    producer.begin_transaction()
    for i in range(PARTITIONS):
        producer.produce(topic, value=f"dropped-{i}".encode(), partition=i)
    producer.flush(DEADLINE_S)
    move_every_partition()
    producer.abort_transaction(DEADLINE_S)

    seen = sorted(v.decode() for _, v in read_to_end(bootstrap, topic, PARTITIONS))
    expected = sorted([f"kept-{i}" for i in range(PARTITIONS)] + [f"kept-late-{i}" for i in range(PARTITIONS)])
    assert seen == expected, f"first placement {placement}"
