"""The kio codec: round trips of every advertised version, and what bad frames do to a live broker."""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from testkit.node_process import BrokerProcess, WireClient, api_versions_request
from wire import codec, schema
from wire.api_versions import API_VERSIONS

ADVERTISABLE = [(key, v) for key, r in API_VERSIONS.items() for v in range(r.min_version, r.max_version + 1)]


@pytest.mark.parametrize(("api_key", "version"), ADVERTISABLE)
def test_request_and_response_round_trip(api_key: int, version: int) -> None:
    request = schema.build(codec.request_class(api_key, version))
    frame = codec.encode_request(request, correlation_id=77, client_id="round-trip")
    (length,) = struct.unpack_from(">i", frame)
    assert length == len(frame) - 4
    decoded = codec.decode_request(frame[4:])
    assert (decoded.api_key, decoded.api_version, decoded.correlation_id) == (api_key, version, 77)
    assert decoded.client_id == "round-trip"
    assert decoded.body == request
    assert decoded.consumed == len(frame) - 4

    response = schema.build(codec.response_class(api_key, version))
    encoded = codec.encode_response(78, response)
    correlation_id, body = codec.decode_response(api_key, version, encoded[4:])
    assert correlation_id == 78 and body == response


def test_builder_defaults_nested_entities_and_coerces_plain_values() -> None:
    cls = codec.response_class(3, 12)
    partition = schema.build_nested(schema.field_entity(cls, "topics"), "partitions", partition_index=4, error_code=5)
    assert partition.error_code == ErrorCode.leader_not_available
    assert partition.leader_epoch == -1  # the schema's default, not a zero
    response = schema.build(cls, throttle_time=250, cluster_id="c")
    assert response.throttle_time.total_seconds() == 0.25
    assert response.controller_id == -1 and response.brokers == () and response.topics == ()
    # Fields a version lacks are dropped, so one handler fills every version.
    assert schema.build(codec.response_class(3, 0), cluster_id="ignored", brokers=()).brokers == ()


@pytest.mark.parametrize("ms", [-1, 0, 1, 999, 45_000, 7 * 86_400_000 + 1, 2**31 - 1])
def test_durations_a_client_sends_come_back_as_the_same_milliseconds(ms: int) -> None:
    # JoinGroup v5 carries an i32 duration (session timeout), OffsetCommit v2 an i64 one (retention, -1 = default).
    join = schema.build(codec.request_class(11, 5), group_id="g", session_timeout=ms, rebalance_timeout=ms)
    commit = schema.build(codec.request_class(8, 2), group_id="g", retention_time=ms)
    for request in (join, commit):
        body = codec.decode_request(codec.encode_request(request, correlation_id=1)[4:]).body
        durations = [
            getattr(body, name)
            for name in ("session_timeout", "rebalance_timeout", "retention_time")
            if hasattr(body, name)
        ]
        assert durations and [schema.millis(d) for d in durations] == [ms] * len(durations)
    assert schema.millis(ms) == ms


def test_trailing_bytes_are_tolerated() -> None:
    request = schema.build(codec.request_class(3, 12), topics=None)
    frame = codec.encode_request(request, correlation_id=5)[4:] + b"\0\0\0\1"
    decoded = codec.decode_request(frame)
    assert decoded.body == request and decoded.consumed == len(frame) - 4


#: An unknown tagged field (tag, size 1, one byte) as a newer client may send one.
_UNKNOWN = bytes([1, 99, 1, 0x2A])


def _with_unknown_tag(frame: bytes) -> bytes:
    """A flexible request whose body ends with an empty tagged-field section, given one unknown tag (99)."""
    assert frame.endswith(b"\0")
    return frame[:-1] + _UNKNOWN


def _metadata_v12(*topics: str) -> tuple[Any, bytes]:
    request = schema.build(codec.request_class(3, 12), topics=tuple(
        schema.build_nested(codec.request_class(3, 12), "topics", name=t) for t in topics
    ), allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    return request, codec.encode_request(request, 9, client_id="cli")[4:]


def test_unknown_tagged_fields_are_skipped_as_kafka_skips_them() -> None:
    """KIP-482: Kafka's generated readers keep a tag they do not know aside and read on, in the request header, the
    body and every struct in it; the frame's bytes are still all counted as read."""
    request, frame = _metadata_v12("abc")
    header_tags = 8 + 2 + len("cli")  # the prefix, then the client id (a legacy string even in header v2)
    assert frame[header_tags] == 0
    topic_tags = frame.index(b"\x04abc") + 4
    assert frame[topic_tags] == 0
    variants = {
        "header": frame[:header_tags] + bytes([1, 5, 1, 0x2A]) + frame[header_tags + 1:],
        "body": _with_unknown_tag(frame),
        "nested": frame[:topic_tags] + bytes([1, 9, 2, 0xAB, 0xCD]) + frame[topic_tags + 1:],
    }
    for where, tagged in variants.items():
        decoded = codec.decode_request(tagged)
        assert (decoded.body, decoded.client_id, decoded.consumed) == (request, "cli", len(tagged)), where
        header = codec.decode_header(tagged)
        assert codec.decode_request(tagged, header).body == request, where

    # Beside known tags, inside a known tagged struct too: the known ones are read as sent.
    fetch_cls = codec.request_class(1, 15)
    plain = codec.encode_request(schema.build(fetch_cls, topics=(), forgotten_topics_data=()), 3)[4:]
    state = schema.build(schema.field_entity(fetch_cls, "replica_state"), replica_id=5, replica_epoch=7)
    fetch = schema.build(fetch_cls, cluster_id="c", replica_state=state, topics=(), forgotten_topics_data=())
    section = codec.encode_request(fetch, 3)[4 + len(plain) - 1:]
    # count 2; tag 0, size 2, "c"; tag 1, size 13, replica id, epoch, no tags
    assert section[:5] == bytes([2, 0, 2, 2, ord("c")]) and section[5:7] == bytes([1, 13]) and section[-1] == 0
    replica_state = section[7:-1] + bytes([1, 9, 1, 0x2A])
    tagged = plain[:-1] + bytes([3]) + section[1:5] + bytes([1, len(replica_state)]) + replica_state + _UNKNOWN[1:]
    decoded = codec.decode_request(tagged)
    assert decoded.body == fetch and decoded.consumed == len(tagged)


def test_truncation_is_malformed() -> None:
    _, frame = _metadata_v12()
    with pytest.raises(codec.MalformedRequestError, match="MetadataRequest v12"):
        codec.decode_request(frame[:-2])
    with pytest.raises(codec.MalformedRequestError):
        codec.decode_request(_with_unknown_tag(frame)[:-1])  # the unknown tag's value cut short
    with pytest.raises(codec.MalformedRequestError):
        codec.decode_request(frame[:5])
    with pytest.raises(codec.UnsupportedRequestError):
        codec.decode_request(struct.pack(">hhi", 4, 0, 1) + b"\0\0")


def _framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def test_bad_frames_close_only_their_connection(
    shared_broker: BrokerProcess, wire: Callable[[int], WireClient]
) -> None:
    healthy = wire(shared_broker.port)
    metadata = codec.encode_request(schema.build(codec.request_class(3, 12), topics=None), 1)[4:]

    tagged = wire(shared_broker.port)  # a tag this version does not define is skipped, as Kafka skips it
    tagged.send_raw(_framed(_with_unknown_tag(metadata)))
    correlation_id, response = tagged.receive(3, 12)
    assert correlation_id == 1 and response.brokers[0].port == shared_broker.port

    truncated = wire(shared_broker.port)
    truncated.send_raw(_framed(metadata[:-3]))
    assert truncated.is_closed_by_peer()

    garbage = wire(shared_broker.port)
    garbage.send_raw(_framed(b"\x00\x03"))  # shorter than a request header
    assert garbage.is_closed_by_peer()

    unknown_api = wire(shared_broker.port)
    unknown_api.send_raw(_framed(struct.pack(">hhi", 4, 0, 1) + b"\0\0"))  # LeaderAndIsr: not served
    assert unknown_api.is_closed_by_peer()

    # Responses to requests before a bad one on the same connection are still delivered, in order.
    mixed = wire(shared_broker.port)
    mixed.send(api_versions_request(3), correlation_id=41)
    mixed.send_raw(_framed(metadata[:-3]))
    got, body = mixed.receive(18, 3)
    assert got == 41 and body.error_code == ErrorCode.none
    assert mixed.is_closed_by_peer()

    trailing = wire(shared_broker.port)
    trailing.send_raw(_framed(metadata + b"\0\0\0\1"))
    correlation_id, response = trailing.receive(3, 12)
    assert correlation_id == 1 and response.brokers[0].port == shared_broker.port

    assert healthy.request(api_versions_request(3)).error_code == ErrorCode.none
    assert "closing connection" in shared_broker.log_text()


def test_preload_skips_versions_kio_does_not_know() -> None:
    """A broker loads the Produce classes ahead of its first producer (``Broker._preload_data_path``); a range
    reaching past what kio knows loads what it knows and refuses the rest only when a request asks for it."""
    codec.preload(0, range(3, 200))
    frame = codec.encode_request(schema.build(codec.request_class(0, 9), acks=1, timeout_ms=1000, topic_data=()), 4)
    assert codec.decode_request(frame[4:]).body.acks == 1
    with pytest.raises(codec.UnsupportedRequestError):
        codec.request_class(0, 199)
