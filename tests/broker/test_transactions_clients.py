"""The transaction coordinator against a real broker process: confluent-kafka transactional producers with a
read_committed consumer, fencing of a zombie producer, the coordinator's own time-out abort, wire-level errors that
change nothing (EndTxn for an unknown id, wrong epochs, requests in the wrong state) and KIP-890 part 1 (a
transactional produce to a partition not in the transaction is refused). One broker serves the module; a restart
in the middle of a transaction and an idle id's expiry, each on a broker of its own, are
``test_transactions_restart.py``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException
from kio.schema.errors import ErrorCode

from testkit.node_process import BrokerProcess, WireClient, start_broker
from testkit.waiting import eventually
from tests.broker.kafka_clients import topic_name
from tests.broker.txn_wire import (
    DEADLINE_S,
    OVERRIDES,
    add_partitions,
    add_partitions_request,
    add_partitions_result,
    describe,
    end_txn,
    find_transaction_coordinator,
    init_producer_id,
    list_transactions,
    log_end,
    produce_transactional,
    transactional_batch,
    transactional_produce_request,
    transactional_producer,
    verify_partitions,
    wait_state,
)
from tests.reading import read_to_end
from tests.topics import create_topic
from wire import codec


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = start_broker(tmp_path_factory.mktemp("txn"), OVERRIDES)
    try:
        yield process
    finally:
        assert process.stop() == 0, process.log_text()


# ------------------------------------------------------------------------------------------------ clients


def test_commit_is_read_exactly_once_and_abort_never(kafka: BrokerProcess) -> None:
    topic = topic_name("txn")
    create_topic(kafka.bootstrap, topic, partitions=3)
    producer = transactional_producer(kafka.bootstrap, topic_name("tid"))
    producer.init_transactions(DEADLINE_S)
    producer.begin_transaction()
    for i in range(9):
        producer.produce(topic, value=f"committed-{i}".encode(), partition=i % 3)
    producer.commit_transaction(DEADLINE_S)
    producer.begin_transaction()
    for i in range(9):
        producer.produce(topic, value=f"aborted-{i}".encode(), partition=i % 3)
    producer.flush(DEADLINE_S)
    producer.abort_transaction(DEADLINE_S)
    producer.begin_transaction()
    producer.produce(topic, value=b"committed-last", partition=1)
    producer.commit_transaction(DEADLINE_S)

    seen = read_to_end(kafka.bootstrap, topic, 3)
    values = sorted(v.decode() for _, v in seen)
    assert values == sorted([f"committed-{i}" for i in range(9)] + ["committed-last"])
    assert all(p == int(v.decode().rsplit("-", 1)[1]) % 3 for p, v in seen if v != b"committed-last")


def test_second_producer_with_the_same_id_fences_the_first(kafka: BrokerProcess) -> None:
    topic = topic_name("fence")
    create_topic(kafka.bootstrap, topic, partitions=2)
    transactional_id = topic_name("tid")
    zombie = transactional_producer(kafka.bootstrap, transactional_id)
    zombie.init_transactions(DEADLINE_S)
    zombie.begin_transaction()
    zombie.produce(topic, value=b"zombie", partition=0)
    zombie.flush(DEADLINE_S)

    successor = transactional_producer(kafka.bootstrap, transactional_id)
    successor.init_transactions(DEADLINE_S)  # aborts the zombie's open transaction first
    successor.begin_transaction()
    successor.produce(topic, value=b"successor", partition=1)
    successor.commit_transaction(DEADLINE_S)

    with pytest.raises(KafkaException) as refused:
        zombie.produce(topic, value=b"zombie-2", partition=0)
        zombie.commit_transaction(DEADLINE_S)
    error = refused.value.args[0]
    assert error.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH), error
    assert [v for _, v in read_to_end(kafka.bootstrap, topic, 2)] == [b"successor"]


def test_coordinator_aborts_a_timed_out_transaction_and_fences_its_producer(kafka: BrokerProcess) -> None:
    topic = topic_name("timeout")
    create_topic(kafka.bootstrap, topic, partitions=1)
    transactional_id = topic_name("tid")
    producer = transactional_producer(
        kafka.bootstrap, transactional_id, **{"transaction.timeout.ms": 4000, "message.timeout.ms": 4000}
    )
    producer.init_transactions(DEADLINE_S)
    producer.begin_transaction()
    producer.produce(topic, value=b"too-slow", partition=0)
    producer.flush(DEADLINE_S)
    with WireClient(kafka.port) as client:
        ongoing = describe(client, transactional_id)
        assert (ongoing.error_code, ongoing.transaction_state) == (ErrorCode.none, "Ongoing")
        assert [(t.topic, tuple(t.partitions)) for t in ongoing.topics] == [(topic, (0,))]
        listed = list_transactions(client, states=("Ongoing", "NoSuchState"), pids=(ongoing.producer_id,))
        assert [t.transactional_id for t in listed.transaction_states] == [transactional_id]
        assert tuple(listed.unknown_state_filters) == ("NoSuchState",)
        # v1: running longer than a minute, not yet; v2: by a pattern matching the whole id, or not.
        assert list_transactions(client, duration_ms=60_000).transaction_states == ()
        running = list_transactions(client, duration_ms=0).transaction_states
        assert transactional_id in [t.transactional_id for t in running]
        by_pattern = list_transactions(client, pattern=f"{transactional_id[:4]}.*")
        assert transactional_id in [t.transactional_id for t in by_pattern.transaction_states]
        assert list_transactions(client, pattern=transactional_id[:4]).transaction_states == ()
        bad = list_transactions(client, pattern="(?=look-ahead)")
        assert (bad.error_code, bad.transaction_states) == (ErrorCode.invalid_regular_expression, ())

        aborted = wait_state(client, transactional_id, "CompleteAbort")
        assert aborted.producer_epoch == ongoing.producer_epoch + 1
        assert not aborted.topics
        assert [t.transactional_id for t in list_transactions(client, states=("Ongoing",)).transaction_states] == []
    with pytest.raises(KafkaException):
        producer.commit_transaction(DEADLINE_S)
    assert read_to_end(kafka.bootstrap, topic, 1) == []


# ------------------------------------------------------------------------------------------------ wire


def test_bad_requests_get_clear_errors_and_change_nothing(kafka: BrokerProcess) -> None:
    topic = topic_name("wire")
    create_topic(kafka.bootstrap, topic, partitions=2)
    transactional_id = topic_name("tid")
    with WireClient(kafka.port) as client:
        coordinator = find_transaction_coordinator(client, transactional_id)
        assert (coordinator.node_id, coordinator.port) == (kafka.node_id, kafka.port)
        unknown = topic_name("unknown")
        find_transaction_coordinator(client, unknown)  # its partition is loaded (no COORDINATOR_LOAD_IN_PROGRESS)
        assert end_txn(client, unknown, 1, 0, commit=True) is ErrorCode.invalid_producer_id_mapping
        assert end_txn(client, "", 1, 0, commit=True) is ErrorCode.invalid_request
        assert init_producer_id(client, "x" * 40_000).error_code == ErrorCode.invalid_request  # too long to store
        too_long = init_producer_id(client, transactional_id, timeout_ms=10**9)
        assert too_long.error_code == ErrorCode.invalid_transaction_timeout

        first = init_producer_id(client, transactional_id)
        assert first.error_code == ErrorCode.none and first.producer_epoch == 0
        pid = first.producer_id
        before = describe(client, transactional_id)
        assert (before.transaction_state, before.producer_epoch, before.transaction_start_time_ms) == ("Empty", 0, -1)
        assert before.transaction_timeout_ms == 60_000

        assert end_txn(client, transactional_id, pid, 0, commit=True) is ErrorCode.invalid_txn_state
        assert end_txn(client, transactional_id, pid, 5, commit=False) is ErrorCode.producer_fenced
        assert end_txn(client, transactional_id, pid, 5, commit=False, version=1) is ErrorCode.invalid_producer_epoch
        assert end_txn(client, transactional_id, pid + 1, 0, commit=True) is ErrorCode.invalid_producer_id_mapping
        assert add_partitions(client, transactional_id, pid + 1, 0, [(topic, 0)]) == {
            (topic, 0): ErrorCode.invalid_producer_id_mapping
        }
        assert add_partitions(client, transactional_id, pid, 3, [(topic, 0)]) == {(topic, 0): ErrorCode.producer_fenced}
        assert add_partitions(client, transactional_id, pid, 0, [(topic, 0), ("no-such-topic", 0)]) == {
            (topic, 0): ErrorCode.operation_not_attempted,
            ("no-such-topic", 0): ErrorCode.unknown_topic_or_partition,
        }
        half = init_producer_id(client, transactional_id, pid=pid, epoch=-1)
        assert half.error_code == ErrorCode.invalid_request  # an id without an epoch (KIP-360 needs both)
        after = describe(client, transactional_id)
        assert (after.transaction_state, after.producer_id, after.producer_epoch) == ("Empty", pid, 0)
        assert not after.topics

        # KIP-360: the producer recovers with its current id and epoch and keeps its id with the next epoch.
        recovered = init_producer_id(client, transactional_id, pid=pid, epoch=0)
        assert (recovered.error_code, recovered.producer_id, recovered.producer_epoch) == (ErrorCode.none, pid, 1)
        stale = init_producer_id(client, transactional_id, pid=pid + 1, epoch=0)
        assert stale.error_code == ErrorCode.producer_fenced
        assert end_txn(client, transactional_id, pid, 0, commit=False) is ErrorCode.producer_fenced

        # A transaction over both partitions commits; a retried EndTxn succeeds, the other outcome is refused.
        assert add_partitions(client, transactional_id, pid, 1, [(topic, 0), (topic, 1)]) == {
            (topic, 0): ErrorCode.none,
            (topic, 1): ErrorCode.none,
        }
        assert verify_partitions(client, transactional_id, pid, 1, [(topic, 1)]) == {(topic, 1): ErrorCode.none}
        assert end_txn(client, transactional_id, pid, 1, commit=True) is ErrorCode.none
        wait_state(client, transactional_id, "CompleteCommit")
        assert end_txn(client, transactional_id, pid, 1, commit=True) is ErrorCode.none  # a retry
        assert end_txn(client, transactional_id, pid, 1, commit=False) is ErrorCode.invalid_txn_state

        missing = describe(client, unknown)
        assert missing.error_code == ErrorCode.transactional_id_not_found
        assert describe(client, "").error_code == ErrorCode.invalid_request  # as Kafka's coordinator answers


def test_transactional_produce_to_a_partition_not_in_the_transaction_is_refused(kafka: BrokerProcess) -> None:
    topic = topic_name("kip890")
    create_topic(kafka.bootstrap, topic, partitions=2)
    transactional_id = topic_name("tid")
    with WireClient(kafka.port) as client:
        find_transaction_coordinator(client, transactional_id)
        init = init_producer_id(client, transactional_id)
        pid, epoch = init.producer_id, init.producer_epoch
        assert add_partitions(client, transactional_id, pid, epoch, [(topic, 0)]) == {(topic, 0): ErrorCode.none}
        assert verify_partitions(client, transactional_id, pid, epoch, [(topic, 0), (topic, 1)]) == {
            (topic, 0): ErrorCode.none,
            (topic, 1): ErrorCode.invalid_txn_state,
        }
        # a partition that does not exist is answered before the transaction is looked at, as Kafka's KafkaApis does
        assert verify_partitions(client, transactional_id, pid, epoch, [(topic, 0), (topic, 7)]) == {
            (topic, 0): ErrorCode.operation_not_attempted,
            (topic, 7): ErrorCode.unknown_topic_or_partition,
        }

        refused = produce_transactional(client, transactional_id, topic, 1, transactional_batch(pid, epoch))
        assert refused.error_code == ErrorCode.invalid_txn_state
        assert log_end(client, topic, 1) == 0
        accepted = produce_transactional(client, transactional_id, topic, 0, transactional_batch(pid, epoch))
        assert accepted.error_code == ErrorCode.none
        assert log_end(client, topic, 0) == 1

        assert end_txn(client, transactional_id, pid, epoch, commit=False) is ErrorCode.none
        wait_state(client, transactional_id, "CompleteAbort")
        assert eventually(
            lambda: log_end(client, topic, 0),
            until=lambda end: end == 2,
            timeout=DEADLINE_S,
            what="the ABORT marker on partition 0",
        )
        # After the abort the partition is no longer in a transaction: a stray batch is refused again.
        late = produce_transactional(client, transactional_id, topic, 0, transactional_batch(pid, epoch, b"late"))
        assert late.error_code == ErrorCode.invalid_txn_state
        assert log_end(client, topic, 0) == 2 and log_end(client, topic, 1) == 0


def test_a_produce_to_an_added_partition_is_not_refused_while_the_next_add_is_written(kafka: BrokerProcess) -> None:
    """A client produces to the partitions already added while it adds more (librdkafka adds each partition as its
    first record is queued). As Kafka's coordinator, the verification answers from the partitions already durable
    and does not refuse while the next AddPartitionsToTxn is written: a refusal costs the client a retry, and one
    that arrives as it starts an abort leaves its batch queued and unsent until the abort times out (librdkafka
    sends nothing while it aborts). Each produce below is pipelined behind the next add on one connection, so its
    verification runs while that add is pending."""
    partitions = 6
    topic = topic_name("add-while-produce")
    create_topic(kafka.bootstrap, topic, partitions=partitions)
    transactional_id = topic_name("tid")
    with WireClient(kafka.port) as client:
        find_transaction_coordinator(client, transactional_id)
        init = init_producer_id(client, transactional_id)
        pid, epoch = init.producer_id, init.producer_epoch
        assert add_partitions(client, transactional_id, pid, epoch, [(topic, 0)]) == {(topic, 0): ErrorCode.none}
        produced = []
        for partition in range(partitions - 1):
            add = add_partitions_request(transactional_id, pid, epoch, [(topic, partition + 1)])
            produce = transactional_produce_request(transactional_id, topic, partition, transactional_batch(pid, epoch))
            # One write, so that the broker reads (and dispatches) both requests at once, the add first.
            client.send_raw(codec.encode_request(add, 2 * partition + 1, "t") +
                            codec.encode_request(produce, 2 * partition + 2, "t"))
            _, added = client.receive(24, 3)
            assert add_partitions_result(added) == {(topic, partition + 1): ErrorCode.none}
            _, response = client.receive(0, type(produce).__version__)
            produced.append(ErrorCode(response.responses[0].partition_responses[0].error_code))
        assert produced == [ErrorCode.none] * (partitions - 1)
        assert end_txn(client, transactional_id, pid, epoch, commit=True) is ErrorCode.none
        wait_state(client, transactional_id, "CompleteCommit")
        # Each partition that got a record: the record and its COMMIT marker.
        assert [log_end(client, topic, p) for p in range(partitions - 1)] == [2] * (partitions - 1)


def test_the_next_transaction_is_not_refused_while_the_last_ones_markers_are_written(kafka: BrokerProcess) -> None:
    """EndTxn is answered once PrepareCommit is durable, so a producer's next AddPartitionsToTxn arrives while the
    markers are written. The coordinator lets it wait for them rather than answer CONCURRENT_TRANSACTIONS, which
    would cost the client a retry back-off on every commit."""
    partitions = 8
    topic = topic_name("next-txn")
    create_topic(kafka.bootstrap, topic, partitions=partitions)
    transactional_id = topic_name("tid")
    targets = [(topic, p) for p in range(partitions)]
    with WireClient(kafka.port) as client:
        find_transaction_coordinator(client, transactional_id)
        init = init_producer_id(client, transactional_id)
        pid, epoch = init.producer_id, init.producer_epoch
        for sequence in range(5):
            added = add_partitions(client, transactional_id, pid, epoch, targets)
            assert added == dict.fromkeys(targets, ErrorCode.none), f"transaction {sequence + 1}"
            for _, partition in targets:
                batch = transactional_batch(pid, epoch, base_sequence=sequence)
                assert produce_transactional(client, transactional_id, topic, partition, batch).error_code == 0
            assert end_txn(client, transactional_id, pid, epoch, commit=True) is ErrorCode.none
        wait_state(client, transactional_id, "CompleteCommit")
        # Each partition: 5 records and 5 COMMIT markers.
        assert [log_end(client, topic, p) for p in range(partitions)] == [10] * partitions
