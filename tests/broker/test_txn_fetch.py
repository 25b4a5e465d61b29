"""Transactions at the wire, against a real broker process: transactional batches produced with raw Produce
requests (the producer begun as a client does: InitProducerId with its transactional id, AddPartitionsToTxn),
markers written through WriteTxnMarkers (as a transaction coordinator sends them), and what consumers
see: read_committed Fetch stops at the last stable offset and lists the aborted transactions of what it returns,
its long poll wakes when a marker moves the LSO, ListOffsets with isolation level 1 answers the LSO,
DescribeProducers shows open transactions, and client batches a client may not write change nothing."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from testkit.node_process import BrokerProcess, WireClient
from testkit.waiting import eventually
from tests.broker.kafka_clients import (
    fetch_request,
    init_producer_id,
    list_offsets_request,
    produce_request,
    topic_name,
)
from tests.topics import create_topic
from wire import codec, schema
from wire.record_batch import Record, build_batch, decode_records, iter_batches

TXN_ID = "wire-txn"
#: What the coordinator answers while ``__transaction_state`` is being created or loaded.
_NOT_READY = frozenset(
    {ErrorCode.coordinator_not_available, ErrorCode.coordinator_load_in_progress, ErrorCode.not_coordinator}
)


def _begin(client: WireClient, transactional_id: str, topic: str) -> tuple[int, int]:
    """A transactional producer's start as a client makes it: FindCoordinator for its transactional id (which
    creates ``__transaction_state``), InitProducerId (both retried while the coordinator loads), then
    AddPartitionsToTxn for partition 0 of ``topic``."""
    find_cls = codec.request_class(10, 4)
    find = schema.build(find_cls, key_type=1, coordinator_keys=(transactional_id,))

    def found() -> Any:
        coordinator = client.request(find).coordinators[0]
        return None if coordinator.error_code in _NOT_READY else coordinator

    coordinator = eventually(found, timeout=30, what=f"FindCoordinator for {transactional_id}")
    assert coordinator.error_code == ErrorCode.none, coordinator
    init_cls = codec.request_class(22, 4)
    init = schema.build(
        init_cls, transactional_id=transactional_id, transaction_timeout=600_000, producer_id=-1, producer_epoch=-1
    )

    def initialised() -> Any:
        response = client.request(init)
        return None if response.error_code in _NOT_READY else response

    response = eventually(initialised, timeout=30, what=f"InitProducerId for {transactional_id}")
    assert response.error_code == ErrorCode.none, response
    pid, epoch = int(response.producer_id), int(response.producer_epoch)
    add_cls = codec.request_class(24, 3)
    add = schema.build(
        add_cls,
        v3_and_below_transactional_id=transactional_id,
        v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=(schema.build_nested(add_cls, "v3_and_below_topics", name=topic, partitions=(0,)),),
    )
    added = client.request(add).results_by_topic_v3_and_below[0].results_by_partition[0]
    assert added.partition_error_code == ErrorCode.none, added
    return pid, epoch


def _txn_batch(pid: int, epoch: int, seq: int, values: list[bytes], timestamp: int | None = None) -> bytes:
    return build_batch(
        [Record(None, v, (), timestamp) for v in values],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=True,
    )


def _produce(client: WireClient, topic: str, records: bytes, transactional_id: str | None) -> Any:
    request = dataclasses.replace(produce_request(topic, 0, records), transactional_id=transactional_id)
    return client.request(request).responses[0].partition_responses[0]


def _markers(client: WireClient, topic: str, pid: int, epoch: int, *, commit: bool) -> ErrorCode:
    cls = codec.request_class(27, 1)
    marker_cls = schema.field_entity(cls, "markers")
    topic_cls = schema.field_entity(marker_cls, "topics")
    marker = schema.build(
        marker_cls,
        producer_id=pid,
        producer_epoch=epoch,
        transaction_result=commit,
        topics=(schema.build(topic_cls, name=topic, partition_indexes=(0,)),),
        coordinator_epoch=0,
    )
    response = client.request(schema.build(cls, markers=(marker,)))
    assert response.markers[0].producer_id == pid
    return ErrorCode(response.markers[0].topics[0].partitions[0].error_code)


def _fetch(client: WireClient, topic: str, offset: int, *, read_committed: bool, **kwargs: Any) -> Any:
    request = fetch_request(topic, 0, offset, **kwargs)
    response = client.request(dataclasses.replace(request, isolation_level=1 if read_committed else 0))
    part = response.responses[0].partitions[0]
    assert part.error_code == ErrorCode.none, part
    return part


def _latest(client: WireClient, topic: str, *, read_committed: bool, timestamp: int = -1) -> int:
    """ListOffsets' answer for ``timestamp`` (-1 latest, -3 the record with the highest timestamp)."""
    request = dataclasses.replace(
        list_offsets_request(topic, 0, timestamp), isolation_level=1 if read_committed else 0
    )
    part = client.request(request).topics[0].partitions[0]
    assert part.error_code == ErrorCode.none, part
    return int(part.offset)


def _batch_offsets(records: bytes | None) -> list[tuple[int, bool]]:
    return [(h.base_offset, h.is_control) for h, _ in iter_batches(records or b"")]


def test_read_committed_fetch_stops_at_the_lso_and_lists_aborted_transactions(
    shared_broker: BrokerProcess, wire: Callable[[int], WireClient]
) -> None:
    topic = topic_name("txn-fetch")
    create_topic(shared_broker.bootstrap, topic)
    client = wire(shared_broker.port)
    aborting, committing = _begin(client, f"{topic}-a", topic), _begin(client, f"{topic}-c", topic)
    assert _produce(client, topic, _txn_batch(*aborting, 0, [b"a0", b"a1"]), f"{topic}-a").base_offset == 0
    assert _produce(client, topic, _txn_batch(*committing, 0, [b"c0", b"c1"]), f"{topic}-c").base_offset == 2

    committed = _fetch(client, topic, 0, read_committed=True)
    assert (committed.high_watermark, committed.last_stable_offset) == (4, 0)
    assert not committed.records and committed.aborted_transactions == ()
    uncommitted = _fetch(client, topic, 0, read_committed=False)
    assert _batch_offsets(uncommitted.records) == [(0, False), (2, False)]
    assert uncommitted.last_stable_offset == 0 and uncommitted.aborted_transactions is None
    assert _latest(client, topic, read_committed=True) == 0
    assert _latest(client, topic, read_committed=False) == 4

    assert _markers(client, topic, *aborting, commit=False) == ErrorCode.none  # offset 4
    assert _markers(client, topic, *committing, commit=True) == ErrorCode.none  # offset 5
    committed = _fetch(client, topic, 0, read_committed=True)
    assert (committed.high_watermark, committed.last_stable_offset) == (6, 6)
    assert _batch_offsets(committed.records) == [(0, False), (2, False), (4, True), (5, True)]
    assert [(a.producer_id, a.first_offset) for a in committed.aborted_transactions] == [(aborting[0], 0)]
    # A fetch past the aborted transaction does not list it.
    assert _fetch(client, topic, 5, read_committed=True).aborted_transactions == ()
    assert _latest(client, topic, read_committed=True) == 6

    # A new transaction of the committing producer is open from offset 6: DescribeProducers shows where.
    # The coordinator still has the partition in that transaction (the markers above did not come from it).
    later = int(time.time() * 1000) + 60_000
    assert _produce(client, topic, _txn_batch(*committing, 2, [b"c2"], later), f"{topic}-c").base_offset == 6
    assert _latest(client, topic, read_committed=True) == 6
    assert _latest(client, topic, read_committed=False) == 7
    # Its record has the highest timestamp: read_uncommitted finds it, read_committed must not (it is past the LSO).
    assert _latest(client, topic, read_committed=False, timestamp=-3) == 6
    assert _latest(client, topic, read_committed=True, timestamp=-3) == -1
    describe_cls = codec.request_class(61, 0)
    topic_req = schema.build_nested(describe_cls, "topics", name=topic, partition_indexes=(0,))
    described = client.request(schema.build(describe_cls, topics=(topic_req,))).topics[0].partitions[0]
    starts = {p.producer_id: p.current_txn_start_offset for p in described.active_producers}
    assert starts == {aborting[0]: -1, committing[0]: 6}


def test_read_committed_long_poll_wakes_when_a_marker_moves_the_lso(
    shared_broker: BrokerProcess, wire: Callable[[int], WireClient]
) -> None:
    topic = topic_name("txn-poll")
    create_topic(shared_broker.bootstrap, topic)
    client, consumer = wire(shared_broker.port), wire(shared_broker.port)
    producer = _begin(client, topic, topic)
    _produce(client, topic, _txn_batch(*producer, 0, [b"v0", b"v1", b"v2"]), topic)
    # Longer than the client's read timeout (10 s): only the marker's wake-up can answer it in time.
    request = fetch_request(topic, 0, 0, max_wait_ms=30_000, min_bytes=1)
    correlation = consumer.send(dataclasses.replace(request, isolation_level=1))
    assert _markers(client, topic, *producer, commit=True) == ErrorCode.none
    received, body = consumer.receive(1, 12)
    assert received == correlation
    part = body.responses[0].partitions[0]
    assert part.error_code == ErrorCode.none and part.last_stable_offset == 4
    values = [r.value for h, b in iter_batches(part.records or b"") if not h.is_control for r in decode_records(b)]
    assert values == [b"v0", b"v1", b"v2"]


def test_fetch_sessions_report_the_lso_moving(shared_broker: BrokerProcess, wire: Callable[[int], WireClient]) -> None:
    topic = topic_name("txn-session")
    create_topic(shared_broker.bootstrap, topic)
    client = wire(shared_broker.port)
    producer = _begin(client, topic, topic)
    _produce(client, topic, _txn_batch(*producer, 0, [b"v0"]), topic)
    full = client.request(dataclasses.replace(fetch_request(topic, 0, 0, session_epoch=0), isolation_level=1))
    session = full.session_id
    assert session != 0 and full.responses[0].partitions[0].last_stable_offset == 0
    # Nothing changed: an incremental fetch leaves the partition out.
    quiet = client.request(
        dataclasses.replace(fetch_request(None, 0, 0, session_id=session, session_epoch=1), isolation_level=1)
    )
    assert quiet.responses == ()
    assert _markers(client, topic, *producer, commit=True) == ErrorCode.none
    moved = client.request(
        dataclasses.replace(fetch_request(None, 0, 0, session_id=session, session_epoch=2), isolation_level=1)
    )
    part = moved.responses[0].partitions[0]
    assert part.last_stable_offset == part.high_watermark == 2
    assert _batch_offsets(part.records) == [(0, False), (1, True)]


def test_client_control_batches_and_transactional_batches_without_an_id_change_nothing(
    shared_broker: BrokerProcess, wire: Callable[[int], WireClient]
) -> None:
    topic = topic_name("txn-hostile")
    create_topic(shared_broker.bootstrap, topic)
    client = wire(shared_broker.port)
    pid, epoch = _begin(client, topic, topic)
    marker = build_batch(
        [Record(b"\0\0\0\1", b"\0\0\0\0\0\0")],
        producer_id=pid,
        producer_epoch=epoch,
        is_control=True,
        is_transactional=True,
    )
    assert _produce(client, topic, marker, topic).error_code == ErrorCode.invalid_record
    refused = _produce(client, topic, _txn_batch(pid, epoch, 0, [b"x"]), transactional_id=None)
    assert refused.error_code == ErrorCode.transactional_id_authorization_failed
    assert _latest(client, topic, read_committed=False) == 0
    assert not _fetch(client, topic, 0, read_committed=False).records
    # The producer is untouched: its first transactional batch is still accepted at sequence 0.
    assert _produce(client, topic, _txn_batch(pid, epoch, 0, [b"x"]), topic).error_code == ErrorCode.none
    # An idempotent producer (no transactional id) is refused transactional batches the same way.
    idempotent = init_producer_id(client)
    refused = _produce(client, topic, _txn_batch(*idempotent, 0, [b"y"]), transactional_id=None)
    assert refused.error_code == ErrorCode.transactional_id_authorization_failed
    assert _latest(client, topic, read_committed=False) == 1
