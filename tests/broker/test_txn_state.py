"""The transaction coordinator's sans-I/O parts: the state machine of a transactional id (Kafka's
TransactionMetadata and the request checks of its TransactionCoordinator) and the ``__transaction_state`` record
format, byte for byte as Kafka writes it."""

from __future__ import annotations

import dataclasses
import struct

import pytest
from kio.schema.errors import ErrorCode

from broker.transactions.log_schema import (
    SchemaError,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    partition_for,
    value_version,
)
from broker.transactions.state import (
    MAX_EPOCH,
    NO_PRODUCER_EPOCH,
    InvalidTransition,
    TransactionMetadata,
    TxnState,
    TxnTransit,
)

NOW = 1_700_000_000_000
TIMEOUT = 60_000
TP_A = ("orders", 0)
TP_B = ("orders", 1)


def new_id(pid: int = 1000) -> TransactionMetadata:
    return TransactionMetadata.new("tx", pid, TIMEOUT, NOW)


def apply(md: TransactionMetadata, result: TxnTransit | ErrorCode) -> TxnTransit:
    """Completes a prepared transit as the coordinator does once it is durable."""
    assert isinstance(result, TxnTransit), result
    md.complete_transition(result)
    return result


def initialized(pid: int = 1000) -> TransactionMetadata:
    md = new_id(pid)
    apply(md, md.init_producer_id(TIMEOUT, None, NOW, None))
    return md


def ongoing(partitions: tuple[tuple[str, int], ...] = (TP_A, TP_B)) -> TransactionMetadata:
    md = initialized()
    apply(md, md.add_partitions(md.producer_id, md.producer_epoch, partitions, NOW + 10))
    return md


# ------------------------------------------------------------------------------------------------ InitProducerId


def test_first_init_gives_epoch_zero_and_later_inits_bump_it() -> None:
    md = initialized()
    assert (md.producer_id, md.producer_epoch, md.state) == (1000, 0, TxnState.EMPTY)
    apply(md, md.init_producer_id(TIMEOUT, None, NOW, None))
    assert (md.producer_id, md.producer_epoch, md.last_producer_epoch) == (1000, 1, NO_PRODUCER_EPOCH)


def test_init_while_a_write_is_pending_is_concurrent() -> None:
    md = initialized()
    md.add_partitions(md.producer_id, md.producer_epoch, [TP_A], NOW)  # prepared, not yet durable
    assert md.init_producer_id(TIMEOUT, None, NOW, None) is ErrorCode.concurrent_transactions


def test_init_during_an_ongoing_transaction_fences_with_a_bumped_epoch_and_aborts() -> None:
    md = ongoing()
    fence = md.init_producer_id(TIMEOUT, None, NOW, None)
    assert isinstance(fence, TxnTransit)
    assert fence.state is TxnState.PREPARE_EPOCH_FENCE and fence.producer_epoch == 1
    # The old producer is fenced from now on: its EndTxn fails, and nothing but the abort may proceed.
    abort = md.end_transaction(md.producer_id, fence.producer_epoch, False, NOW, from_client=False)
    assert isinstance(abort, TxnTransit)
    assert abort.state is TxnState.PREPARE_ABORT and abort.producer_epoch == 1
    assert abort.partitions == {TP_A, TP_B}
    md.complete_transition(abort)
    assert md.end_transaction(md.producer_id, 0, True, NOW) is ErrorCode.producer_fenced
    # A retry of InitProducerId while the markers are written is told to back off, then gets epoch 2.
    assert md.init_producer_id(TIMEOUT, None, NOW, None) is ErrorCode.concurrent_transactions
    apply(md, md.prepare_complete(NOW))
    assert md.state is TxnState.COMPLETE_ABORT and not md.partitions
    apply(md, md.init_producer_id(TIMEOUT, None, NOW, None))
    assert md.producer_epoch == 2


def test_a_failed_fence_write_reuses_the_bumped_epoch() -> None:
    md = ongoing()
    fence = md.prepare_fence_epoch()
    abort = md.end_transaction(md.producer_id, fence.producer_epoch, False, NOW, from_client=False)
    assert isinstance(abort, TxnTransit)
    md.abandon_transition()  # the PrepareAbort write failed
    assert md.state is TxnState.ONGOING and md.producer_epoch == 1
    again = md.prepare_fence_epoch()
    assert again.producer_epoch == 1


def test_kip360_recovery_bumps_the_current_epoch_and_answers_a_retry_with_the_same_epoch() -> None:
    md = initialized()
    apply(md, md.init_producer_id(TIMEOUT, (1000, 0), NOW, None))
    assert (md.producer_epoch, md.last_producer_epoch) == (1, 0)
    # The answer was lost; the producer retries with the epoch it had: the same epoch again, no second bump.
    apply(md, md.init_producer_id(TIMEOUT, (1000, 0), NOW, None))
    assert md.producer_epoch == 1


def test_kip360_recovery_with_a_stale_epoch_or_foreign_producer_id_is_fenced() -> None:
    md = initialized()
    apply(md, md.init_producer_id(TIMEOUT, None, NOW, None))
    apply(md, md.init_producer_id(TIMEOUT, None, NOW, None))  # epoch 2, last epoch unknown (a new producer)
    assert md.init_producer_id(TIMEOUT, (1000, 0), NOW, None) is ErrorCode.producer_fenced
    assert md.init_producer_id(TIMEOUT, (4242, 2), NOW, None) is ErrorCode.producer_fenced
    assert md.producer_epoch == 2 and not md.pending


def test_an_exhausted_epoch_rotates_to_a_new_producer_id() -> None:
    md = initialized()
    md.producer_epoch = MAX_EPOCH - 1
    assert md.needs_new_producer_id(None)
    with pytest.raises(InvalidTransition):
        md.init_producer_id(TIMEOUT, None, NOW, None)
    # A KIP-360 recovery with the exhausted epoch: a new producer id at epoch 0, remembering the old epoch.
    apply(md, md.init_producer_id(TIMEOUT, (1000, MAX_EPOCH - 1), NOW, 2000))
    assert (md.producer_id, md.last_producer_id, md.producer_epoch) == (2000, 1000, 0)
    # Its retry (the answer was lost) is recognised by the last producer id and gets the same id and epoch.
    apply(md, md.init_producer_id(TIMEOUT, (1000, MAX_EPOCH - 1), NOW, None))
    assert (md.producer_id, md.producer_epoch) == (2000, 0)
    # Without an expected epoch (a new producer instance) the rotation forgets the old epoch.
    fresh = initialized()
    fresh.producer_epoch = MAX_EPOCH - 1
    apply(fresh, fresh.init_producer_id(TIMEOUT, None, NOW, 3000))
    assert (fresh.producer_id, fresh.producer_epoch, fresh.last_producer_epoch) == (3000, 0, NO_PRODUCER_EPOCH)


def test_init_while_markers_are_written_is_concurrent() -> None:
    md = ongoing()
    apply(md, md.end_transaction(md.producer_id, md.producer_epoch, True, NOW))
    assert md.state is TxnState.PREPARE_COMMIT
    assert md.init_producer_id(TIMEOUT, None, NOW, None) is ErrorCode.concurrent_transactions


# ------------------------------------------------------------------------------------------------ AddPartitionsToTxn


def test_add_partitions_starts_the_transaction_and_an_already_added_partition_needs_no_write() -> None:
    md = initialized()
    transit = apply(md, md.add_partitions(md.producer_id, 0, [TP_A], NOW + 5))
    assert transit.state is TxnState.ONGOING and transit.txn_start_ms == NOW + 5
    assert md.add_partitions(md.producer_id, 0, [TP_A], NOW + 6) is ErrorCode.none
    apply(md, md.add_partitions(md.producer_id, 0, [TP_B], NOW + 7))
    assert md.partitions == {TP_A, TP_B} and md.txn_start_ms == NOW + 5


@pytest.mark.parametrize(
    ("pid", "epoch", "error"),
    [(999, 0, ErrorCode.invalid_producer_id_mapping), (1000, 1, ErrorCode.producer_fenced)],
)
def test_add_partitions_with_a_wrong_producer(pid: int, epoch: int, error: ErrorCode) -> None:
    md = initialized()
    assert md.add_partitions(pid, epoch, [TP_A], NOW) is error
    assert md.state is TxnState.EMPTY and not md.pending


def test_add_partitions_while_ending_is_concurrent() -> None:
    md = ongoing()
    apply(md, md.end_transaction(md.producer_id, 0, False, NOW))
    assert md.add_partitions(md.producer_id, 0, [("other", 0)], NOW) is ErrorCode.concurrent_transactions
    assert md.partitions == {TP_A, TP_B}


def test_verify_only_reports_membership_without_changing_anything() -> None:
    md = ongoing((TP_A,))
    assert md.verify_partitions(md.producer_id, 0, [TP_A, TP_B]) == {
        TP_A: ErrorCode.none,
        TP_B: ErrorCode.invalid_txn_state,
    }
    assert md.verify_partitions(md.producer_id, 1, [TP_A]) == {TP_A: ErrorCode.producer_fenced}
    assert md.verify_partitions(7, 0, [TP_A]) == {TP_A: ErrorCode.invalid_producer_id_mapping}
    assert not md.pending and md.partitions == {TP_A}
    idle = initialized()
    assert idle.verify_partitions(idle.producer_id, 0, [TP_A]) == {TP_A: ErrorCode.invalid_txn_state}


def test_verify_only_answers_from_the_durable_partitions_while_an_add_is_written() -> None:
    """As Kafka's coordinator: a pending AddPartitionsToTxn does not make a verification busy (the client produces
    to the partitions it added while it adds more); a pending end of the transaction does."""
    md = ongoing((TP_A,))
    assert isinstance(md.add_partitions(md.producer_id, 0, [TP_B], NOW), TxnTransit)
    assert md.verify_partitions(md.producer_id, 0, [TP_A, TP_B]) == {
        TP_A: ErrorCode.none,
        TP_B: ErrorCode.invalid_txn_state,  # not in the transaction until its add is durable
    }
    ending = ongoing((TP_A,))
    assert isinstance(ending.end_transaction(ending.producer_id, 0, False, NOW), TxnTransit)
    assert ending.verify_partitions(ending.producer_id, 0, [TP_A]) == {TP_A: ErrorCode.concurrent_transactions}


# ------------------------------------------------------------------------------------------------ EndTxn


def test_commit_goes_through_prepare_and_complete() -> None:
    md = ongoing()
    prepare = apply(md, md.end_transaction(md.producer_id, 0, True, NOW + 20))
    assert prepare.state is TxnState.PREPARE_COMMIT and prepare.partitions == {TP_A, TP_B}
    # A retried EndTxn while the markers are written: back off; once complete: success without a write.
    assert md.end_transaction(md.producer_id, 0, True, NOW) is ErrorCode.concurrent_transactions
    complete = apply(md, md.prepare_complete(NOW + 30))
    assert complete.state is TxnState.COMPLETE_COMMIT and not complete.partitions
    assert complete.txn_start_ms == prepare.txn_start_ms
    assert md.end_transaction(md.producer_id, 0, True, NOW) is ErrorCode.none
    assert md.end_transaction(md.producer_id, 0, False, NOW) is ErrorCode.invalid_txn_state


@pytest.mark.parametrize(
    ("setup", "pid", "epoch", "commit", "error"),
    [
        ("empty", 1000, 0, True, ErrorCode.invalid_txn_state),
        ("empty", 1000, 0, False, ErrorCode.invalid_txn_state),
        ("ongoing", 5, 0, True, ErrorCode.invalid_producer_id_mapping),
        ("ongoing", 1000, 1, True, ErrorCode.producer_fenced),
        ("ongoing", 1000, -1, True, ErrorCode.producer_fenced),
        ("prepare_commit", 1000, 0, False, ErrorCode.invalid_txn_state),
        ("prepare_abort", 1000, 0, True, ErrorCode.invalid_txn_state),
        ("prepare_abort", 1000, 0, False, ErrorCode.concurrent_transactions),
        ("complete_abort", 1000, 0, True, ErrorCode.invalid_txn_state),
        ("complete_abort", 1000, 0, False, ErrorCode.none),
    ],
)
def test_end_txn_errors(setup: str, pid: int, epoch: int, commit: bool, error: ErrorCode) -> None:
    md = initialized() if setup == "empty" else ongoing()
    if setup in ("prepare_commit", "prepare_abort", "complete_abort"):
        apply(md, md.end_transaction(1000, 0, setup == "prepare_commit", NOW))
    if setup == "complete_abort":
        apply(md, md.prepare_complete(NOW))
    before = md.snapshot()
    assert md.end_transaction(pid, epoch, commit, NOW) is error
    assert md.snapshot() == before and not md.pending


def test_only_the_valid_transitions_can_be_prepared() -> None:
    md = initialized()
    with pytest.raises(InvalidTransition):
        md.prepare_end(TxnState.PREPARE_COMMIT, NOW)  # Empty -> PrepareCommit
    md = ongoing()
    with pytest.raises(InvalidTransition):
        md.prepare_dead(NOW)  # Ongoing -> Dead
    md.add_partitions(1000, 0, [("x", 0)], NOW)
    with pytest.raises(InvalidTransition):
        md.prepare_end(TxnState.PREPARE_ABORT, NOW)  # a second transit while one is pending


# ------------------------------------------------------------------------------------------------ transactions v2


def test_v2_every_end_bumps_the_epoch_and_a_retry_is_told_apart_from_the_next_end() -> None:
    md = ongoing()
    prepare = apply(md, md.end_transaction_v2(1000, 0, True, NOW + 20, None))
    assert (prepare.state, prepare.producer_epoch, prepare.last_producer_epoch) == (TxnState.PREPARE_COMMIT, 1, 0)
    assert md.ended_as_v2
    # The client's retry (at the epoch it ended with) while the markers are written: back off.
    assert md.end_transaction_v2(1000, 0, True, NOW, None) is ErrorCode.concurrent_transactions
    assert md.end_transaction_v2(1000, 1, True, NOW, None) is ErrorCode.producer_fenced
    apply(md, md.prepare_complete(NOW + 30))
    assert (md.state, md.producer_epoch) == (TxnState.COMPLETE_COMMIT, 1)
    assert md.end_transaction_v2(1000, 0, True, NOW, None) is ErrorCode.none  # retry: done, nothing written
    assert md.end_transaction_v2(1000, 0, False, NOW, None) is ErrorCode.invalid_txn_state
    assert md.end_transaction_v2(1000, 1, True, NOW, None) is ErrorCode.invalid_txn_state  # nothing to commit
    # An abort at the current epoch with nothing added still bumps it (Kafka's table for Complete*/Empty).
    abort = apply(md, md.end_transaction_v2(1000, 1, False, NOW + 40, None))
    assert (abort.state, abort.producer_epoch, abort.partitions) == (TxnState.PREPARE_ABORT, 2, frozenset())
    assert md.end_transaction_v2(7, 2, False, NOW, None) is ErrorCode.invalid_producer_id_mapping


def test_v2_end_at_an_exhausted_epoch_continues_as_the_next_producer_id() -> None:
    md = ongoing()
    md.producer_epoch = MAX_EPOCH - 1
    assert md.needs_new_producer_id_on_end()
    with pytest.raises(InvalidTransition):
        md.end_transaction_v2(1000, MAX_EPOCH - 1, True, NOW, None)
    prepare = apply(md, md.end_transaction_v2(1000, MAX_EPOCH - 1, True, NOW, 2000))
    # The markers go out as the old id at the last epoch; the client continues as the next id at epoch 0.
    assert (prepare.producer_id, prepare.producer_epoch, prepare.next_producer_id) == (1000, MAX_EPOCH, 2000)
    apply(md, md.prepare_complete(NOW + 10))
    assert (md.producer_id, md.producer_epoch, md.last_producer_id) == (2000, 0, 1000)
    # The client's retry of that end (the old id at its last epoch) is answered as done.
    assert md.end_transaction_v2(1000, MAX_EPOCH - 1, True, NOW, None) is ErrorCode.none
    assert md.add_partitions(2000, 0, [TP_A], NOW) is not ErrorCode.producer_fenced


def test_the_next_producer_id_is_told_to_retry_while_the_exhausting_ends_markers_are_written() -> None:
    """As Kafka's coordinator, which answers a pending transition before it looks at the producer: the producer
    speaks as the next id (2000) from the end's answer on, and while the markers of that end are written its
    transaction's first AddPartitionsToTxn, or its KIP-360 InitProducerId, is asked to retry, never refused as
    an unknown producer (INVALID_PRODUCER_ID_MAPPING is fatal to a Java client) or fenced."""
    md = ongoing()
    md.producer_epoch = MAX_EPOCH - 1
    apply(md, md.end_transaction_v2(1000, MAX_EPOCH - 1, True, NOW, 2000))
    assert md.state is TxnState.PREPARE_COMMIT and md.producer_id == 1000
    assert md.add_partitions(2000, 0, [TP_A], NOW) is ErrorCode.concurrent_transactions
    assert md.init_producer_id(TIMEOUT, (2000, 0), NOW, None) is ErrorCode.concurrent_transactions
    apply(md, md.prepare_complete(NOW + 10))
    assert apply(md, md.add_partitions(2000, 0, [TP_A], NOW + 20)).state is TxnState.ONGOING


def test_a_v2_transaction_is_written_as_kafkas_value_v1_with_its_tagged_fields() -> None:
    md = ongoing()
    md.producer_epoch = MAX_EPOCH - 1
    prepare = md.end_transaction_v2(1000, MAX_EPOCH - 1, True, NOW, 2000)
    assert isinstance(prepare, TxnTransit) and value_version(prepare) == 1
    data = encode_value(prepare, 1)
    # Kafka's tagged fields after the start timestamp: 3 fields, PreviousProducerId (0), NextProducerId (1) and
    # ClientTransactionVersion (2), each tag, size, value.
    assert data.endswith(bytes([3, 0, 8]) + struct.pack(">q", 1000) + bytes([1, 8]) + struct.pack(">q", 2000)
                         + bytes([2, 2]) + struct.pack(">h", 2))
    assert decode_value(data) == dataclasses.replace(prepare, last_producer_epoch=NO_PRODUCER_EPOCH)  # not kept
    # A coordinator that loads it continues where this one was: markers as v2, then the next producer id.
    restored = TransactionMetadata.restore("tx", decode_value(data))
    assert restored.ended_as_v2 and restored.next_producer_id == 2000
    assert value_version(ongoing().snapshot()) == 0  # a v1 client's transaction stays version 0


# ------------------------------------------------------------------------------------------------ timers


def test_time_out_and_expiry() -> None:
    md = ongoing()
    assert not md.timed_out(md.txn_start_ms + TIMEOUT)
    assert md.timed_out(md.txn_start_ms + TIMEOUT + 1)
    assert not md.expired(NOW + 10**9, 1000)  # an ongoing transaction never expires
    idle = initialized()
    assert idle.expired(NOW + 1000, 1000) and not idle.expired(NOW + 999, 1000)
    dead = apply(idle, idle.prepare_dead(NOW + 1000))
    assert dead.state is TxnState.DEAD


# ------------------------------------------------------------------------------------------------ log format


def test_key_is_kafkas_transaction_log_key_v0() -> None:
    assert encode_key("my-txn") == b"\x00\x00\x00\x06my-txn"
    assert decode_key(encode_key("ü-id")) == "ü-id"
    with pytest.raises(SchemaError):
        decode_key(b"\x00\x01\x00\x01x")


def _kafka_v0_value(
    pid: int, epoch: int, timeout: int, status: int, partitions: dict[str, list[int]] | None, *, update: int, start: int
) -> bytes:
    """TransactionLogValue v0 written field by field from Kafka's schema (TransactionLogValue.json)."""
    out = struct.pack(">hqhib", 0, pid, epoch, timeout, status)
    if partitions is None:
        out += struct.pack(">i", -1)
    else:
        out += struct.pack(">i", len(partitions))
        for topic, ids in partitions.items():
            out += struct.pack(">h", len(topic)) + topic.encode() + struct.pack(">i", len(ids))
            out += b"".join(struct.pack(">i", p) for p in ids)
    return out + struct.pack(">qq", update, start)


def _kafka_v1_value(pid: int, epoch: int, timeout: int, status: int, partitions: dict[str, list[int]]) -> bytes:
    """TransactionLogValue v1: the flexible encoding (compact strings and arrays, empty tagged fields)."""
    out = struct.pack(">hqhib", 1, pid, epoch, timeout, status)
    out += bytes([len(partitions) + 1])
    for topic, ids in partitions.items():
        out += bytes([len(topic) + 1]) + topic.encode() + bytes([len(ids) + 1])
        out += b"".join(struct.pack(">i", p) for p in ids) + b"\x00"
    return out + struct.pack(">qq", NOW + 1, NOW) + b"\x00"


def test_value_matches_kafkas_bytes_for_ongoing_and_empty() -> None:
    md = ongoing((("orders", 1), ("orders", 0), ("audit", 3)))
    value = md.snapshot()
    expected = _kafka_v0_value(
        1000, 0, TIMEOUT, 1, {"audit": [3], "orders": [0, 1]}, update=value.txn_last_update_ms, start=value.txn_start_ms
    )
    assert encode_value(value) == expected
    empty = initialized().snapshot()
    assert encode_value(empty) == _kafka_v0_value(1000, 0, TIMEOUT, 0, None, update=NOW, start=-1)


@pytest.mark.parametrize("state", [s for s in TxnState if s is not TxnState.EMPTY])
@pytest.mark.parametrize("version", [0, 1])
def test_value_round_trips(state: TxnState, version: int) -> None:
    transit = TxnTransit(
        producer_id=77,
        last_producer_id=-1,
        producer_epoch=5,
        last_producer_epoch=-1,
        timeout_ms=9000,
        state=state,
        partitions=frozenset({("a", 0), ("a", 2), ("bb", 1)}),
        txn_start_ms=NOW,
        txn_last_update_ms=NOW + 1,
    )
    assert decode_value(encode_value(transit, version)) == transit


def test_reads_kafkas_flexible_v1_value() -> None:
    decoded = decode_value(_kafka_v1_value(5, 2, 1000, 2, {"t": [4, 5]}))
    assert decoded.state is TxnState.PREPARE_COMMIT
    assert (decoded.producer_id, decoded.producer_epoch, decoded.timeout_ms) == (5, 2, 1000)
    assert decoded.partitions == {("t", 4), ("t", 5)}
    assert (decoded.txn_start_ms, decoded.txn_last_update_ms) == (NOW, NOW + 1)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00\x02" + bytes(30),
        _kafka_v0_value(1, 0, 1, 9, None, update=0, start=0),
        _kafka_v0_value(1, 0, 1, 1, {"t": [1]}, update=0, start=0)[:-3],
    ],
)
def test_bad_values_raise_schema_errors(data: bytes) -> None:
    with pytest.raises(SchemaError):
        decode_value(data)


def test_an_empty_transaction_with_partitions_cannot_be_written() -> None:
    bad = TxnTransit(1, -1, 0, -1, 10, TxnState.EMPTY, frozenset({TP_A}), -1, NOW)
    with pytest.raises(SchemaError):
        encode_value(bad)


@pytest.mark.parametrize(
    ("transactional_id", "partitions", "expected"),
    # Java: "hello".hashCode() = 99162322; "".hashCode() = 0; "polygenelubricants".hashCode() = Integer.MIN_VALUE.
    [("hello", 50, 99162322 % 50), ("", 50, 0), ("polygenelubricants", 50, 0)],
)
def test_partition_for_is_kafkas(transactional_id: str, partitions: int, expected: int) -> None:
    assert partition_for(transactional_id, partitions) == expected
