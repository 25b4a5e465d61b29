"""ShareFetch's acquire modes (KIP-1206, ShareFetch v2's ShareAcquireMode) against a real broker process, replayed
as the Java share consumer sends them: batch-optimized (0, the default and what a v1 request gets) acquires whole
record batches, so a fetch may return more than MaxRecords and its ranges are cut at batch boundaries every
BatchSize records; record-limit (1) never acquires more than MaxRecords, even inside a batch. Records given back
come again a batch at a time in batch-optimized mode, at their next delivery count.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest
from kio.schema.errors import ErrorCode

from testkit.node_process import BrokerProcess, WireClient, start_broker
from tests.broker.test_java42_share_conformance import (
    BATCH_OPTIMIZED,
    RECORD_LIMIT,
    RELEASE,
    fetched_offsets,
    join,
    new_group,
    only_partition,
    produce,
    ranges,
    ready_topic,
    share_fetch,
)

#: Three batches of four records: offsets 0-3, 4-7 and 8-11.
BATCHES, PER_BATCH = 3, 4
#: Batches of 100 records of 2 KiB: a read sized to 150 records (the broker's estimate) stops after the first.
LARGE_PER_BATCH, LARGE_VALUE = 100, 2048


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = start_broker(tmp_path_factory.mktemp("share-acquire-modes"))
    try:
        yield process
    finally:
        code = process.stop()
    assert code == 0, process.log_text()


@pytest.fixture
def client(kafka: BrokerProcess, wire: Callable[[int], WireClient]) -> WireClient:
    return wire(kafka.port)


@pytest.fixture
def topic(client: WireClient) -> tuple[str, uuid.UUID]:
    name, topic_id = ready_topic(client)
    for _ in range(BATCHES):
        produce(client, name, PER_BATCH)
    return name, topic_id


def test_record_limit_never_acquires_more_than_max_records(client: WireClient, topic: tuple[str, uuid.UUID]) -> None:
    name, topic_id = topic
    m = join(client, new_group(client), name, topic_id)
    part = only_partition(share_fetch(m, 2, 0, max_records=6, mode=RECORD_LIMIT), topic_id)
    assert part.error_code == ErrorCode.none
    assert ranges(part) == [(0, 5, 1)]  # the second batch split: 6-7 stay available
    assert fetched_offsets(part) == list(range(8))  # the batches holding them go out whole; the client drops 6-7
    nxt = only_partition(share_fetch(m, 2, 1, max_records=6, mode=RECORD_LIMIT), topic_id)
    assert ranges(nxt) == [(6, 11, 1)]


def test_batch_optimized_completes_the_last_batch(client: WireClient, topic: tuple[str, uuid.UUID]) -> None:
    name, topic_id = topic
    m = join(client, new_group(client), name, topic_id)
    # MaxRecords 6 ends inside the second batch, which is acquired whole: 8 records, cut at BatchSize 4.
    part = only_partition(share_fetch(m, 2, 0, max_records=6, mode=BATCH_OPTIMIZED, batch_size=4), topic_id)
    assert part.error_code == ErrorCode.none
    assert ranges(part) == [(0, 3, 1), (4, 7, 1)]
    assert fetched_offsets(part) == list(range(8))
    # Released, the records come back a batch at a time: MaxRecords 1 gets all of batch 0-3, not batch 4-7.
    again = only_partition(share_fetch(m, 2, 1, ((0, 7, RELEASE),), max_records=1, mode=BATCH_OPTIMIZED), topic_id)
    assert again.acknowledge_error_code == ErrorCode.none
    assert ranges(again) == [(0, 3, 2)]
    # Record-limit on the same window takes exactly what it asks for, at the records' own delivery counts.
    limited = only_partition(share_fetch(m, 2, 2, max_records=2, mode=RECORD_LIMIT), topic_id)
    assert ranges(limited) == [(4, 5, 2)]


def test_v1_is_batch_optimized_and_an_unknown_mode_is_refused(client: WireClient, topic: tuple[str, uuid.UUID]) -> None:
    name, topic_id = topic
    m = join(client, new_group(client), name, topic_id)
    assert share_fetch(m, 2, 0, max_records=1, mode=2).error_code == ErrorCode.invalid_request
    # ShareFetch v1 (librdkafka 2.16's) has no mode: batch-optimized, so MaxRecords 1 gets the whole first batch.
    assert ranges(only_partition(share_fetch(m, 1, 0, max_records=1), topic_id)) == [(0, 3, 1)]


def test_batch_optimized_reads_on_to_the_batch_holding_max_records(client: WireClient) -> None:
    """The broker sizes its read of the log to what the fetch could acquire; when the batch holding the
    MaxRecords-th record lies past that read, it reads on and acquires that batch whole, as Kafka does, instead of
    answering with fewer records than MaxRecords (one more round trip for the consumer)."""
    name, topic_id = ready_topic(client)
    for _ in range(3):
        produce(client, name, LARGE_PER_BATCH, value_size=LARGE_VALUE)
    m = join(client, new_group(client), name, topic_id)
    part = only_partition(share_fetch(m, 1, 0, max_records=150), topic_id)
    assert part.error_code == ErrorCode.none
    assert ranges(part) == [(0, 199, 1)]  # two whole batches: the second holds offset 149
    assert fetched_offsets(part) == list(range(200))
    nxt = only_partition(share_fetch(m, 1, 1, max_records=150), topic_id)
    assert ranges(nxt) == [(200, 299, 1)]
