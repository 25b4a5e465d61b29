"""Transactions v2 and the features on a cluster: a Kafka 4.2 producer's Produce v12 to partitions led by brokers
other than its transaction coordinator (each asks the coordinator over the wire to add the partition:
AddPartitionsToTxn v5), EndTxn v5 bumping the epoch; and UpdateFeatures sent to a broker, which forwards it to the
controller quorum, changing ``transaction.version`` on every broker."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from node.local_cluster import LocalCluster
from testkit.node_process import WireClient, api_versions_request
from testkit.waiting import eventually
from tests.broker.test_transactions_v2 import batch, end_txn, init_producer_id, produce
from tests.cluster.cluster_support import leaders, topic_name
from tests.reading import read_to_end
from tests.topics import create_topic
from wire import codec, schema

PARTITIONS = 4
DEADLINE_S = 60.0


def _ports(bootstrap: str) -> dict[int, int]:
    host, port = bootstrap.split(",", maxsplit=1)[0].rsplit(":", 1)
    with WireClient(int(port), host=host) as client:
        brokers = client.request(schema.build(codec.request_class(3, 12), topics=())).brokers
    return {b.node_id: b.port for b in brokers}


def _coordinator(port: int, transactional_id: str) -> int:
    request = schema.build(codec.request_class(10, 4), key_type=1, coordinator_keys=(transactional_id,))
    with WireClient(port) as client:

        def found() -> Any:
            answer = client.request(request).coordinators[0]
            return answer if answer.error_code == ErrorCode.none else None

        return int(eventually(found, timeout=DEADLINE_S, what="the transaction coordinator").node_id)


def _transaction_version(port: int) -> int:
    with WireClient(port) as client:
        finalized = client.request(api_versions_request(4)).finalized_features
    return next((f.max_version_level for f in finalized if f.name == "transaction.version"), -1)


def test_produce_v12_adds_remote_partitions_and_features_are_forwarded(
    cluster_factory: Callable[..., LocalCluster]
) -> None:
    cluster = cluster_factory(controllers=1, brokers=2)
    bootstrap = cluster.bootstrap_servers
    topic, txn = topic_name("tv2-spread"), topic_name("tv2-tid")
    create_topic(bootstrap, topic, PARTITIONS)
    placement = eventually(lambda: leaders(bootstrap, topic, PARTITIONS),
                           until=lambda found: len(set(found.values())) == 2, timeout=DEADLINE_S,
                           what="partitions led by both brokers")
    ports = _ports(bootstrap)
    coordinator = _coordinator(ports[placement[0]], txn)
    clients = {node: WireClient(port) for node, port in ports.items()}
    try:
        pid, epoch = init_producer_id(clients[coordinator], txn)
        for partition, leader in placement.items():
            written = produce(clients[leader], 12, txn, topic, batch(pid, epoch, 0, f"c{partition}".encode()),
                              partition=partition)
            assert written.error_code == ErrorCode.none, (partition, leader, coordinator, written)
        ended = end_txn(clients[coordinator], 5, txn, (pid, epoch), True)
        assert (ended.error_code, ended.producer_epoch) == (ErrorCode.none, epoch + 1)
        seen = sorted(v.decode() for _, v in read_to_end(bootstrap, topic, PARTITIONS))
        assert seen == sorted(f"c{p}" for p in range(PARTITIONS))

        # UpdateFeatures to the broker that is not the coordinator: forwarded to the controller, seen everywhere.
        other = next(node for node in ports if node != coordinator)
        cls = codec.request_class(57, 2)
        downgrade = schema.build(cls, feature_updates=(schema.build_nested(
            cls, "feature_updates", feature="transaction.version", max_version_level=1, upgrade_type=2),))
        answer = clients[other].request(downgrade)
        assert (answer.error_code, answer.error_message) == (ErrorCode.none, None)
        # Every broker, and the controller (kafka-features.sh --bootstrap-controller describe asks it).
        for port in [*ports.values(), *(voter.spec.quorum_port for voter in cluster.controllers)]:
            eventually(lambda p=port: _transaction_version(p) == 1 or None, timeout=DEADLINE_S,
                       what="transaction.version 1 on every broker and controller")
    finally:
        for client in clients.values():
            client.close()
