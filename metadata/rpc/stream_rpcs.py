"""Fjord's own RPCs on the CONTROLLER listener: one request dataclass per call of the storage engine's
``StreamMetadata`` interface (``storage.metadata.api``), so a broker reaches a remote quorum through the same calls it
makes on an embedded one. Their frames are :mod:`metadata.rpc.stream_codec`'s, their error codes
:mod:`metadata.rpc.error_codes`'.

API keys from :data:`STREAM_API_BASE` (10000) on, clear of Kafka's; version 0:

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
10022  PutKVIfAbsent           node, key, value                               bytes (the value kept)
10023  CloseStreams            node, streams (StreamClose...)                 -
10024  CommitStreamSetObjects  node, requests (CommitStreamSetObjectRequest   -
                               ...)
10025  ChangeDelegationToken   node, request (TokenRequest)                   TokenResult
=====  ======================  =============================================  ====================================

ReportBrokerLoad is a broker's per-partition traffic over its last reporting interval, kept in memory by the active
controller for the auto-balancer's load goal (``metadata.broker_load``); DescribeBrokerLoad returns what it keeps
(the metadata shell's ``/balancer`` view). Both need the active controller; neither is a metadata write.

DescribeMetadata is answered by *any* voter from its own applied state (no leadership needed): the whole metadata
state as records (:func:`metadata.log.decode_metadata_records`), with the voter's view of the quorum. Tests compare
voters with it and the metadata shell browses a running cluster with it.

Every request carries the caller's ``node`` (:class:`~storage.metadata.api.NodeIdentity`: node id + node epoch).
The active controller rejects a mutation from a node whose epoch is not its current registration or that is
fenced (``NODE_FENCED``), so a broker that was paused past its session timeout cannot commit anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Final

from metadata.broker_load import PartitionLoad
from metadata.delegation_tokens import TokenRequest, TokenResult
from storage.metadata.api import (
    CommitStreamObjectRequest,
    CommitStreamSetObjectRequest,
    NodeIdentity,
    OpeningStream,
    OpenStreamResult,
    S3ObjectMetadata,
    StreamClose,
    StreamMetadataRecord,
)

STREAM_API_BASE: Final = 10000
STREAM_API_VERSION: Final = 0

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
class CloseStreams(StreamRequest):
    """All of a partition's streams closed (the meta stream trimmed too) in one call and one metadata commit."""

    API_KEY: ClassVar[int] = STREAM_API_BASE + 23
    RESULT: ClassVar[Any] = None
    streams: tuple[StreamClose, ...] = ()


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
class CommitStreamSetObjects(StreamRequest):
    """Many uploads' commits in one metadata append, all or none (``StreamMetadata.commit_stream_set_objects``),
    each naming ``node``. An RPC of its own rather than a trailing field of CommitStreamSetObject: a controller that
    does not know it must refuse it, not commit the first object and drop the rest."""

    API_KEY: ClassVar[int] = STREAM_API_BASE + 24
    RESULT: ClassVar[Any] = None
    requests: tuple[CommitStreamSetObjectRequest, ...] = ()


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
class PutKVIfAbsent(StreamRequest):
    """Writes ``value`` only if ``key`` has none; the result is the value ``key`` holds afterwards."""

    API_KEY: ClassVar[int] = STREAM_API_BASE + 22
    RESULT: ClassVar[Any] = bytes
    key: str = ""
    value: bytes = b""


@dataclass(frozen=True, slots=True)
class DeleteKV(StreamRequest):
    API_KEY: ClassVar[int] = STREAM_API_BASE + 17
    RESULT: ClassVar[Any] = None
    key: str = ""


@dataclass(frozen=True, slots=True)
class MetadataDump:
    """One voter's applied metadata state: ``records`` rebuild it (:func:`metadata.log.decode_metadata_records`)."""

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
    ``failed_node_epoch`` (controller.decisions.wal_failover)."""

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


@dataclass(frozen=True, slots=True)
class ChangeDelegationToken(StreamRequest):
    """A broker passes on a client's Create, Renew or ExpireDelegationToken with the principals it authenticated
    (Kafka forwards it in an Envelope with the client's principal; a broker is trusted with it the same way)."""

    API_KEY: ClassVar[int] = STREAM_API_BASE + 25
    RESULT: ClassVar[Any] = TokenResult
    request: TokenRequest | None = None


STREAM_REQUESTS: Final[dict[int, type[StreamRequest]]] = {
    cls.API_KEY: cls
    for cls in (
        CreateStream,
        OpenStream,
        CloseStream,
        CloseStreams,
        TrimStream,
        DeleteStream,
        GetStreams,
        GetOpeningStreams,
        PrepareObjects,
        CommitStreamSetObject,
        CommitStreamSetObjects,
        CommitStreamObject,
        GetObjects,
        GetStreamSetObjects,
        GetStreamObjects,
        SweepObjects,
        RemoveObjects,
        GetKV,
        PutKV,
        PutKVIfAbsent,
        DeleteKV,
        DescribeMetadata,
        CompleteWALFailover,
        ReportBrokerLoad,
        DescribeBrokerLoad,
        ChangeDelegationToken,
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
