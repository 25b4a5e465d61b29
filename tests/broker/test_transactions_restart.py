"""Transactional ids across time, each test on a broker process of its own: transactions left open across a restart
(resumed, fenced and replaced, or aborted by the coordinator on their time-out) and an idle transactional id that
expires and starts over.
"""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import Producer
from kio.schema.errors import ErrorCode

from testkit.node_process import WireClient, start_broker
from testkit.waiting import eventually
from tests.broker.kafka_clients import topic_name
from tests.broker.txn_wire import (
    DEADLINE_S,
    OVERRIDES,
    DescribedTopic,
    describe,
    find_transaction_coordinator,
    init_producer_id,
    list_transactions,
    transactional_producer,
    wait_state,
)
from tests.reading import read_to_end
from tests.topics import create_topic


def test_restart_mid_transaction(tmp_path: Path) -> None:
    """Three transactions open across a restart (same port, so producers reconnect): one its producer commits
    afterwards, one a new instance of its producer fences and replaces, one nobody comes back for, which the
    coordinator aborts on its time-out."""
    topic = topic_name("restart")
    ids = {name: topic_name(name) for name in ("resumed", "replaced", "stuck")}
    node = start_broker(tmp_path, OVERRIDES)
    port = node.port
    producers: dict[str, Producer] = {}
    try:
        create_topic(node.bootstrap, topic, partitions=3)
        for partition, (name, transactional_id) in enumerate(ids.items()):
            extra = {"transaction.timeout.ms": 4000, "message.timeout.ms": 4000} if name == "stuck" else {}
            producer = producers[name] = transactional_producer(node.bootstrap, transactional_id, **extra)
            producer.init_transactions(DEADLINE_S)
            producer.begin_transaction()
            producer.produce(topic, value=f"{name}-before".encode(), partition=partition)
            producer.flush(DEADLINE_S)
        assert node.stop() == 0, node.log_text()
    finally:
        node.kill()

    node = start_broker(tmp_path, {**OVERRIDES, "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:0"})
    try:
        with WireClient(node.port) as client:
            for transactional_id in ids.values():
                find_transaction_coordinator(client, transactional_id)
            loaded = describe(client, ids["resumed"])
            assert (loaded.transaction_state, loaded.topics) == ("Ongoing", (DescribedTopic(topic, (0,)),))
            # Nobody comes back for the stuck transaction: the coordinator aborts it when it times out.
            wait_state(client, ids["stuck"], "CompleteAbort")

        resumed = producers["resumed"]
        resumed.produce(topic, value=b"resumed-after", partition=0)
        resumed.commit_transaction(DEADLINE_S)
        successor = transactional_producer(node.bootstrap, ids["replaced"])
        successor.init_transactions(DEADLINE_S)  # aborts the replaced instance's transaction
        successor.begin_transaction()
        successor.produce(topic, value=b"replaced-after", partition=1)
        successor.commit_transaction(DEADLINE_S)

        seen = sorted(v for _, v in read_to_end(node.bootstrap, topic, 3))
        assert seen == [b"replaced-after", b"resumed-after", b"resumed-before"]
        assert node.stop() == 0, node.log_text()
    finally:
        node.kill()


def test_an_idle_transactional_id_expires(tmp_path: Path) -> None:
    node = start_broker(tmp_path, {**OVERRIDES, "transactional.id.expiration.ms": "3000"})
    try:
        transactional_id = topic_name("idle")
        with WireClient(node.port) as client:
            find_transaction_coordinator(client, transactional_id)
            first = init_producer_id(client, transactional_id)
            assert first.error_code == ErrorCode.none
            listed = eventually(
                lambda: list_transactions(client),
                until=lambda r: r.error_code == ErrorCode.none,  # not COORDINATOR_LOAD_IN_PROGRESS
                timeout=DEADLINE_S,
                what="every __transaction_state partition loaded",
            )
            assert [t.transactional_id for t in listed.transaction_states] == [transactional_id]
            eventually(
                lambda: describe(client, transactional_id).error_code,
                until=lambda code: code == ErrorCode.transactional_id_not_found,
                timeout=DEADLINE_S,
                what=f"{transactional_id!r} to expire",
            )
            assert list_transactions(client).transaction_states == ()
            # The id starts over: a new producer id at epoch 0.
            again = init_producer_id(client, transactional_id)
            assert (again.error_code, again.producer_epoch) == (ErrorCode.none, 0)
            assert again.producer_id != first.producer_id
        assert node.stop() == 0, node.log_text()
    finally:
        node.kill()
