"""Request framing and response splicing on the hot paths: requests larger than the server's staging buffer,
frames split at every awkward byte boundary or packed several to a segment, and Fetch responses whose record sets
are written by reference rather than copied into one buffer."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from testkit.node_process import BrokerProcess, WireClient
from testkit.waiting import eventually
from tests.broker.kafka_clients import fetch_request, produce_request, topic_name
from tests.topics import create_topic
from wire import codec, schema
from wire.record_batch import Record, build_batch, decode_records, iter_batches


def _batch(values: list[bytes]) -> bytes:
    return build_batch([Record(key=None, value=v, headers=(), timestamp=None) for v in values])


def _fetch_all(client: WireClient, topic: str, until: int) -> list[bytes]:
    """Every record value of partition 0 from offset 0 up to ``until`` (bounded in time)."""
    values: list[bytes] = []
    offset = 0

    def fetch() -> bool:
        nonlocal offset
        part = client.request(fetch_request(topic, 0, offset, partition_max_bytes=8 << 20)).responses[0].partitions[0]
        assert part.error_code == ErrorCode.none
        for header, raw in iter_batches(part.records):
            for i, record in enumerate(decode_records(raw)):
                if header.base_offset + i >= offset:
                    values.append(record.value or b"")
            offset = header.base_offset + header.records_count
        return offset >= until

    eventually(fetch, timeout=20, interval=0.01, what=lambda: f"offset {until} of {topic}, {offset} read")
    return values


def test_large_requests_split_at_every_boundary_are_served_in_order(
    shared_broker: BrokerProcess, wire: Callable[[int], WireClient]
) -> None:
    topic = topic_name("framing")
    create_topic(shared_broker.bootstrap, topic, config={"max.message.bytes": str(2 << 20)})
    client = wire(shared_broker.port)
    # Three produce requests of ~1.5 MiB (larger than the 256 KiB staging buffer) with small requests between them,
    # all sent as one byte stream in pieces of awkward sizes, so frame headers and bodies straddle reads.
    values = [os.urandom(1500) for _ in range(3000)]
    chunks = [values[0:1000], values[1000:2000], values[2000:3000]]
    frames: list[tuple[int, Any]] = []
    stream = bytearray()
    correlation = 500
    for chunk in chunks:
        records = _batch(chunk)  # one batch of ~1.5 MiB, within the topic's max.message.bytes
        for request in (produce_request(topic, 0, records), schema.build(codec.request_class(18, 0))):
            correlation += 1
            stream += codec.encode_request(request, correlation, "framing-test")
            frames.append((correlation, request))
    sizes = [1, 3, 4, 5, 7, 4096, 65_535, 262_143, 262_145, 1_000_003]
    pos = i = 0
    while pos < len(stream):
        step = sizes[i % len(sizes)]
        client.send_raw(bytes(stream[pos : pos + step]))
        pos += step
        i += 1
    for correlation_id, request in frames:
        got, body = client.receive(type(request).__api_key__, type(request).__version__)
        assert got == correlation_id
        if type(request).__api_key__ == 0:
            assert body.responses[0].partition_responses[0].error_code == ErrorCode.none
        else:
            assert body.error_code == ErrorCode.none
    assert _fetch_all(client, topic, len(values)) == values


def test_many_small_requests_in_one_segment_are_each_answered(
    shared_broker: BrokerProcess, wire: Callable[[int], WireClient]
) -> None:
    client = wire(shared_broker.port)
    request = schema.build(codec.request_class(18, 0))
    # ~400 frames per send: far more than fit the staging buffer's free tail, so it is compacted as it fills.
    stream = b"".join(codec.encode_request(request, 10_000 + n, "x" * 600) for n in range(400))
    client.send_raw(stream)
    for n in range(400):
        got, body = client.receive(18, 0)
        assert got == 10_000 + n
        assert body.error_code == ErrorCode.none


def test_spliced_response_parts_equal_the_single_buffer_encoding() -> None:
    response_cls = codec.response_class(1, 12)
    topic_cls = schema.field_entity(response_cls, "responses")
    part_cls = schema.field_entity(topic_cls, "partitions")
    big = os.urandom(1 << 20)
    for records in (b"", b"small", big):
        parts = tuple(
            schema.build(part_cls, partition_index=i, high_watermark=7, records=records) for i in range(3)
        )
        response = schema.build(response_cls, responses=(schema.build(topic_cls, topic="t", partitions=parts),))
        spliced = codec.encode_response_parts(42, response)
        assert b"".join(spliced) == codec.encode_response(42, response)
        # Encoded ahead of the answer (a ShareFetch encodes while its acknowledgements become durable): the same.
        ahead = codec.encode_response_parts(42, codec.EncodedResponse(response))
        assert b"".join(ahead) == codec.encode_response(42, response)
        if records is big:
            # The record sets are referenced, not copied: the broker never duplicates fetched bytes.
            assert sum(1 for p in spliced if p is big) == 3
            assert sum(1 for p in ahead if p is big) == 3
