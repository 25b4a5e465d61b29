"""The controller's wire surface: every RPC the CONTROLLER listener serves, and the codec of Fjord's own ones.

All RPCs use Kafka's framing (``length i32`` then a request header and a body; responses carry the request's
correlation id). A connection may pipeline requests; responses come back in request order.

Kafka-protocol RPCs (kio entities, ``wire.codec`` encodes them; versions in :data:`KAFKA_API_VERSIONS`):

==================  ====  ========  ===================================================================
RPC                 key   versions  served by
==================  ====  ========  ===================================================================
Fetch               1     12        Raft: voters and observers (brokers) pull ``__cluster_metadata``-0;
                                    records are Kafka v2 record batches, one Raft entry per record, the
                                    batch's partition leader epoch = the entries' epoch, LEADER_CHANGE
                                    entries as control batches (see ``metadata.rpc.raft_codec``)
ApiVersions         18    0-3       the keys and versions of this table
CreateTopics        19    2-7       active controller (forwarded by brokers)
DeleteTopics        20    1-6       active controller
AlterConfigs        33    0-2       active controller
CreatePartitions    37    0-3       active controller
ElectLeaders        43    0-2       active controller (preferred and unclean elections, ``controller.leadership``)
IncrementalAlter..  44    0-1       active controller
AlterPartitionRe..  45    0         active controller (DESIGN §9: the reassignment is the controller's)
AlterUserScramCr..  51    0         active controller (SCRAM credentials are metadata records)
CreateAcls          30    1-3       active controller (ACL bindings are metadata records)
DeleteAcls          31    1-3       active controller
AlterClientQuotas   49    0-1       active controller (client quotas are metadata records)
Vote                52    2         Raft (KIP-996 pre-vote)
BeginQuorumEpoch    53    1         Raft
EndQuorumEpoch      54    1         Raft
DescribeQuorum      55    0-2       the leader answers with voters, observers, epoch, high watermark;
                                    a follower answers NOT_LEADER_OR_FOLLOWER (kafka-metadata-quorum)
FetchSnapshot       59    1         Raft: snapshot download by a lagging voter or observer
BrokerRegistration  62    0-4       active controller: returns the broker epoch
BrokerHeartbeat     63    0-1       active controller: session keep-alive, fencing and unfencing, controlled
                                    shutdown (``want_shut_down``: the broker's partitions move away first)
UnregisterBroker    64    0         active controller: removes a stopped broker (forwarded by brokers)
DescribeCluster     60    0-1       any voter: endpoint type 2 (KIP-919) lists the voters and the active
                                    controller (how ``kafka-metadata-quorum --bootstrap-controller`` finds
                                    the leader); type 1 lists the live brokers of this voter's image
AllocateProducerIds 67    0         active controller: a block of producer ids for the calling broker,
                                    committed as a ProducerIdsRecord before the answer
SaslHandshake       17    1         a SASL CONTROLLER listener's authentication (``controller.rpc.sasl``);
SaslAuthenticate    36    0-2       before it, only ApiVersions is served; elsewhere ILLEGAL_SASL_STATE
==================  ====  ========  ===================================================================

A Kafka-protocol request that reaches a controller which is not the active one is answered with the response's
``NOT_CONTROLLER`` error code (41), as KRaft does; the client finds the leader with DescribeQuorum (or from the
``leader_id`` of Fjord's own RPCs) and retries there.

Fjord's own RPCs: the storage engine's ``StreamMetadata`` interface (``storage.metadata.api``), keys from
:data:`STREAM_API_BASE` (10000) on, version 0:

=====  ======================  =============================================  ====================================
key    RPC                     request fields                                 result
=====  ======================  =============================================  ====================================
10000  CreateStream            node, tags                                     stream id
10001  OpenStream              node, stream_id, epoch                         OpenStreamResult
10002  CloseStream             node, stream_id, epoch                         -
10003  TrimStream              node, stream_id, epoch, new_start_offset       -
10004  DeleteStream            node, stream_id, epoch                         -
10005  GetStreams              node, stream_ids                               StreamMetadataRecord...
10006  GetOpeningStreams       node                                           OpeningStream...
10007  PrepareObjects          node, count, ttl_ms                            first object id
10008  CommitStreamSetObject   request (CommitStreamSetObjectRequest)         -
10009  CommitStreamObject      request (CommitStreamObjectRequest)            -
10010  GetObjects              node, stream_id, start_offset, end_offset,     S3ObjectMetadata...
                               limit
10011  GetStreamSetObjects     node, node_id                                  S3ObjectMetadata...
10012  GetStreamObjects        node, stream_id                                S3ObjectMetadata...
10013  SweepObjects            node, now_ms                                   object ids
10014  RemoveObjects           node, object_ids                               -
10015  GetKV                   node, key                                      bytes or null
10016  PutKV                   node, key, value                               -
10017  DeleteKV                node, key                                      -
10018  DescribeMetadata        node                                           MetadataDump
10019  CompleteWALFailover     node, failed_node_id, failed_node_epoch        -
10020  ReportBrokerLoad        node, partitions (PartitionLoad...), interval  -
10021  DescribeBrokerLoad      node                                           BrokerLoadReport...
=====  ======================  =============================================  ====================================

ReportBrokerLoad is a broker's per-partition traffic over its last reporting interval, kept in memory by the active
controller for the auto-balancer's load goal (``metadata.broker_load``); DescribeBrokerLoad returns what it keeps
(the metadata shell's ``/balancer`` view). Both need the active controller; neither is a metadata write.

DescribeMetadata is answered by *any* voter from its own applied state (no leadership needed): the whole metadata
state as records (:func:`decode_metadata_records`), with the voter's view of the quorum. Tests compare voters with
it and the metadata shell browses a running cluster with it.

Every request carries the caller's ``node`` (:class:`~storage.metadata.api.NodeIdentity`: node id + node epoch).
The active controller rejects a mutation from a node whose epoch is not its current registration or that is
fenced (``NODE_FENCED``), so a broker that was paused past its session timeout cannot commit anything.

Frame of a Fjord request: Kafka request header v1 (``api_key i16 | api_version i16 | correlation_id i32 |
client_id nullable string``) then a UTF-8 JSON body: the request dataclass's fields in declaration order as a JSON
array (the metadata records' codec, ``storage.metadata.records``: nested dataclasses are arrays, bytes base64,
enums their value). A newer version may only add trailing fields with defaults. Response frame: ``correlation_id
i32`` then the JSON array ``[error_code, error_message, leader_id, result]``; ``leader_id`` is the active
controller as this node knows it (-1 unknown), meaningful with ``NOT_CONTROLLER``. Error codes are
:class:`RpcError`; :func:`raise_for_error` turns them back into the storage errors the engine expects.
"""

from __future__ import annotations

import enum
import json
import struct
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Final

from metadata.broker_load import PartitionLoad
from metadata.errors import NodeFencedError, NotControllerError
from metadata.log import SNAPSHOT_CHUNK, MetadataLogError, encode_batch, iter_batches
from storage.errors import (
    CompactedObjectsNotFoundError,
    NodeEpochExpiredError,
    ObjectNotPreparedError,
    OffsetNotMatchedError,
    OffsetOutOfRangeError,
    StorageError,
    StreamError,
    StreamFencedError,
    StreamNotClosedError,
    StreamNotFoundError,
    StreamNotOpenedError,
)
from storage.metadata.api import (
    CommitStreamObjectRequest,
    CommitStreamSetObjectRequest,
    NodeIdentity,
    OpeningStream,
    OpenStreamResult,
    S3ObjectMetadata,
    StreamMetadataRecord,
)
from storage.metadata.record_codec import MetadataRecord, from_json, to_json

# ---------------------------------------------------------------------------------------------- API keys

FETCH: Final = 1
API_VERSIONS: Final = 18
CREATE_TOPICS: Final = 19
DELETE_TOPICS: Final = 20
ALTER_CONFIGS: Final = 33
CREATE_PARTITIONS: Final = 37
ELECT_LEADERS: Final = 43
INCREMENTAL_ALTER_CONFIGS: Final = 44
ALTER_PARTITION_REASSIGNMENTS: Final = 45
ALTER_USER_SCRAM_CREDENTIALS: Final = 51
CREATE_ACLS: Final = 30
DELETE_ACLS: Final = 31
ALTER_CLIENT_QUOTAS: Final = 49
VOTE: Final = 52
BEGIN_QUORUM_EPOCH: Final = 53
END_QUORUM_EPOCH: Final = 54
DESCRIBE_QUORUM: Final = 55
FETCH_SNAPSHOT: Final = 59
BROKER_REGISTRATION: Final = 62
BROKER_HEARTBEAT: Final = 63
UNREGISTER_BROKER: Final = 64
DESCRIBE_CLUSTER: Final = 60
ALLOCATE_PRODUCER_IDS: Final = 67
SASL_HANDSHAKE: Final = 17
SASL_AUTHENTICATE: Final = 36

METADATA_TOPIC: Final = "__cluster_metadata"
METADATA_PARTITION: Final = 0

KAFKA_API_VERSIONS: Final[dict[int, tuple[int, int]]] = {
    FETCH: (12, 12),
    API_VERSIONS: (0, 3),
    CREATE_TOPICS: (2, 7),
    DELETE_TOPICS: (1, 6),
    ALTER_CONFIGS: (0, 2),
    CREATE_PARTITIONS: (0, 3),
    ELECT_LEADERS: (0, 2),
    INCREMENTAL_ALTER_CONFIGS: (0, 1),
    ALTER_PARTITION_REASSIGNMENTS: (0, 0),
    ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
    CREATE_ACLS: (1, 3),
    DELETE_ACLS: (1, 3),
    ALTER_CLIENT_QUOTAS: (0, 1),
    VOTE: (2, 2),
    BEGIN_QUORUM_EPOCH: (1, 1),
    END_QUORUM_EPOCH: (1, 1),
    DESCRIBE_QUORUM: (0, 2),
    FETCH_SNAPSHOT: (1, 1),
    BROKER_REGISTRATION: (0, 4),
    BROKER_HEARTBEAT: (0, 1),
    UNREGISTER_BROKER: (0, 0),
    DESCRIBE_CLUSTER: (0, 1),
    ALLOCATE_PRODUCER_IDS: (0, 0),
    SASL_HANDSHAKE: (1, 1),
    SASL_AUTHENTICATE: (0, 2),
}
"""(min, max) version of every Kafka-protocol RPC the CONTROLLER listener serves."""

STREAM_API_BASE: Final = 10000
STREAM_API_VERSION: Final = 0

# ------------------------------------------------------------------------------------------------ errors


class RpcError(enum.IntEnum):
    """Error codes of Fjord's own RPCs: Kafka's numbers where Kafka has the error, 1000+ for storage errors."""

    NONE = 0
    UNKNOWN = -1
    INVALID_REQUEST = 42
    NOT_CONTROLLER = 41
    STALE_BROKER_EPOCH = 77
    BROKER_ID_NOT_REGISTERED = 102
    STORAGE_ERROR = 1000
    STREAM_ERROR = 1001
    STREAM_NOT_FOUND = 1002
    STREAM_FENCED = 1003
    STREAM_NOT_CLOSED = 1004
    STREAM_NOT_OPENED = 1005
    NODE_EPOCH_EXPIRED = 1006
    NODE_FENCED = 1007
    OFFSET_NOT_MATCHED = 1008
    OFFSET_OUT_OF_RANGE = 1009
    OBJECT_NOT_PREPARED = 1010
    COMPACTED_OBJECTS_NOT_FOUND = 1011


# Most specific first: the first matching class decides the code.
_ERROR_CODES: Final[tuple[tuple[type[StorageError], RpcError], ...]] = (
    (NotControllerError, RpcError.NOT_CONTROLLER),
    (NodeFencedError, RpcError.NODE_FENCED),
    (NodeEpochExpiredError, RpcError.NODE_EPOCH_EXPIRED),
    (StreamNotFoundError, RpcError.STREAM_NOT_FOUND),
    (StreamFencedError, RpcError.STREAM_FENCED),
    (StreamNotClosedError, RpcError.STREAM_NOT_CLOSED),
    (StreamNotOpenedError, RpcError.STREAM_NOT_OPENED),
    (OffsetNotMatchedError, RpcError.OFFSET_NOT_MATCHED),
    (OffsetOutOfRangeError, RpcError.OFFSET_OUT_OF_RANGE),
    (ObjectNotPreparedError, RpcError.OBJECT_NOT_PREPARED),
    (CompactedObjectsNotFoundError, RpcError.COMPACTED_OBJECTS_NOT_FOUND),
    (StreamError, RpcError.STREAM_ERROR),
    (StorageError, RpcError.STORAGE_ERROR),
)


def error_code_for(exc: BaseException) -> RpcError:
    for cls, code in _ERROR_CODES:
        if isinstance(exc, cls):
            return code
    return RpcError.UNKNOWN


def raise_for_error(code: int, message: str | None, leader_id: int, stream_id: int = -1) -> None:
    """Raises the storage error that ``code`` stands for (nothing for NONE); ``stream_id`` names the stream of a
    STREAM_NOT_FOUND when the request had one."""
    if code == RpcError.NONE:
        return
    text = message or f"controller error {code}"
    try:
        error = RpcError(code)
    except ValueError:
        raise StorageError(f"unknown controller error code {code}: {text}") from None
    if error is RpcError.NOT_CONTROLLER:
        raise NotControllerError(text, leader_id if leader_id >= 0 else None)
    if error is RpcError.STREAM_NOT_FOUND:
        exc = StreamNotFoundError(stream_id)
        exc.args = (text,)
        raise exc
    for cls, mapped in _ERROR_CODES:
        if mapped is error and cls is not NotControllerError and cls is not StreamNotFoundError:
            raise cls(text)
    raise StorageError(text)


# ----------------------------------------------------------------------------------------- own messages


@dataclass(frozen=True, slots=True)
class StreamRequest:
    """Base of Fjord's own requests: ``API_KEY`` and the type of the result the response carries."""

    API_KEY: ClassVar[int]
    RESULT: ClassVar[Any]
    MUTATES: ClassVar[bool] = True

    node: NodeIdentity


@dataclass(frozen=True, slots=True)
class CreateStream(StreamRequest):
    API_KEY: ClassVar[int] = STREAM_API_BASE + 0
    RESULT: ClassVar[Any] = int
    tags: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class OpenStream(StreamRequest):
    API_KEY: ClassVar[int] = STREAM_API_BASE + 1
    RESULT: ClassVar[Any] = OpenStreamResult
    stream_id: int = -1
    epoch: int = -1


@dataclass(frozen=True, slots=True)
class CloseStream(StreamRequest):
    API_KEY: ClassVar[int] = STREAM_API_BASE + 2
    RESULT: ClassVar[Any] = None
    stream_id: int = -1
    epoch: int = -1


@dataclass(frozen=True, slots=True)
class TrimStream(StreamRequest):
    API_KEY: ClassVar[int] = STREAM_API_BASE + 3
    RESULT: ClassVar[Any] = None
    stream_id: int = -1
    epoch: int = -1
    new_start_offset: int = 0


@dataclass(frozen=True, slots=True)
class DeleteStream(StreamRequest):
    API_KEY: ClassVar[int] = STREAM_API_BASE + 4
    RESULT: ClassVar[Any] = None
    stream_id: int = -1
    epoch: int = -1


@dataclass(frozen=True, slots=True)
class GetStreams(StreamRequest):
    API_KEY: ClassVar[int] = STREAM_API_BASE + 5
    RESULT: ClassVar[Any] = tuple[StreamMetadataRecord, ...]
    MUTATES: ClassVar[bool] = False
    stream_ids: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class GetOpeningStreams(StreamRequest):
    API_KEY: ClassVar[int] = STREAM_API_BASE + 6
    RESULT: ClassVar[Any] = tuple[OpeningStream, ...]
    MUTATES: ClassVar[bool] = False


@dataclass(frozen=True, slots=True)
class PrepareObjects(StreamRequest):
    API_KEY: ClassVar[int] = STREAM_API_BASE + 7
    RESULT: ClassVar[Any] = int
    count: int = 1
    ttl_ms: int = 60_000


@dataclass(frozen=True, slots=True)
class CommitStreamSetObject(StreamRequest):
    """``node`` must equal ``request.node`` (checked): fencing looks at the former."""

    API_KEY: ClassVar[int] = STREAM_API_BASE + 8
    RESULT: ClassVar[Any] = None
    request: CommitStreamSetObjectRequest | None = None


@dataclass(frozen=True, slots=True)
class CommitStreamObject(StreamRequest):
    API_KEY: ClassVar[int] = STREAM_API_BASE + 9
    RESULT: ClassVar[Any] = None
    request: CommitStreamObjectRequest | None = None


@dataclass(frozen=True, slots=True)
class GetObjects(StreamRequest):
    API_KEY: ClassVar[int] = STREAM_API_BASE + 10
    RESULT: ClassVar[Any] = tuple[S3ObjectMetadata, ...]
    MUTATES: ClassVar[bool] = False
    stream_id: int = -1
    start_offset: int = 0
    end_offset: int = -1
    limit: int = 1000


@dataclass(frozen=True, slots=True)
class GetStreamSetObjects(StreamRequest):
    API_KEY: ClassVar[int] = STREAM_API_BASE + 11
    RESULT: ClassVar[Any] = tuple[S3ObjectMetadata, ...]
    MUTATES: ClassVar[bool] = False
    node_id: int = -1


@dataclass(frozen=True, slots=True)
class GetStreamObjects(StreamRequest):
    API_KEY: ClassVar[int] = STREAM_API_BASE + 12
    RESULT: ClassVar[Any] = tuple[S3ObjectMetadata, ...]
    MUTATES: ClassVar[bool] = False
    stream_id: int = -1


@dataclass(frozen=True, slots=True)
class SweepObjects(StreamRequest):
    API_KEY: ClassVar[int] = STREAM_API_BASE + 13
    RESULT: ClassVar[Any] = tuple[int, ...]
    now_ms: int = 0


@dataclass(frozen=True, slots=True)
class RemoveObjects(StreamRequest):
    API_KEY: ClassVar[int] = STREAM_API_BASE + 14
    RESULT: ClassVar[Any] = None
    object_ids: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class GetKV(StreamRequest):
    API_KEY: ClassVar[int] = STREAM_API_BASE + 15
    RESULT: ClassVar[Any] = bytes | None
    MUTATES: ClassVar[bool] = False
    key: str = ""


@dataclass(frozen=True, slots=True)
class PutKV(StreamRequest):
    API_KEY: ClassVar[int] = STREAM_API_BASE + 16
    RESULT: ClassVar[Any] = None
    key: str = ""
    value: bytes = b""


@dataclass(frozen=True, slots=True)
class DeleteKV(StreamRequest):
    API_KEY: ClassVar[int] = STREAM_API_BASE + 17
    RESULT: ClassVar[Any] = None
    key: str = ""


@dataclass(frozen=True, slots=True)
class MetadataDump:
    """One voter's applied metadata state: ``records`` rebuild it (:func:`decode_metadata_records`)."""

    node_id: int
    leader_id: int  # -1: unknown
    epoch: int
    high_watermark: int
    offset: int  # the last applied metadata log offset (-1: empty)
    records: bytes


@dataclass(frozen=True, slots=True)
class DescribeMetadata(StreamRequest):
    API_KEY: ClassVar[int] = STREAM_API_BASE + 18
    RESULT: ClassVar[Any] = MetadataDump
    MUTATES: ClassVar[bool] = False


@dataclass(frozen=True, slots=True)
class CompleteWALFailover(StreamRequest):
    """``node`` (the assigned target) finished replaying the WAL of broker ``failed_node_id``'s incarnation
    ``failed_node_epoch`` (controller.wal_failover)."""

    API_KEY: ClassVar[int] = STREAM_API_BASE + 19
    RESULT: ClassVar[Any] = None
    failed_node_id: int = -1
    failed_node_epoch: int = -1


@dataclass(frozen=True, slots=True)
class ReportBrokerLoad(StreamRequest):
    """``node`` (a broker) reports its partitions' traffic (bytes/s) over its last reporting interval."""

    API_KEY: ClassVar[int] = STREAM_API_BASE + 20
    RESULT: ClassVar[Any] = None
    MUTATES: ClassVar[bool] = False  # kept in memory only; a report of a superseded registration is ignored
    partitions: tuple[PartitionLoad, ...] = ()
    #: the broker's reporting interval: the controller judges the report's age by it (0: unknown, its own value)
    interval_ms: int = 0


@dataclass(frozen=True, slots=True)
class BrokerLoadReport:
    """A broker's latest report as the active controller holds it, and how old it is."""

    node_id: int = -1
    age_s: float = 0.0
    partitions: tuple[PartitionLoad, ...] = ()


@dataclass(frozen=True, slots=True)
class DescribeBrokerLoad(StreamRequest):
    API_KEY: ClassVar[int] = STREAM_API_BASE + 21
    RESULT: ClassVar[Any] = tuple[BrokerLoadReport, ...]
    MUTATES: ClassVar[bool] = False


def encode_metadata_records(records: Sequence[MetadataRecord]) -> bytes:
    """Metadata records as ``metadata.log`` batch frames (CRC'd), in chunks; one Raft entry, a snapshot or a
    MetadataDump all carry records this way."""
    return b"".join(
        encode_batch(start, records[start : start + SNAPSHOT_CHUNK]) for start in range(0, len(records), SNAPSHOT_CHUNK)
    )


def decode_metadata_records(data: bytes, source: str) -> list[MetadataRecord]:
    """Inverse of :func:`encode_metadata_records`; ``source`` names the data in errors (MetadataLogError)."""
    records: list[MetadataRecord] = []
    intact = 0
    for position, batch in iter_batches(data, source):
        records.extend(batch.records)
        intact = position
    if intact != len(data):
        raise MetadataLogError(f"{source}: {len(data) - intact} bytes after the last intact batch")
    return records


STREAM_REQUESTS: Final[dict[int, type[StreamRequest]]] = {
    cls.API_KEY: cls
    for cls in (
        CreateStream,
        OpenStream,
        CloseStream,
        TrimStream,
        DeleteStream,
        GetStreams,
        GetOpeningStreams,
        PrepareObjects,
        CommitStreamSetObject,
        CommitStreamObject,
        GetObjects,
        GetStreamSetObjects,
        GetStreamObjects,
        SweepObjects,
        RemoveObjects,
        GetKV,
        PutKV,
        DeleteKV,
        DescribeMetadata,
        CompleteWALFailover,
        ReportBrokerLoad,
        DescribeBrokerLoad,
    )
}


def is_stream_api(api_key: int) -> bool:
    return api_key in STREAM_REQUESTS


@dataclass(frozen=True, slots=True)
class StreamResponse:
    error_code: int
    error_message: str | None
    leader_id: int
    result: Any = None


# ------------------------------------------------------------------------------------------------- codec


class StreamCodecError(ValueError):
    """A Fjord RPC frame does not decode; the message says which API and what is wrong."""


_PREFIX = struct.Struct(">hhi")
_CLIENT_ID_LENGTH = struct.Struct(">h")
_CORRELATION = struct.Struct(">i")
_LENGTH = struct.Struct(">i")


def encode_stream_request(request: StreamRequest, correlation_id: int, client_id: str | None = "fjord") -> bytes:
    """A length-prefixed request frame."""
    client = client_id.encode() if client_id is not None else None
    header = _PREFIX.pack(request.API_KEY, STREAM_API_VERSION, correlation_id) + _CLIENT_ID_LENGTH.pack(
        -1 if client is None else len(client)
    ) + (client or b"")
    body = json.dumps(to_json(request), separators=(",", ":")).encode()
    return _LENGTH.pack(len(header) + len(body)) + header + body


def decode_stream_request(frame: bytes) -> tuple[int, StreamRequest]:
    """(correlation id, request) of a frame without its length prefix."""
    if len(frame) < _PREFIX.size + _CLIENT_ID_LENGTH.size:
        raise StreamCodecError(f"Fjord RPC frame of {len(frame)} bytes is shorter than its header")
    api_key, version, correlation_id = _PREFIX.unpack_from(frame, 0)
    cls = STREAM_REQUESTS.get(api_key)
    if cls is None:
        raise StreamCodecError(f"unknown Fjord RPC api key {api_key}")
    if version > STREAM_API_VERSION:
        raise StreamCodecError(f"{cls.__name__} v{version} is newer than this node's v{STREAM_API_VERSION}")
    (client_length,) = _CLIENT_ID_LENGTH.unpack_from(frame, _PREFIX.size)
    start = _PREFIX.size + _CLIENT_ID_LENGTH.size + max(client_length, 0)
    try:
        body = json.loads(frame[start:])
        request = from_json(cls, body)
    except (ValueError, TypeError, KeyError, IndexError) as exc:
        raise StreamCodecError(f"{cls.__name__} (correlation id {correlation_id}) is malformed: {exc}") from None
    return correlation_id, typing.cast(StreamRequest, request)


def encode_stream_response(correlation_id: int, response: StreamResponse) -> bytes:
    """A length-prefixed response frame."""
    body = json.dumps(
        [response.error_code, response.error_message, response.leader_id, _encode_result(response.result)],
        separators=(",", ":"),
    ).encode()
    return _LENGTH.pack(_CORRELATION.size + len(body)) + _CORRELATION.pack(correlation_id) + body


def decode_stream_response(request_cls: type[StreamRequest], frame: bytes) -> tuple[int, StreamResponse]:
    """(correlation id, response) of a frame without its length prefix; the result typed by ``request_cls``."""
    if len(frame) < _CORRELATION.size:
        raise StreamCodecError(f"{request_cls.__name__} response of {len(frame)} bytes has no correlation id")
    (correlation_id,) = _CORRELATION.unpack_from(frame, 0)
    try:
        code, message, leader_id, raw = json.loads(frame[_CORRELATION.size :])
        result = None if raw is None or request_cls.RESULT is None else from_json(request_cls.RESULT, raw)
    except (ValueError, TypeError, KeyError, IndexError) as exc:
        raise StreamCodecError(f"{request_cls.__name__} response is malformed: {exc}") from None
    return correlation_id, StreamResponse(int(code), message, int(leader_id), result)


def _encode_result(result: Any) -> Any:
    if isinstance(result, list):
        return [to_json(item) for item in result]
    return None if result is None else to_json(result)


def api_key_of(frame: bytes) -> int:
    """The api key of a request frame (without length prefix); raises StreamCodecError when too short."""
    if len(frame) < 2:
        raise StreamCodecError(f"request frame of {len(frame)} bytes has no api key")
    return int(struct.unpack_from(">h", frame, 0)[0])


__all__ = [
    "KAFKA_API_VERSIONS",
    "METADATA_PARTITION",
    "METADATA_TOPIC",
    "STREAM_API_BASE",
    "STREAM_API_VERSION",
    "STREAM_REQUESTS",
    "BrokerLoadReport",
    "CloseStream",
    "CommitStreamObject",
    "CommitStreamSetObject",
    "CreateStream",
    "DeleteKV",
    "DeleteStream",
    "DescribeBrokerLoad",
    "DescribeMetadata",
    "GetKV",
    "GetObjects",
    "GetOpeningStreams",
    "GetStreamObjects",
    "GetStreamSetObjects",
    "GetStreams",
    "MetadataDump",
    "NodeFencedError",
    "NotControllerError",
    "OpenStream",
    "PrepareObjects",
    "PutKV",
    "RemoveObjects",
    "ReportBrokerLoad",
    "RpcError",
    "StreamCodecError",
    "StreamRequest",
    "StreamResponse",
    "SweepObjects",
    "TrimStream",
    "api_key_of",
    "decode_metadata_records",
    "decode_stream_request",
    "decode_stream_response",
    "encode_metadata_records",
    "encode_stream_request",
    "encode_stream_response",
    "error_code_for",
    "is_stream_api",
    "raise_for_error",
]
