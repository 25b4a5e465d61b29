"""Transactions across the brokers of a cluster: a transaction whose partitions are led by different brokers, so
the coordinator writes its markers on other brokers (WriteTxnMarkers over the wire) and those brokers verify the
producer's first batches with the coordinator (AddPartitionsToTxn ``verify_only``, KIP-890 part 1)."""

from __future__ import annotations

from collections.abc import Callable

from cluster_support import SESSION_TIMEOUT_S, create_topic, leaders, read_committed, topic_name
from confluent_kafka import Producer

from broker.transactions.log_schema import partition_for
from node.local_cluster import LocalCluster
from tests.waiting import eventually

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

    seen = sorted(v.decode() for _, v in read_committed(bootstrap, topic, PARTITIONS))
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

    seen = sorted(v.decode() for _, v in read_committed(others, topic, PARTITIONS))
    assert seen == sorted([f"before-{i}" for i in range(PARTITIONS)] + [f"after-{i}" for i in range(PARTITIONS)])
