"""The share stream's records (Kafka's ShareSnapshot / ShareUpdate shape), their replay and trim point, and what
acquisition makes of a log's batches (control batches, aborted transactions) and of ``by_duration`` resets."""

from __future__ import annotations

from typing import Any

import pytest

from broker.share.partition_state import LogBatch, StateBatch
from broker.share.record_states import RecordState
from broker.share.share_partition import classify
from broker.share.state_records import SNAPSHOT, TOMBSTONE, UPDATE, ShareRecord, ShareStreamReplay, decode, encode
from settings.group_configs import duration_ms
from wire.aborted_txns import AbortedTxn
from wire.record_batch import BatchHeader, Record, build_batch, parse_header
from wire.stored_schema import SchemaError

ACK, ARCH, AVAIL = int(RecordState.ACKNOWLEDGED), int(RecordState.ARCHIVED), int(RecordState.AVAILABLE)


def test_records_round_trip() -> None:
    records = [
        ShareRecord(SNAPSHOT, "g", 2, 1, 5, 100, 1_700_000_000_000, 1_700_000_000_500,
                    (StateBatch(100, 104, ACK, 1), StateBatch(105, 105, AVAIL, 3))),
        ShareRecord(UPDATE, "gröup", 2, 0, 6, 120, batches=(StateBatch(121, 121, ARCH, 5),)),
        ShareRecord(TOMBSTONE, "g"),
    ]
    for record in records:
        assert decode(encode(record)) == record


@pytest.mark.parametrize("data", [b"", b"\x53\x07\x00\x00\x00\x01g", b"\x00\x00\x00\x00", encode(
    ShareRecord(UPDATE, "g", batches=(StateBatch(1, 2, ACK, 1),)))[:-3]])
def test_undecodable_records_are_refused(data: bytes) -> None:
    with pytest.raises(SchemaError):
        decode(data)


def test_replay_applies_the_latest_snapshot_and_its_updates_and_knows_the_trim_point() -> None:
    replay = ShareStreamReplay()
    replay.apply(0, ShareRecord(SNAPSHOT, "a", snapshot_epoch=0, start_offset=0))
    replay.apply(1, ShareRecord(SNAPSHOT, "b", snapshot_epoch=0, start_offset=50))
    replay.apply(2, ShareRecord(UPDATE, "a", start_offset=0,
                                batches=(StateBatch(0, 4, ACK, 1), StateBatch(6, 6, AVAIL, 2))))
    assert replay.groups["a"].state.start_offset == 5
    assert replay.groups["a"].state.state_of(6) == (RecordState.AVAILABLE, 2, None)
    replay.apply(3, ShareRecord(SNAPSHOT, "a", snapshot_epoch=1, start_offset=5,
                                batches=(StateBatch(6, 6, AVAIL, 2),)))
    replay.apply(4, ShareRecord(UPDATE, "a", snapshot_epoch=1, start_offset=7))
    assert replay.groups["a"].state.start_offset == 7
    assert replay.groups["a"].snapshot_offset == 3 and replay.groups["a"].updates_since_snapshot == 1
    assert replay.trim_point(5) == 1  # b's only snapshot is still needed
    replay.apply(5, ShareRecord(TOMBSTONE, "b"))
    assert replay.trim_point(6) == 3
    replay.apply(6, ShareRecord(UPDATE, "b", start_offset=60))  # an update after its group's deletion is ignored
    assert "b" not in replay.groups


def test_classify_skips_control_batches_and_aborted_transactions_only_under_read_committed() -> None:
    def at(offset: int, **kwargs: Any) -> BatchHeader:
        return parse_header(build_batch([Record(b"k", b"v"), Record(b"k", b"v")], base_offset=offset, **kwargs))

    headers = [
        at(0, producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True),  # aborted
        at(2, producer_id=8, producer_epoch=0, base_sequence=0, is_transactional=True),  # committed
        at(4, producer_id=7, producer_epoch=0, is_control=True, is_transactional=True),  # 7's ABORT marker
        at(6, producer_id=7, producer_epoch=0, base_sequence=2, is_transactional=True),  # 7's next transaction
        at(8),
    ]
    aborted = [AbortedTxn(7, 0)]
    committed = classify(headers, aborted, read_committed=True)
    assert [b.skip for b in committed] == [True, False, True, False, False]
    assert committed[0] == LogBatch(0, 1, True)
    uncommitted = classify(headers, aborted, read_committed=False)
    assert [b.skip for b in uncommitted] == [False, False, True, False, False]


@pytest.mark.parametrize(
    ("text", "ms"),
    [("PT1H", 3_600_000), ("P1D", 86_400_000), ("PT0.5S", 500), ("P1DT2H3M4S", 93_784_000), ("pt15m", 900_000)],
)
def test_by_duration_parses_iso_8601_durations(text: str, ms: int) -> None:
    assert duration_ms(text) == ms


@pytest.mark.parametrize("text", ["", "P", "PT", "1H", "P1W", "PTxS"])
def test_bad_durations_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        duration_ms(text)
