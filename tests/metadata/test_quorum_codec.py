"""The controller's wire formats: Raft messages as KRaft frames and back, Fjord's stream RPCs, and error codes."""

from __future__ import annotations

import gc
import struct
import sys

import pytest
from kio.schema.errors import ErrorCode

from metadata.cluster_records import TopicRecord
from metadata.errors import NodeFencedError, NotControllerError
from metadata.log import decode_metadata_records, encode_metadata_records
from metadata.rpc.error_codes import RpcError, error_code_for, raise_for_error
from metadata.rpc.kafka_apis import BEGIN_QUORUM_EPOCH, FETCH, VOTE
from metadata.rpc.raft_codec import (
    RaftCodecError,
    decode_entries,
    encode_entries,
    request_from_kio,
    request_to_kio,
    request_version,
    response_from_kio,
    response_to_kio,
)
from metadata.rpc.stream_codec import (
    MAX_REQUEST_BODY_BYTES,
    StreamCodecError,
    api_key_of,
    decode_stream_request,
    decode_stream_response,
    encode_stream_request,
    encode_stream_response,
)
from metadata.rpc.stream_rpcs import (
    STREAM_API_BASE,
    CloseStreams,
    CommitStreamSetObject,
    GetKV,
    GetObjects,
    OpenStream,
    StreamResponse,
)
from raft.log import EntryKind, LogEntry, SnapshotId
from raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    EpochEndOffset,
    Errors,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    LeaderIdAndEpoch,
    RaftRequest,
    RaftResponse,
    VoteRequest,
    VoteResponse,
)
from storage.errors import OffsetNotMatchedError, StorageError, StreamFencedError, StreamNotFoundError
from storage.metadata.api import (
    CommitStreamSetObjectRequest,
    NodeIdentity,
    ObjectStreamRange,
    ObjectType,
    S3ObjectMetadata,
    StreamClose,
)
from storage.metadata.stream_records import KVRecord
from wire import codec, schema
from wire.record_batch import Record, build_batch, decode_records, iter_batches

REQUESTS: list[RaftRequest] = [
    VoteRequest("cluster", 3, 1, 2, 10, True, 2, 77),
    VoteRequest("cluster", 4, 2, 3, 0, False, 0, 78),
    BeginQuorumEpochRequest("cluster", 1, 3, 2, 5),
    EndQuorumEpochRequest("cluster", 1, 3, (2, 0), 5),
    FetchRequest("cluster", 1, 500, 3, 10, 2, 0, 1 << 20, 9),
    FetchSnapshotRequest("cluster", 1, 1000, 3, SnapshotId(10, 2), 5, 9),
]

RESPONSES: list[RaftResponse] = [
    VoteResponse(Errors.NONE, 1, 3, True, 4),
    BeginQuorumEpochResponse(Errors.FENCED_LEADER_EPOCH, 1, 3, 4),
    EndQuorumEpochResponse(Errors.NONE, 1, 3, 4),
    FetchResponse(
        Errors.NONE, 10, 0, LeaderIdAndEpoch(1, 3),
        records=(LogEntry(5, 2, b"x", EntryKind.LEADER_CHANGE), LogEntry(6, 2, b"y"), LogEntry(7, 3, b"z")),
        correlation_id=3,
    ),
    FetchResponse(Errors.NONE, 10, 0, LeaderIdAndEpoch(1, 3), diverging_epoch=EpochEndOffset(2, 5), correlation_id=3),
    FetchResponse(Errors.NONE, 10, 4, LeaderIdAndEpoch(1, 3), snapshot_id=SnapshotId(5, 2), correlation_id=3),
    FetchResponse(Errors.NOT_LEADER_OR_FOLLOWER, 0, 0, LeaderIdAndEpoch(2, 4), correlation_id=8),
    FetchSnapshotResponse(Errors.NONE, SnapshotId(5, 2), LeaderIdAndEpoch(1, 3), 100, 10, b"abc", 3),
]


@pytest.mark.parametrize("message", REQUESTS, ids=lambda r: type(r).__name__)
def test_raft_requests_survive_kraft_frames(message: RaftRequest) -> None:
    api_key, entity = request_to_kio(message)
    frame = codec.encode_request(entity, message.correlation_id)
    decoded = codec.decode_request(frame[4:])
    assert decoded.api_key == api_key and decoded.correlation_id == message.correlation_id
    sender, back = request_from_kio(api_key, decoded.body, decoded.correlation_id)
    assert back == message
    assert sender == getattr(message, "replica_id", getattr(message, "leader_id", None))


@pytest.mark.parametrize("message", RESPONSES, ids=lambda r: type(r).__name__)
def test_raft_responses_survive_kraft_frames(message: RaftResponse) -> None:
    api_key, entity = response_to_kio(message)
    frame = codec.encode_response(message.correlation_id, entity)
    correlation_id, body = codec.decode_response(api_key, request_version(api_key), frame[4:])
    assert response_from_kio(api_key, body, correlation_id) == message


def test_log_entries_travel_as_kafka_record_batches_per_epoch_and_kind() -> None:
    entries = [
        LogEntry(0, 1, b"leader", EntryKind.LEADER_CHANGE),
        LogEntry(1, 1, b"a"),
        LogEntry(2, 1, b"b"),
        LogEntry(3, 2, b"leader", EntryKind.LEADER_CHANGE),
        LogEntry(4, 2, b"c"),
    ]
    batches = list(iter_batches(encode_entries(entries)))
    assert [(h.base_offset, h.records_count, h.partition_leader_epoch, h.is_control) for h, _ in batches] == [
        (0, 1, 1, True),
        (1, 2, 1, False),
        (3, 1, 2, True),
        (4, 1, 2, False),
    ]


def test_voter_changes_travel_as_kraft_voters_control_records_and_other_control_types_are_refused() -> None:
    entries = (LogEntry(0, 1, b"leader", EntryKind.LEADER_CHANGE), LogEntry(1, 1, b"voters", EntryKind.VOTERS),
               LogEntry(2, 1, b"data"))
    encoded = encode_entries(entries)
    batches = list(iter_batches(encoded))
    assert [(h.base_offset, h.is_control) for h, _ in batches] == [(0, True), (1, True), (2, False)]
    keys = [record.key for _, batch in batches for record in decode_records(batch)]
    assert keys == [struct.pack(">hh", 0, 2), struct.pack(">hh", 0, 6), None]  # LeaderChange, KRaftVoters
    assert decode_entries(encoded) == entries
    snapshot_header = build_batch([Record(struct.pack(">hh", 0, 0), b"", timestamp=0)], base_offset=3,
                                  partition_leader_epoch=1, is_control=True)  # a KRaft SnapshotHeader
    with pytest.raises(RaftCodecError, match="neither LeaderChange nor KRaftVoters"):
        decode_entries(snapshot_header)


@pytest.mark.parametrize("api_key", [FETCH, VOTE, BEGIN_QUORUM_EPOCH])
def test_a_refusal_by_the_peers_authorizer_reaches_the_raft_core_as_such(api_key: int) -> None:
    """The CONTROLLER listener refuses a Raft request with a top-level CLUSTER_AUTHORIZATION_FAILED; the core must
    see that code (it warns that its principal must be a super user), not an INVALID_REQUEST it would only retry."""
    cls = codec.response_class(api_key, request_version(api_key))
    response = response_from_kio(api_key, schema.build(cls, error_code=ErrorCode.cluster_authorization_failed), 4)
    assert response.error_code is Errors.CLUSTER_AUTHORIZATION_FAILED and response.correlation_id == 4


def test_a_request_for_another_partition_is_refused() -> None:
    api_key, entity = request_to_kio(FetchRequest("cluster", 1, 500, 3, 10, 2, 0, 1 << 20, 9))
    cls = type(entity)
    other = schema.build_nested(cls, "topics", topic="orders", partitions=entity.topics[0].partitions)
    with pytest.raises(RaftCodecError, match="orders"):
        request_from_kio(api_key, schema.build(cls, replica_id=1, topics=(other,)), 1)


def test_stream_requests_and_responses_round_trip() -> None:
    node = NodeIdentity(4, 1700)
    commit = CommitStreamSetObjectRequest(node, 12, 4096, (ObjectStreamRange(3, 0, 10, 2),), order_id=12)
    request = CommitStreamSetObject(node, commit)
    frame = encode_stream_request(request, 41)
    assert api_key_of(frame[4:]) == STREAM_API_BASE + 8
    assert decode_stream_request(frame[4:]) == (41, request)

    objects = [S3ObjectMetadata(12, 4096, ObjectType.STREAM_SET, (ObjectStreamRange(3, 0, 10),), 12, 0, 4)]
    frame = encode_stream_response(41, StreamResponse(RpcError.NONE, None, 2, objects))
    correlation_id, response = decode_stream_response(GetObjects, frame[4:])
    assert correlation_id == 41 and response.result == tuple(objects) and response.leader_id == 2

    frame = encode_stream_response(7, StreamResponse(RpcError.NONE, None, 2, None))
    assert decode_stream_response(GetKV, frame[4:])[1].result is None


def test_metadata_records_encode_in_chunks_and_reject_trailing_garbage() -> None:
    records = [KVRecord(f"k{i}", bytes([i % 256])) for i in range(2500)] + [TopicRecord("t", "id")]
    data = encode_metadata_records(records)
    assert decode_metadata_records(data, "test") == records
    with pytest.raises(StorageError, match="test"):
        decode_metadata_records(data + b"\x00\x00\x00\x07junk", "test")


def test_malformed_stream_frames_name_the_problem() -> None:
    with pytest.raises(StreamCodecError, match="unknown Fjord RPC api key 10999"):
        decode_stream_request(b"\x2a\xf7\x00\x00\x00\x00\x00\x01\xff\xff[]")
    frame = encode_stream_request(OpenStream(NodeIdentity(1, 1), 3, 0), 1)[4:]
    with pytest.raises(StreamCodecError, match="OpenStream"):
        decode_stream_request(frame[:-3] + b"}")


def test_close_streams_travels_whole_and_a_malformed_one_is_refused_by_name() -> None:
    request = CloseStreams(NodeIdentity(4, 1700), (StreamClose(3, 2, 10), StreamClose(4, 2)))
    frame = encode_stream_request(request, 9)[4:]
    assert api_key_of(frame) == STREAM_API_BASE + 23
    assert decode_stream_request(frame) == (9, request)
    for body in (b'[[4,1700],[["3",2,10]]]', b"[[4,1700],[[3]]]", b"[[4,1700],7]"):
        bad = frame[: frame.index(b"[")] + body
        with pytest.raises(StreamCodecError, match="CloseStreams"):
            decode_stream_request(bad)


class _Refused(Exception):
    pass


def test_a_stream_request_body_is_parsed_only_after_its_caller_is_checked() -> None:
    """The check (the CONTROLLER listener's authorization) sees the request's class before any of the body is
    parsed: a refused caller's 100,000-deep body is never read; an allowed one's is refused as nested too deeply,
    and an oversized one by its size, each with a StreamCodecError (one log line), never a RecursionError."""
    depth = 100_000
    nested = encode_stream_request(GetKV("k"), 9)[4:]
    nested = nested[: nested.index(b"[")] + b"[" * depth + b"]" * depth
    seen: list[tuple[type[object], str]] = []

    def refuse(request: type[object], what: str) -> None:
        seen.append((request, what))
        raise _Refused(what)

    with pytest.raises(_Refused):
        decode_stream_request(nested, refuse)
    assert seen == [(GetKV, "GetKV (correlation id 9)")]
    with pytest.raises(StreamCodecError, match="nested too deeply"):
        decode_stream_request(nested, lambda _request, _what: None)
    header = nested[: nested.index(b"[")]
    with pytest.raises(StreamCodecError, match="over the"):
        decode_stream_request(header + b" " * (MAX_REQUEST_BODY_BYTES + 1))


def test_a_deep_body_runs_no_garbage_collection_hook_at_its_depth(monkeypatch: pytest.MonkeyPatch) -> None:
    """A collection started inside the parse of a hostile body would run the ``gc.callbacks`` hooks a few frames
    below the recursion limit. A hook that makes nested calls there (prometheus_client's ``observe`` did) fails, and
    the interpreter prints that with a traceback: the node's log must show one line for the frame and nothing else.
    Here every allocation starts a young collection, so the parse of a 100,000-deep body would run the hook ~1,000
    times at increasing depth."""
    depth = 100_000
    nested = encode_stream_request(GetKV("k"), 9)[4:]
    nested = nested[: nested.index(b"[")] + b"[" * depth + b"]" * depth
    unraisable: list[BaseException | None] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda hook_args: unraisable.append(hook_args.exc_value))

    def nests(levels: int) -> int:
        return 0 if levels == 0 else 1 + nests(levels - 1)

    def hook(_phase: str, _info: dict[str, int]) -> None:
        nests(20)

    thresholds = gc.get_threshold()
    gc.callbacks.append(hook)
    gc.set_threshold(1, 1_000_000, 1_000_000)
    try:
        with pytest.raises(StreamCodecError, match="nested too deeply"):
            decode_stream_request(nested)
    finally:
        gc.set_threshold(*thresholds)
        gc.callbacks.remove(hook)
    assert unraisable == []


@pytest.mark.parametrize(
    ("error", "code", "expected"),
    [
        (StreamFencedError("stream 3: epoch 1 is older"), RpcError.STREAM_FENCED, StreamFencedError),
        (OffsetNotMatchedError("stream 3 ends at 10"), RpcError.OFFSET_NOT_MATCHED, OffsetNotMatchedError),
        (NodeFencedError("node 4 is fenced"), RpcError.NODE_FENCED, NodeFencedError),
        (StreamNotFoundError(9), RpcError.STREAM_NOT_FOUND, StreamNotFoundError),
        (NotControllerError("not me", 2), RpcError.NOT_CONTROLLER, NotControllerError),
        (StorageError("disk"), RpcError.STORAGE_ERROR, StorageError),
    ],
)
def test_storage_errors_cross_the_wire_as_codes(error: StorageError, code: RpcError, expected: type) -> None:
    assert error_code_for(error) is code
    with pytest.raises(expected) as raised:
        raise_for_error(code, str(error), 2, stream_id=9)
    assert str(error) in str(raised.value)
    if isinstance(raised.value, StreamNotFoundError):
        assert raised.value.stream_id == 9
    if isinstance(raised.value, NotControllerError):
        assert raised.value.leader_id == 2
