"""Raft messages on the wire: `raft.messages` <-> the KRaft kio entities of the metadata partition.

The Raft core's messages drop the topic/partition nesting (the quorum replicates exactly one partition); here it
comes back as ``__cluster_metadata``-0, so the frames are the ones a KRaft peer would send. Log entries travel as
Kafka v2 record batches: each run of entries of one epoch and kind is one batch whose partition leader epoch is
that epoch, one record per entry (value = the entry's bytes); LEADER_CHANGE and VOTERS entries are control batches
whose record key is Kafka's control-record key for LeaderChange (version 0, type 2) or KRaftVoters (type 6).

Correlation ids are the Raft core's own (a response echoes its request's), carried in the Kafka header.
"""

from __future__ import annotations

import struct
import time
import uuid
from collections.abc import Mapping
from typing import Any, Final

from kio.schema.errors import ErrorCode

from metadata.image import MetadataImage
from metadata.rpc.kafka_apis import (
    BEGIN_QUORUM_EPOCH,
    DESCRIBE_QUORUM,
    END_QUORUM_EPOCH,
    FETCH,
    FETCH_SNAPSHOT,
    KAFKA_API_VERSIONS,
    METADATA_PARTITION,
    METADATA_TOPIC,
    VOTE,
)
from raft.log import EntryKind, LogEntry, SnapshotId
from raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    DescribeQuorumResponse,
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
    ReplicaState,
    VoteRequest,
    VoteResponse,
)
from wire import codec, schema
from wire.record_batch import Record, build_batch, decode_records, iter_batches

RAFT_API_KEYS: Final = frozenset({VOTE, BEGIN_QUORUM_EPOCH, END_QUORUM_EPOCH, FETCH, FETCH_SNAPSHOT})
"""The RPCs whose requests go to the Raft core (DescribeQuorum is answered by the server from the driver)."""

_CONTROL_KEYS: Final = {EntryKind.LEADER_CHANGE: struct.pack(">hh", 0, 2), EntryKind.VOTERS: struct.pack(">hh", 0, 6)}
_NO_DIRECTORY: Final = uuid.UUID(int=0)  # Kafka's Uuid.ZERO_UUID: a replica whose directory id is not known
_CONTROL_KINDS: Final = {key: kind for kind, key in _CONTROL_KEYS.items()}


class RaftCodecError(ValueError):
    """A Raft frame does not describe the metadata partition (or is otherwise unusable)."""


class OtherPartitionError(RaftCodecError):
    """A Raft request that does not name exactly ``__cluster_metadata``-0: a well-formed request Kafka answers with
    an error (:func:`other_partition_refusal`), not a reason to close the connection."""


def request_version(api_key: int) -> int:
    """The version this node sends: the highest it serves."""
    return KAFKA_API_VERSIONS[api_key][1]


# ------------------------------------------------------------------------------------------ log entries


def encode_entries(entries: tuple[LogEntry, ...] | list[LogEntry]) -> bytes:
    """Kafka record batches holding ``entries`` (consecutive offsets), one batch per run of epoch and kind."""
    out: list[bytes] = []
    run: list[LogEntry] = []

    def flush() -> None:
        if not run:
            return
        key = _CONTROL_KEYS.get(run[0].kind)
        control = key is not None
        out.append(
            build_batch(
                [Record(key, e.data, timestamp=0) for e in run],
                base_offset=run[0].offset,
                partition_leader_epoch=run[0].epoch,
                is_control=control,
            )
        )
        run.clear()

    for entry in entries:
        if run and (entry.epoch != run[0].epoch or entry.kind is not run[0].kind):
            flush()
        run.append(entry)
    flush()
    return b"".join(out)


def decode_entries(records: bytes | None) -> tuple[LogEntry, ...]:
    if not records:
        return ()
    out: list[LogEntry] = []
    for header, batch in iter_batches(records):
        for record in decode_records(batch):
            kind = _control_kind(record.key) if header.is_control else EntryKind.DATA
            out.append(LogEntry(record.offset, header.partition_leader_epoch, record.value or b"", kind))
    return tuple(out)


def _control_kind(key: bytes | None) -> EntryKind:
    """The entry kind a control record's key names (a KRaft peer's other control types are an error)."""
    kind = _CONTROL_KINDS.get(bytes(key or b""))
    if kind is None:
        raise RaftCodecError(
            f"control record with key {bytes(key or b'').hex()} is neither LeaderChange nor KRaftVoters"
        )
    return kind


# ---------------------------------------------------------------------------------------------- helpers


def _one_partition(entity: Any, topics_field: str, what: str) -> Any:
    """The single metadata partition entry of a request/response, or OtherPartitionError."""
    topics = getattr(entity, topics_field)
    if len(topics) != 1 or len(topics[0].partitions) != 1:
        raise OtherPartitionError(f"{what} must name exactly one partition ({METADATA_TOPIC}-{METADATA_PARTITION})")
    topic = topics[0]
    name = getattr(topic, "topic_name", None) or getattr(topic, "topic", None) or getattr(topic, "name", None)
    partition = topic.partitions[0]
    index = next(getattr(partition, f) for f in ("partition_index", "partition", "index") if hasattr(partition, f))
    if name != METADATA_TOPIC or index != METADATA_PARTITION:
        raise OtherPartitionError(f"{what} is for {name!r}-{index}, not {METADATA_TOPIC}-{METADATA_PARTITION}")
    return partition


def other_partition_refusal(api_key: int, entity: Any, cluster_id: str) -> Any:
    """Kafka's answer (its KafkaRaftClient's) to a Raft request that does not name ``__cluster_metadata``-0, in
    the version this node serves: INCONSISTENT_CLUSTER_ID if it names another cluster (checked first, as there),
    else INVALID_REQUEST, both top-level; a FetchSnapshot of one other partition gets UNKNOWN_TOPIC_OR_PARTITION
    on that partition. Nothing reaches the Raft core."""
    cls = _response_cls(api_key)
    if entity.cluster_id is not None and entity.cluster_id != cluster_id:
        return schema.build(cls, error_code=ErrorCode.inconsistent_cluster_id)
    if api_key == FETCH_SNAPSHOT and len(entity.topics) == 1 and len(entity.topics[0].partitions) == 1:
        topic = entity.topics[0]
        part = _partition(
            cls, "topics", index=topic.partitions[0].partition, error_code=ErrorCode.unknown_topic_or_partition,
            current_leader=_leader(schema.field_entity(schema.field_entity(cls, "topics"), "partitions"),
                                   "current_leader", LeaderIdAndEpoch(-1, -1)),
        )
        topic_entry = schema.build_nested(cls, "topics", name=topic.name, partitions=(part,))
        return schema.build(cls, topics=(topic_entry,))
    return schema.build(cls, error_code=ErrorCode.invalid_request)


def _request_cls(api_key: int) -> type[Any]:
    return codec.request_class(api_key, request_version(api_key))


def _response_cls(api_key: int) -> type[Any]:
    return codec.response_class(api_key, request_version(api_key))


def _topics(cls: type[Any], field: str, name_field: str, partition: Any) -> tuple[Any, ...]:
    return (schema.build_nested(cls, field, **{name_field: METADATA_TOPIC, "partitions": (partition,)}),)


def _partition(cls: type[Any], field: str, **values: object) -> Any:
    topic_cls = schema.field_entity(cls, field)
    return schema.build_nested(topic_cls, "partitions", **values)


def _leader(cls: type[Any], field: str, leader: LeaderIdAndEpoch) -> Any:
    return schema.build_nested(cls, field, leader_id=leader.leader_id, leader_epoch=leader.leader_epoch)


# ---------------------------------------------------------------------------------------- raft -> kio


def request_to_kio(message: RaftRequest) -> tuple[int, Any]:
    """(api key, kio request entity) for a Raft request (DescribeQuorum requests are not sent between voters)."""
    match message:
        case VoteRequest():
            cls = _request_cls(VOTE)
            part = _partition(
                cls,
                "topics",
                partition_index=METADATA_PARTITION,
                replica_epoch=message.replica_epoch,
                replica_id=message.replica_id,
                last_offset_epoch=message.last_offset_epoch,
                last_offset=message.last_offset,
                pre_vote=message.pre_vote,
            )
            return VOTE, schema.build(
                cls, cluster_id=message.cluster_id, voter_id=message.voter_id,
                topics=_topics(cls, "topics", "topic_name", part),
            )
        case BeginQuorumEpochRequest():
            cls = _request_cls(BEGIN_QUORUM_EPOCH)
            part = _partition(
                cls, "topics", partition_index=METADATA_PARTITION, leader_id=message.leader_id,
                leader_epoch=message.leader_epoch,
            )
            return BEGIN_QUORUM_EPOCH, schema.build(
                cls, cluster_id=message.cluster_id, voter_id=message.voter_id,
                topics=_topics(cls, "topics", "topic_name", part),
            )
        case EndQuorumEpochRequest():
            cls = _request_cls(END_QUORUM_EPOCH)
            partition_cls = schema.field_entity(schema.field_entity(cls, "topics"), "partitions")
            candidates = tuple(
                schema.build_nested(partition_cls, "preferred_candidates", candidate_id=c)
                for c in message.preferred_successors
            )
            part = _partition(
                cls, "topics", partition_index=METADATA_PARTITION, leader_id=message.leader_id,
                leader_epoch=message.leader_epoch, preferred_candidates=candidates,
            )
            return END_QUORUM_EPOCH, schema.build(
                cls, cluster_id=message.cluster_id, topics=_topics(cls, "topics", "topic_name", part)
            )
        case FetchRequest():
            cls = _request_cls(FETCH)
            part = _partition(
                cls,
                "topics",
                partition=METADATA_PARTITION,
                current_leader_epoch=message.current_leader_epoch,
                fetch_offset=message.fetch_offset,
                last_fetched_epoch=message.last_fetched_epoch,
                log_start_offset=message.log_start_offset,
                partition_max_bytes=message.max_bytes,
            )
            return FETCH, schema.build(
                cls,
                cluster_id=message.cluster_id,
                replica_id=message.replica_id,
                max_wait=message.max_wait_ms,
                min_bytes=0,
                max_bytes=message.max_bytes,
                session_epoch=-1,
                topics=_topics(cls, "topics", "topic", part),
            )
        case FetchSnapshotRequest():
            cls = _request_cls(FETCH_SNAPSHOT)
            partition_cls = schema.field_entity(schema.field_entity(cls, "topics"), "partitions")
            part = _partition(
                cls,
                "topics",
                partition=METADATA_PARTITION,
                current_leader_epoch=message.current_leader_epoch,
                snapshot_id=schema.build_nested(
                    partition_cls, "snapshot_id", end_offset=message.snapshot_id.end_offset,
                    epoch=message.snapshot_id.epoch,
                ),
                position=message.position,
            )
            return FETCH_SNAPSHOT, schema.build(
                cls, cluster_id=message.cluster_id, replica_id=message.replica_id, max_bytes=message.max_bytes,
                topics=_topics(cls, "topics", "name", part),
            )
    raise TypeError(f"{type(message).__name__} is not sent over the network")


def response_to_kio(message: RaftResponse) -> tuple[int, Any]:
    """(api key, kio response entity) for a Raft response, in the version this node serves."""
    match message:
        case VoteResponse():
            cls = _response_cls(VOTE)
            part = _partition(
                cls, "topics", partition_index=METADATA_PARTITION, error_code=int(message.error_code),
                leader_id=message.leader_id, leader_epoch=message.leader_epoch, vote_granted=message.vote_granted,
            )
            return VOTE, schema.build(cls, topics=_topics(cls, "topics", "topic_name", part))
        case BeginQuorumEpochResponse() | EndQuorumEpochResponse():
            key = BEGIN_QUORUM_EPOCH if isinstance(message, BeginQuorumEpochResponse) else END_QUORUM_EPOCH
            cls = _response_cls(key)
            part = _partition(
                cls, "topics", partition_index=METADATA_PARTITION, error_code=int(message.error_code),
                leader_id=message.leader_id, leader_epoch=message.leader_epoch,
            )
            return key, schema.build(cls, topics=_topics(cls, "topics", "topic_name", part))
        case FetchResponse():
            cls = _response_cls(FETCH)
            partition_cls = schema.field_entity(schema.field_entity(cls, "responses"), "partitions")
            values: dict[str, object] = {
                "partition_index": METADATA_PARTITION,
                "error_code": int(message.error_code),
                "high_watermark": message.high_watermark,
                "last_stable_offset": message.high_watermark,
                "log_start_offset": message.log_start_offset,
                "current_leader": _leader(partition_cls, "current_leader", message.current_leader),
                "records": encode_entries(message.records) if message.records else None,
            }
            if message.diverging_epoch is not None:
                values["diverging_epoch"] = schema.build_nested(
                    partition_cls, "diverging_epoch", epoch=message.diverging_epoch.epoch,
                    end_offset=message.diverging_epoch.end_offset,
                )
            if message.snapshot_id is not None:
                values["snapshot_id"] = schema.build_nested(
                    partition_cls, "snapshot_id", end_offset=message.snapshot_id.end_offset,
                    epoch=message.snapshot_id.epoch,
                )
            part = schema.build(partition_cls, **values)
            return FETCH, schema.build(cls, responses=_topics(cls, "responses", "topic", part))
        case FetchSnapshotResponse():
            cls = _response_cls(FETCH_SNAPSHOT)
            partition_cls = schema.field_entity(schema.field_entity(cls, "topics"), "partitions")
            part = schema.build(
                partition_cls,
                index=METADATA_PARTITION,
                error_code=int(message.error_code),
                snapshot_id=schema.build_nested(
                    partition_cls, "snapshot_id", end_offset=message.snapshot_id.end_offset,
                    epoch=message.snapshot_id.epoch,
                ),
                current_leader=_leader(partition_cls, "current_leader", message.current_leader),
                size=message.size,
                position=message.position,
                unaligned_records=message.unaligned_records,
            )
            return FETCH_SNAPSHOT, schema.build(cls, topics=_topics(cls, "topics", "name", part))
        case DescribeQuorumResponse():
            raise TypeError("DescribeQuorum responses are built with describe_quorum_response")
    raise TypeError(f"{type(message).__name__} is not a Raft response")


def describe_quorum_response(
    response_cls: type[Any],
    answer: DescribeQuorumResponse,
    voters: Mapping[int, tuple[str, int]] | None = None,
    listener_name: str = "",
) -> Any:
    """The kio DescribeQuorum response (any version) for the Raft core's answer; from v2 on, ``voters`` (id →
    address of their ``listener_name`` listener) are its ``nodes``, where clients find the controllers."""
    partition_cls = schema.field_entity(schema.field_entity(response_cls, "topics"), "partitions")

    def replicas(field: str, states: tuple[ReplicaState, ...]) -> tuple[Any, ...]:
        return tuple(
            schema.build_nested(
                partition_cls,
                field,
                replica_id=s.replica_id,
                replica_directory_id=s.directory_id or _NO_DIRECTORY,
                log_end_offset=s.log_end_offset,
                last_fetch_timestamp=s.last_fetch_timestamp,
                last_caught_up_timestamp=s.last_caught_up_timestamp,
            )
            for s in states
        )

    error = ErrorCode(int(answer.error_code))
    part = schema.build(
        partition_cls,
        partition_index=METADATA_PARTITION,
        error_code=error,
        leader_id=answer.leader_id,
        leader_epoch=answer.leader_epoch,
        high_watermark=answer.high_watermark,
        current_voters=replicas("current_voters", answer.current_voters),
        observers=replicas("observers", answer.observers),
    )
    topics = _topics(response_cls, "topics", "topic_name", part)
    if voters is None or not schema.has_field(response_cls, "nodes"):
        return schema.build(response_cls, topics=topics)
    node_cls = schema.field_entity(response_cls, "nodes")
    nodes = tuple(
        schema.build(
            node_cls,
            node_id=voter_id,
            listeners=(schema.build_nested(node_cls, "listeners", name=listener_name, host=host, port=port),),
        )
        for voter_id, (host, port) in sorted(voters.items())
    )
    return schema.build(response_cls, topics=topics, nodes=nodes)


def describe_quorum_request(version: int = 2) -> Any:
    """A client's DescribeQuorum of ``__cluster_metadata``-0 (v2 is the first whose answer names the voters'
    listeners)."""
    cls = codec.request_class(DESCRIBE_QUORUM, version)
    topic_cls = schema.field_entity(cls, "topics")
    partition = schema.build_nested(topic_cls, "partitions", partition_index=METADATA_PARTITION)
    return schema.build(cls, topics=(schema.build(topic_cls, topic_name=METADATA_TOPIC, partitions=(partition,)),))


def described_voters(response: Any) -> dict[int, tuple[str, int]]:
    """Each voter's listener (id → host, port) a DescribeQuorum v2 answer names in ``nodes``: where the controllers
    are (empty before v2)."""
    return {int(node.node_id): (str(node.listeners[0].host), int(node.listeners[0].port))
            for node in getattr(response, "nodes", ()) if node.listeners}


def describe_quorum_refusal(response_cls: type[Any], request: Any) -> Any | None:
    """Kafka's answer to a DescribeQuorum that does not name exactly ``__cluster_metadata``-0 (its
    RaftUtil.hasValidTopicPartition): UNKNOWN_TOPIC_OR_PARTITION on every partition it names, as
    DescribeQuorumRequest.getPartitionLevelErrorResponse builds it; None for a request that names it."""
    topics = request.topics
    if (
        len(topics) == 1
        and topics[0].topic_name == METADATA_TOPIC
        and len(topics[0].partitions) == 1
        and topics[0].partitions[0].partition_index == METADATA_PARTITION
    ):
        return None
    topic_cls = schema.field_entity(response_cls, "topics")
    return schema.build(
        response_cls,
        topics=tuple(
            schema.build(
                topic_cls,
                topic_name=topic.topic_name,
                partitions=tuple(
                    schema.build_nested(
                        topic_cls,
                        "partitions",
                        partition_index=partition.partition_index,
                        error_code=ErrorCode.unknown_topic_or_partition,
                        error_message="This server does not host this topic-partition.",
                    )
                    for partition in topic.partitions
                ),
            )
            for topic in topics
        ),
    )


# ---------------------------------------------------------------------------------------- kio -> raft


def request_from_kio(api_key: int, entity: Any, correlation_id: int) -> tuple[int, RaftRequest]:
    """(sender, Raft request) of a decoded kio request; the sender is the replica the request names."""
    if api_key == VOTE:
        p = _one_partition(entity, "topics", "Vote")
        return p.replica_id, VoteRequest(
            entity.cluster_id or "", p.replica_epoch, p.replica_id, p.last_offset_epoch, p.last_offset,
            bool(p.pre_vote), entity.voter_id, correlation_id,
        )
    if api_key == BEGIN_QUORUM_EPOCH:
        p = _one_partition(entity, "topics", "BeginQuorumEpoch")
        return p.leader_id, BeginQuorumEpochRequest(
            entity.cluster_id or "", p.leader_id, p.leader_epoch, entity.voter_id, correlation_id
        )
    if api_key == END_QUORUM_EPOCH:
        p = _one_partition(entity, "topics", "EndQuorumEpoch")
        successors = tuple(int(c.candidate_id) for c in getattr(p, "preferred_candidates", ()))
        if not successors:
            successors = tuple(int(c) for c in getattr(p, "preferred_successors", ()))
        return p.leader_id, EndQuorumEpochRequest(
            entity.cluster_id or "", p.leader_id, p.leader_epoch, successors, correlation_id
        )
    if api_key == FETCH:
        p = _one_partition(entity, "topics", "Fetch")
        return entity.replica_id, FetchRequest(
            entity.cluster_id or "",
            entity.replica_id,
            schema.millis(entity.max_wait),
            p.current_leader_epoch,
            p.fetch_offset,
            p.last_fetched_epoch,
            p.log_start_offset,
            p.partition_max_bytes,
            correlation_id,
        )
    if api_key == FETCH_SNAPSHOT:
        p = _one_partition(entity, "topics", "FetchSnapshot")
        return entity.replica_id, FetchSnapshotRequest(
            entity.cluster_id or "",
            entity.replica_id,
            entity.max_bytes,
            p.current_leader_epoch,
            SnapshotId(p.snapshot_id.end_offset, p.snapshot_id.epoch),
            p.position,
            correlation_id,
        )
    raise RaftCodecError(f"api key {api_key} is not a Raft request")


def response_from_kio(api_key: int, entity: Any, correlation_id: int) -> RaftResponse:
    """The Raft response of a decoded kio response (top-level errors become the partition's error)."""
    top = _errors(entity.error_code) if getattr(entity, "error_code", 0) else None
    if api_key == VOTE:
        if top is not None:
            return VoteResponse(top, -1, -1, False, correlation_id)
        p = _one_partition(entity, "topics", "Vote response")
        return VoteResponse(_errors(p.error_code), p.leader_id, p.leader_epoch, bool(p.vote_granted),
                            correlation_id)
    if api_key in (BEGIN_QUORUM_EPOCH, END_QUORUM_EPOCH):
        cls = BeginQuorumEpochResponse if api_key == BEGIN_QUORUM_EPOCH else EndQuorumEpochResponse
        if top is not None:
            return cls(top, -1, -1, correlation_id)
        p = _one_partition(entity, "topics", "QuorumEpoch response")
        return cls(_errors(p.error_code), p.leader_id, p.leader_epoch, correlation_id)
    if api_key == FETCH:
        if top is not None:
            return FetchResponse(top, -1, -1, LeaderIdAndEpoch(-1, -1), correlation_id=correlation_id)
        p = _one_partition(entity, "responses", "Fetch response")
        diverging = p.diverging_epoch
        snapshot = p.snapshot_id
        return FetchResponse(
            _errors(p.error_code),
            p.high_watermark,
            p.log_start_offset,
            LeaderIdAndEpoch(p.current_leader.leader_id, p.current_leader.leader_epoch),
            diverging_epoch=(
                EpochEndOffset(diverging.epoch, diverging.end_offset)
                if diverging is not None and diverging.epoch >= 0 and diverging.end_offset >= 0
                else None
            ),
            snapshot_id=(
                SnapshotId(snapshot.end_offset, snapshot.epoch)
                if snapshot is not None and snapshot.end_offset >= 0 and snapshot.epoch >= 0
                else None
            ),
            records=decode_entries(p.records),
            correlation_id=correlation_id,
        )
    if api_key == FETCH_SNAPSHOT:
        if top is not None:
            return FetchSnapshotResponse(top, SnapshotId(-1, -1), LeaderIdAndEpoch(-1, -1), 0, 0, b"",
                                         correlation_id)
        p = _one_partition(entity, "topics", "FetchSnapshot response")
        return FetchSnapshotResponse(
            _errors(p.error_code),
            SnapshotId(p.snapshot_id.end_offset, p.snapshot_id.epoch),
            LeaderIdAndEpoch(p.current_leader.leader_id, p.current_leader.leader_epoch),
            p.size,
            p.position,
            bytes(p.unaligned_records or b""),
            correlation_id,
        )
    raise RaftCodecError(f"api key {api_key} is not a Raft response")


def _errors(code: Any) -> Errors:
    """A Raft error from a wire code; codes the core does not know become INVALID_REQUEST (it only retries)."""
    try:
        return Errors(int(code))
    except ValueError:
        return Errors.INVALID_REQUEST


def sole_voter_description(node_id: int, image: MetadataImage) -> DescribeQuorumResponse:
    """DescribeQuorum for a node that is its only voter: the leader of its local metadata log, fetched and caught
    up just now, as the Raft core (and Kafka) report a leader."""
    end = image.offset + 1
    now_ms = int(time.time() * 1000)
    me = ReplicaState(node_id, end, now_ms, now_ms)
    return DescribeQuorumResponse(Errors.NONE, node_id, 0, end, (me,), ())
