"""KIP-890 part 1 for TxnOffsetCommit: the group coordinator writes a transactional offset commit only once the
transaction coordinator confirms that the group's ``__consumer_offsets`` partition is in the producer's ongoing
transaction, as Kafka's coordinator runtime verifies it. Otherwise a commit without AddOffsetsToTxn, or one
arriving after its transaction ended, opens a transaction there that no marker ever ends (the partition's last
stable offset stuck, stable offset fetches UNSTABLE_OFFSET_COMMIT forever), or is committed by the producer's next
transaction.

Real node, partitions and transaction coordinator, as in :mod:`tests.broker.test_groups_txn_offsets`.
"""

from __future__ import annotations

from pathlib import Path

from kio.schema.errors import ErrorCode

from broker.groups.offsets_topic import OFFSETS_TOPIC
from metadata.controller_api import NewTopic
from tests.broker.inprocess_groups import start_node
from tests.broker.test_groups_txn_offsets import (
    GROUP,
    TOPIC,
    _begin,
    _broker,
    _end,
    _fetched,
    _init,
    _ready,
    _Txn,
    _txn_commit,
    node_dir,
)

__all__ = ["node_dir"]  # the fixture, used by name


async def test_a_txn_offset_commit_without_add_offsets_to_txn_is_refused_and_opens_no_transaction(
    node_dir: Path,
) -> None:
    """Kafka answers INVALID_TXN_STATE up to v3 and TRANSACTION_ABORTABLE from v4 (the client aborts and goes on),
    and writes nothing: the offsets partition's LSO keeps up with its end, and the transaction's EndTxn commits
    no offset."""
    node = await start_node(node_dir)
    try:
        await _broker(node).controller.create_topics([NewTopic(TOPIC, 1, 1)], validate_only=False)
        groups = await _ready(node)
        txns = _broker(node).transactions
        producer_id, epoch = await _init(node, "app-x")
        txn = _Txn("app-x", producer_id, epoch)
        # The data partition is in the transaction, the offsets partition is not (no AddOffsetsToTxn).
        assert await txns.add_partitions("app-x", producer_id, epoch, [(TOPIC, 0)]) == {(TOPIC, 0): ErrorCode.none}
        assert await _txn_commit(groups, txn, {(TOPIC, 0): 77}, api_version=3) == {
            (TOPIC, 0): ErrorCode.invalid_txn_state
        }
        assert await _txn_commit(groups, txn, {(TOPIC, 0): 77}, api_version=4) == {
            (TOPIC, 0): ErrorCode.transaction_abortable
        }
        log = _broker(node).partitions.get(OFFSETS_TOPIC, groups.partition_for(GROUP))
        assert log is not None
        assert not log.has_ongoing_txn(producer_id)
        assert log.last_stable_offset == log.high_watermark
        assert _fetched(groups, require_stable=True) == (-1, ErrorCode.none)

        # An unknown producer at the coordinator is told so, before anything is written either.
        stranger = _Txn("app-x", producer_id + 1000, 0)
        assert await _txn_commit(groups, stranger, {(TOPIC, 0): 5}) == {
            (TOPIC, 0): ErrorCode.invalid_producer_id_mapping
        }
        error, _, _ = await txns.end_txn("app-x", producer_id, epoch, True)
        assert error is ErrorCode.none
        assert _fetched(groups, require_stable=True) == (-1, ErrorCode.none)
        assert log.last_stable_offset == log.high_watermark
    finally:
        await node.stop()


async def test_a_late_txn_offset_commit_of_an_aborted_transaction_is_not_committed_by_the_next(
    node_dir: Path,
) -> None:
    """A commit arriving after its transaction aborted (same producer epoch, transactions v1) is refused; the
    producer's next transaction adds the offsets partition again and commits only what it sent itself."""
    node = await start_node(node_dir)
    try:
        await _broker(node).controller.create_topics([NewTopic(TOPIC, 2, 1)], validate_only=False)
        groups = await _ready(node)
        txn = await _begin(node, "app-y")
        assert await _txn_commit(groups, txn, {(TOPIC, 0): 10}) == {(TOPIC, 0): ErrorCode.none}
        await _end(node, txn, commit=False)

        assert await _txn_commit(groups, txn, {(TOPIC, 1): 99}, api_version=4) == {
            (TOPIC, 1): ErrorCode.transaction_abortable
        }

        # Transactions v1: the next transaction keeps the producer id and epoch.
        txns = _broker(node).transactions
        assert await txns.add_offsets(txn.transactional_id, txn.producer_id, txn.producer_epoch, GROUP) is (
            ErrorCode.none
        )
        assert await _txn_commit(groups, txn, {(TOPIC, 0): 20}) == {(TOPIC, 0): ErrorCode.none}
        await _end(node, txn, commit=True)
        error, fetched = groups.fetch_offsets(GROUP, [(TOPIC, 0), (TOPIC, 1)], require_stable=True)
        assert error is ErrorCode.none
        assert [(f.partition, f.offset, f.error) for f in fetched] == [
            (0, 20, ErrorCode.none),
            (1, -1, ErrorCode.none),
        ]
    finally:
        await node.stop()
