"""Well-framed requests with hostile field values, and random bytes after a valid header, against one real broker.

The project's robustness rule (issue 3): bad input gets a Kafka error code in the response, never a traceback, a
hang, or lost data; a malformed request closes at most that connection. Every case here is followed by a fresh
connection that must still get ApiVersions and Metadata answered, and the module ends by checking the broker's log
for tracebacks.
"""

from __future__ import annotations

import dataclasses
import logging
import struct
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.serial._introspect import EntityField, EntityTupleField, PrimitiveTupleField, classify_field, is_optional

from broker.request_dispatcher import RequestDispatcher
from testkit.node_process import BrokerProcess, WireClient, api_versions_request
from tests.broker.kafka_clients import fetch_request, list_offsets_request, produce_request, topic_name
from tests.topics import create_topic
from wire import codec, schema
from wire.api_versions import API_VERSIONS
from wire.dispatch import Peer
from wire.metrics import ServerMetrics
from wire.record_batch import ATTRIBUTES_POS, CRC_POS, Record, build_batch, compute_crc

CASE_TIMEOUT_S = 5.0

#: The extreme values each integer type can carry on the wire.
_INT_RANGE: dict[str, tuple[int, int]] = {
    "int8": (-(1 << 7), (1 << 7) - 1),
    "int16": (-(1 << 15), (1 << 15) - 1),
    "int32": (-(1 << 31), (1 << 31) - 1),
    "int64": (-(1 << 63), (1 << 63) - 1),
    "uint16": (0, (1 << 16) - 1),
    "uint32": (0, (1 << 32) - 1),
}
#: Durations stay small: a huge Fetch max_wait or JoinGroup rebalance timeout is a legitimate long wait in Kafka
#: too, not a hang this test should flag.
_DURATION_FIELDS = ("timedelta_i32", "timedelta_i64")


@dataclasses.dataclass(frozen=True)
class Profile:
    """One way of filling every field of a request with hostile values."""

    name: str
    integer: Callable[[str], int]
    string: Callable[[str, str], str]
    #: Nullable fields are sent as None (where the schema allows it).
    nulls: bool = False
    #: Every array holds this many copies of one element (duplicate partitions, topics, members).
    copies: int = 2


def _profiles(topic: str) -> list[Profile]:
    return [
        Profile("negative", lambda t: -1 if _INT_RANGE[t][0] < 0 else 0, lambda t, name: topic),
        Profile("minimum", lambda t: _INT_RANGE[t][0], lambda t, name: ""),
        Profile("maximum", lambda t: _INT_RANGE[t][1], lambda t, name: topic, copies=3),
        Profile("unknown", lambda t: 7, lambda t, name: "no-such-" + name + "-" * 300),
        Profile("null", lambda t: 1, lambda t, name: "", nulls=True, copies=0),
    ]


_GARBAGE_RECORDS = b"\x00" * 7 + b"\xff" * 40


def hostile(entity_cls: type[Any], profile: Profile) -> Any:
    """An instance of ``entity_cls`` whose every field carries the profile's hostile value."""
    values: dict[str, object] = {}
    for field in dataclasses.fields(entity_cls):
        kind = classify_field(field)
        if profile.nulls and is_optional(field):
            values[field.name] = None
        elif isinstance(kind, EntityTupleField):
            element = hostile(kind.type_, profile)
            values[field.name] = (element,) * profile.copies
        elif isinstance(kind, EntityField):
            values[field.name] = hostile(kind.type_, profile)
        else:
            kafka_type = str(field.metadata.get("kafka_type"))
            value = _primitive(kafka_type, field.name, profile)
            if isinstance(kind, PrimitiveTupleField):
                value = (value,) * profile.copies
            if value is not None:
                values[field.name] = value
    return schema.build(entity_cls, **values)


def _primitive(kafka_type: str, name: str, profile: Profile) -> object:
    if kafka_type in _INT_RANGE:
        return profile.integer(kafka_type)
    if kafka_type in _DURATION_FIELDS:
        return 0 if profile.name != "negative" else -1
    if kafka_type == "string":
        return profile.string(kafka_type, name)
    if kafka_type == "bool":
        return profile.name != "minimum"
    if kafka_type == "uuid":
        return uuid.uuid4()
    if kafka_type in ("bytes", "records"):
        return _GARBAGE_RECORDS if profile.name != "null" else b""
    return None  # error codes, timestamps, floats: the schema default


def _versions(key: int) -> list[int]:
    entry = API_VERSIONS[key]
    return sorted({entry.min_version, (entry.min_version + entry.max_version) // 2, entry.max_version})


def _error_codes(entity: Any) -> Iterator[ErrorCode]:
    for field in dataclasses.fields(entity):
        value = getattr(entity, field.name)
        if isinstance(value, ErrorCode):
            yield value
        elif dataclasses.is_dataclass(value):
            yield from _error_codes(value)
        elif isinstance(value, tuple):
            for item in value:
                if dataclasses.is_dataclass(item):
                    yield from _error_codes(item)


def _still_serving(broker: BrokerProcess) -> None:
    with WireClient(broker.port, timeout=CASE_TIMEOUT_S) as client:
        assert client.request(api_versions_request()).error_code == ErrorCode.none
        metadata = client.request(schema.build(codec.request_class(3, 12), topics=None))
        assert metadata.brokers, "Metadata answered without brokers"


def _exchange(broker: BrokerProcess, request: Any) -> Any | None:
    """The response to ``request`` on a fresh connection, or None when the broker closed that connection."""
    with WireClient(broker.port, timeout=CASE_TIMEOUT_S) as client:
        try:
            return client.request(request)
        except ConnectionError:
            return None


@pytest.fixture(scope="module")
def topic(shared_broker: BrokerProcess) -> str:
    name = topic_name("hostile")
    create_topic(shared_broker.bootstrap, name, partitions=2)
    return name


@pytest.fixture(scope="module")
def victim(shared_broker: BrokerProcess) -> str:
    """The topic the field sweep names: its hostile DeleteTopics/CreatePartitions/AlterConfigs may change it."""
    return topic_name("victim")


def _ensure_topic(broker: BrokerProcess, name: str) -> None:
    create_cls = codec.request_class(19, 7)
    creatable = schema.build_nested(create_cls, "topics", name=name, num_partitions=2, replication_factor=1)
    with WireClient(broker.port, timeout=CASE_TIMEOUT_S) as client:
        code = client.request(schema.build(create_cls, topics=(creatable,), timeout=5000)).topics[0].error_code
    assert code in {ErrorCode.none, ErrorCode.topic_already_exists}, code


@pytest.fixture(scope="module", autouse=True)
def no_tracebacks(shared_broker: BrokerProcess) -> Iterator[None]:
    """After every test of the module: the broker logged no traceback for any of the input sent."""
    yield
    log = shared_broker.log_text()
    assert "Traceback" not in log, log[log.index("Traceback") - 2000 :][:6000]


CASES = [(key, version) for key in sorted(API_VERSIONS) for version in _versions(key)]


@pytest.mark.parametrize(("api_key", "version"), CASES, ids=[f"{API_VERSIONS[k].name}-v{v}" for k, v in CASES])
def test_hostile_field_values_get_an_answer_and_the_broker_keeps_serving(
    shared_broker: BrokerProcess, victim: str, api_key: int, version: int
) -> None:
    _ensure_topic(shared_broker, victim)
    request_cls = codec.request_class(api_key, version)
    for profile in _profiles(victim):
        try:
            request = hostile(request_cls, profile)
            codec.encode_request(request, 1, "hostile")
        except (TypeError, ValueError, OverflowError):
            continue  # kio refuses to encode this combination: not sendable, so not a broker case
        response = _exchange(shared_broker, request)
        if response is not None:
            codes = list(_error_codes(response))
            assert ErrorCode.unknown_server_error not in codes, (profile.name, response)
        _still_serving(shared_broker)


# -- record batches that lie ----------------------------------------------------------------------------------------

_LENGTH_POS = 8
_MAGIC_POS = 16
_LAST_OFFSET_DELTA_POS = 23
_FIRST_TIMESTAMP_POS = 27
_RECORDS_COUNT_POS = 57


def _valid_batch() -> bytes:
    return build_batch([Record(key=b"k", value=b"v" * 20, headers=(), timestamp=None) for _ in range(3)])


def _resealed(batch: bytearray) -> bytes:
    """The batch with its CRC recomputed, so only the field changed is wrong."""
    struct.pack_into(">I", batch, CRC_POS, compute_crc(batch))
    return bytes(batch)


def _put(batch: bytes, fmt: str, pos: int, value: int, reseal: bool = True) -> bytes:
    buf = bytearray(batch)
    struct.pack_into(fmt, buf, pos, value)
    return _resealed(buf) if reseal else bytes(buf)


def _crc_mismatch() -> bytes:
    buf = bytearray(_valid_batch())
    buf[-1] ^= 0xFF
    return bytes(buf)


def _length_too_long() -> bytes:
    batch = _valid_batch()
    return _put(batch, ">i", _LENGTH_POS, len(batch) + 100, reseal=False)


def _length_too_short() -> bytes:
    batch = _valid_batch()
    return _put(batch, ">i", _LENGTH_POS, len(batch) - 12 - 10, reseal=False)


def _length_negative() -> bytes:
    return _put(_valid_batch(), ">i", _LENGTH_POS, -7, reseal=False)


def _count_and_delta_past_the_records() -> bytes:
    """Header fields agree with each other (4 records, last delta 3) but the payload holds 3 records."""
    buf = bytearray(_valid_batch())
    struct.pack_into(">i", buf, _LAST_OFFSET_DELTA_POS, 3)
    struct.pack_into(">i", buf, _RECORDS_COUNT_POS, 4)
    return _resealed(buf)


_CORRUPT = {ErrorCode.corrupt_message, ErrorCode.invalid_record}
BAD_BATCHES: dict[str, tuple[Callable[[], bytes], set[ErrorCode]]] = {
    "crc-mismatch": (_crc_mismatch, _CORRUPT),
    "truncated": (lambda: _valid_batch()[:-5], _CORRUPT),
    "header-only": (lambda: _valid_batch()[:30], _CORRUPT),
    "length-too-long": (_length_too_long, _CORRUPT),
    "length-too-short": (_length_too_short, _CORRUPT),
    "length-negative": (_length_negative, _CORRUPT),
    "compression-7": (
        lambda: _put(_valid_batch(), ">h", ATTRIBUTES_POS, 7),
        _CORRUPT | {ErrorCode.unsupported_compression_type},
    ),
    "records-count-too-high": (lambda: _put(_valid_batch(), ">i", _RECORDS_COUNT_POS, 4), _CORRUPT),
    "records-count-too-low": (lambda: _put(_valid_batch(), ">i", _RECORDS_COUNT_POS, 2), _CORRUPT),
    "records-count-negative": (lambda: _put(_valid_batch(), ">i", _RECORDS_COUNT_POS, -1), _CORRUPT),
    "records-count-huge": (lambda: _put(_valid_batch(), ">i", _RECORDS_COUNT_POS, (1 << 31) - 1), _CORRUPT),
    # An older message format is INVALID_RECORD (not retried), as Kafka answers it from Produce v3 on.
    "magic-1": (lambda: _put(_valid_batch(), ">b", _MAGIC_POS, 1, reseal=False), {ErrorCode.invalid_record}),
    "magic-9": (lambda: _put(_valid_batch(), ">b", _MAGIC_POS, 9, reseal=False), {ErrorCode.invalid_record}),
    "count-and-delta-past-the-records": (_count_and_delta_past_the_records, _CORRUPT),
    # Records that do not decompress: Kafka's record iterator throws a KafkaException, which no code covers.
    "gzip-attribute-on-plain-records": (
        lambda: _put(_valid_batch(), ">h", ATTRIBUTES_POS, 1),
        {ErrorCode.unknown_server_error},
    ),
    # Below Produce v7 zstd is UNSUPPORTED_COMPRESSION_TYPE whatever the batch holds, as Kafka checks it first.
    "zstd-attribute-on-plain-records": (
        lambda: _put(_valid_batch(), ">h", ATTRIBUTES_POS, 4),
        {ErrorCode.unknown_server_error, ErrorCode.unsupported_compression_type},
    ),
    "garbage": (lambda: _GARBAGE_RECORDS, _CORRUPT),
    "valid-then-garbage": (lambda: _valid_batch() + b"\x01\x02\x03", _CORRUPT),
}


def _log_end(client: WireClient, topic: str, partition: int = 0) -> int:
    part = client.request(list_offsets_request(topic, partition, -1)).topics[0].partitions[0]
    assert part.error_code == ErrorCode.none
    return int(part.offset)


@pytest.mark.parametrize(
    "case",
    [
        name
        for name in sorted(BAD_BATCHES)
    ],
)
@pytest.mark.parametrize("version", [3, 9])
def test_produce_of_a_corrupt_batch_is_refused_with_kafkas_code_and_appends_nothing(
    shared_broker: BrokerProcess, topic: str, case: str, version: int
) -> None:
    make, expected = BAD_BATCHES[case]
    with WireClient(shared_broker.port, timeout=CASE_TIMEOUT_S) as client:
        before = _log_end(client, topic)
        response = client.request(produce_request(topic, 0, make(), version=version))
        code = response.responses[0].partition_responses[0].error_code
        assert code in expected, f"{case}: {code!r}"
        assert _log_end(client, topic) == before
        ok = client.request(produce_request(topic, 0, _valid_batch(), version=version))
        assert ok.responses[0].partition_responses[0].error_code == ErrorCode.none
        assert _log_end(client, topic) == before + 3
    _still_serving(shared_broker)


@pytest.mark.parametrize("timestamp", [-5, (1 << 63) - 1, -(1 << 63)])
def test_out_of_range_timestamps_are_answered_and_the_data_stays_readable(
    shared_broker: BrokerProcess, topic: str, timestamp: int
) -> None:
    batch = bytearray(_valid_batch())
    struct.pack_into(">qq", batch, _FIRST_TIMESTAMP_POS, timestamp, timestamp)
    with WireClient(shared_broker.port, timeout=CASE_TIMEOUT_S) as client:
        before = _log_end(client, topic, 1)
        response = client.request(produce_request(topic, 1, _resealed(batch)))
        code = response.responses[0].partition_responses[0].error_code
        assert code in {ErrorCode.none, ErrorCode.invalid_timestamp}, code
        end = _log_end(client, topic, 1)
        if code == ErrorCode.none:
            assert end == before + 3
            fetched = client.request(fetch_request(topic, 1, before)).responses[0].partitions[0]
            assert fetched.error_code == ErrorCode.none
            assert fetched.records
        else:
            assert end == before
    _still_serving(shared_broker)


# -- field values the handlers must refuse with Kafka's code ---------------------------------------------------------


def test_fetch_of_partition_minus_one_past_the_end_and_unknown_topic_id_get_kafkas_codes(
    shared_broker: BrokerProcess, topic: str
) -> None:
    with WireClient(shared_broker.port, timeout=CASE_TIMEOUT_S) as client:
        end = _log_end(client, topic)
        cases = {
            "partition -1": (fetch_request(topic, -1, 0), {ErrorCode.unknown_topic_or_partition}),
            "partition 99": (fetch_request(topic, 99, 0), {ErrorCode.unknown_topic_or_partition}),
            "offset past the end": (fetch_request(topic, 0, end + 1000), {ErrorCode.offset_out_of_range}),
            "offset -5": (fetch_request(topic, 0, -5), {ErrorCode.offset_out_of_range}),
            "huge max bytes": (fetch_request(topic, 0, 0, partition_max_bytes=(1 << 31) - 1), {ErrorCode.none}),
            "negative max bytes": (fetch_request(topic, 0, 0, partition_max_bytes=-1), {ErrorCode.none}),
            "unknown topic": (fetch_request("no-such-topic-x", 0, 0), {ErrorCode.unknown_topic_or_partition}),
        }
        for name, (request, expected) in cases.items():
            part = client.request(request).responses[0].partitions[0]
            assert part.error_code in expected, f"{name}: {part.error_code!r}"
        request_cls = codec.request_class(1, 13)
        topic_cls = schema.field_entity(request_cls, "topics")
        part_cls = schema.field_entity(topic_cls, "partitions")
        unknown = schema.build(
            request_cls,
            replica_id=-1,
            max_wait=0,
            min_bytes=1,
            max_bytes=1 << 20,
            session_epoch=-1,
            topics=(
                schema.build(
                    topic_cls,
                    topic_id=uuid.uuid4(),
                    partitions=(schema.build(part_cls, partition=0, fetch_offset=0, partition_max_bytes=1 << 20),),
                ),
            ),
        )
        response = client.request(unknown)
        assert response.responses[0].partitions[0].error_code == ErrorCode.unknown_topic_id
    _still_serving(shared_broker)


def test_list_offsets_of_partition_minus_one_gets_unknown_topic_or_partition(
    shared_broker: BrokerProcess, topic: str
) -> None:
    with WireClient(shared_broker.port, timeout=CASE_TIMEOUT_S) as client:
        for version in (1, 8):
            part = client.request(list_offsets_request(topic, -1, -1, version=version)).topics[0].partitions[0]
            assert part.error_code == ErrorCode.unknown_topic_or_partition
    _still_serving(shared_broker)


@pytest.mark.parametrize(
    ("name", "expected"),
    [("", ErrorCode.invalid_topic_exception), ("x" * 300, ErrorCode.invalid_topic_exception)],
    ids=["empty", "oversized"],
)
def test_metadata_and_create_topics_refuse_invalid_topic_names(
    shared_broker: BrokerProcess, name: str, expected: ErrorCode
) -> None:
    with WireClient(shared_broker.port, timeout=CASE_TIMEOUT_S) as client:
        metadata_cls = codec.request_class(3, 12)
        wanted = schema.build_nested(metadata_cls, "topics", name=name, topic_id=None)
        metadata = client.request(schema.build(metadata_cls, topics=(wanted,), allow_auto_topic_creation=True))
        assert [t.error_code for t in metadata.topics] == [expected]
        create_cls = codec.request_class(19, 7)
        creatable = schema.build_nested(create_cls, "topics", name=name, num_partitions=1, replication_factor=1)
        created = client.request(schema.build(create_cls, topics=(creatable,), timeout=5000))
        assert [t.error_code for t in created.topics] == [expected]
    _still_serving(shared_broker)


@pytest.mark.parametrize(
    ("partitions", "replication", "expected"),
    [
        (-5, 1, ErrorCode.invalid_partitions),
        (0, 1, ErrorCode.invalid_partitions),
        (1, 0, ErrorCode.invalid_replication_factor),
        (1, -5, ErrorCode.invalid_replication_factor),
    ],
)
def test_create_topics_refuses_bad_counts(
    shared_broker: BrokerProcess, partitions: int, replication: int, expected: ErrorCode
) -> None:
    with WireClient(shared_broker.port, timeout=CASE_TIMEOUT_S) as client:
        create_cls = codec.request_class(19, 7)
        creatable = schema.build_nested(
            create_cls, "topics", name=topic_name("badcount"), num_partitions=partitions, replication_factor=replication
        )
        created = client.request(schema.build(create_cls, topics=(creatable,), timeout=5000))
        assert [t.error_code for t in created.topics] == [expected]
    _still_serving(shared_broker)


# -- random bytes after a valid header -------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    case=st.sampled_from(CASES),
    body=st.binary(max_size=300),
)
def test_random_bytes_after_a_valid_header_close_at_most_that_connection(
    shared_broker: BrokerProcess, case: tuple[int, int], body: bytes
) -> None:
    api_key, version = case
    with WireClient(shared_broker.port, timeout=CASE_TIMEOUT_S) as client:
        client.send_raw(_frame(api_key, version, body))
        try:
            client.read_frame()  # an answer is fine (the bytes happened to decode) ...
        except ConnectionError:
            pass  # ... and so is closing this connection; a hang is not (TimeoutError fails the test)
    _still_serving(shared_broker)


def _frame(api_key: int, version: int, body: bytes) -> bytes:
    """A length-prefixed request frame: a valid header for (api_key, version), then ``body``."""
    default = schema.build(codec.request_class(api_key, version))
    encoded = codec.encode_request(default, 7, "hostile")
    frame = encoded[4 : len(encoded) - len(codec.encode_entity(default))] + body
    return struct.pack(">i", len(frame)) + frame


@pytest.mark.parametrize(
    ("api_key", "version", "body"),
    [
        # Produce v3: transactional_id null, acks, timeout, then a topic array claiming 2**31-1 entries. kio's native
        # reader reserved memory for the count first, and the allocation failure aborted the broker process.
        (0, 3, struct.pack(">hhii", -1, 1, 1000, (1 << 31) - 1)),
        # Fetch v12 (flexible): the topics compact array claims 2**32-2 entries.
        (1, 12, struct.pack(">iiiibii", -1, 0, 1, 1 << 20, 0, 0, -1) + b"\xff\xff\xff\xff\x0f"),
        # DescribeProducers v0 with a null (non-nullable) topics array: decoded as None, the handler failed.
        (61, 0, b"\x00"),
        # DeleteRecords v0 with a null topics array (legacy encoding).
        (21, 0, struct.pack(">i", -1)),
        # ListOffsets v1: one topic whose non-nullable name is null.
        (2, 1, struct.pack(">iihi", -1, 1, -1, 0)),
    ],
    ids=[
        "produce-huge-array",
        "fetch-huge-compact-array",
        "describe-producers-null",
        "delete-records-null",
        "list-offsets-null-name",
    ],
)
def test_arrays_that_lie_about_their_length_close_only_that_connection(
    shared_broker: BrokerProcess, api_key: int, version: int, body: bytes
) -> None:
    with WireClient(shared_broker.port, timeout=CASE_TIMEOUT_S) as client:
        client.send_raw(_frame(api_key, version, body))
        assert client.is_closed_by_peer(timeout=CASE_TIMEOUT_S)
    _still_serving(shared_broker)


async def test_an_unexpected_handler_failure_is_one_error_line_naming_the_api(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Fault injection: a handler that raises. The request is answered with UNKNOWN_SERVER_ERROR (ApiVersions has
    a top-level error code) and the log holds one ERROR line naming the API, no traceback."""

    async def failing(ctx: Any, request: Any) -> Any:
        raise RuntimeError("injected fault")

    dispatcher = RequestDispatcher(broker=None, metrics=ServerMetrics(), handlers={18: failing})  # type: ignore[arg-type]
    frame = codec.encode_request(api_versions_request(), 41, "hostile")[4:]
    with caplog.at_level(logging.INFO, logger="broker.request_dispatcher"):
        parts = await dispatcher.dispatch(frame, Peer("127.0.0.1", 1, "PLAINTEXT"))
    assert parts is not None
    data = parts if isinstance(parts, bytes) else b"".join(parts)
    correlation_id, response = codec.decode_response(18, 3, data[4:])
    assert (correlation_id, response.error_code) == (41, ErrorCode.unknown_server_error)
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1
    assert errors[0].exc_info is None
    message = errors[0].getMessage()
    assert "ApiVersions" in message and "injected fault" in message and "UNKNOWN_SERVER_ERROR" in message.upper()
