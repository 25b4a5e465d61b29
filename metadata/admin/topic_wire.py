"""Topics and their partitions on the wire, both ways: Kafka entities of CreateTopics (19), DeleteTopics (20),
CreatePartitions (37), ElectLeaders (43) and AlterPartitionReassignments (45) to and from the
``metadata.controller_api`` dataclasses.

A broker's handlers, the CONTROLLER listener and the broker's remote client all speak these APIs and must agree item
for item on what a request asks and what each answer becomes (see :mod:`metadata.admin`), so both directions live
here once. Reading a request also answers the items that are wrong in themselves (a topic named twice,
contradictory fields); those are never sent on.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.constants import uuid_zero

from metadata.admin.config_wire import Outcome
from metadata.controller_api import (
    CreateTopicResult,
    DeleteTopicResult,
    ElectLeaderResult,
    NewTopic,
    PartitionReassignment,
    ReassignmentResult,
)
from metadata.errors import ControllerError
from settings.describe import ConfigEntry, ConfigSource
from wire import codec, schema

# The API keys, here rather than from metadata.rpc.kafka_apis: that package serves this module, not the reverse.
_CREATE_TOPICS = 19
_DELETE_TOPICS = 20
_CREATE_PARTITIONS = 37
_ELECT_LEADERS = 43
_ALTER_PARTITION_REASSIGNMENTS = 45

#: The versions the remote client forwards in (the newest each side of the controller listener serves).
_CREATE_TOPICS_VERSION = 7
_DELETE_TOPICS_VERSION = 6
_CREATE_PARTITIONS_VERSION = 3
_ELECT_LEADERS_VERSION = 2
_ALTER_PARTITION_REASSIGNMENTS_VERSION = 0


# ------------------------------------------------------------------------------------------ CreateTopics (19)


@dataclass(frozen=True, slots=True)
class CreateTopicsAsk:
    """A CreateTopics request read: ``topics`` go to the controller, ``refused`` are answered already, and the
    response lists every name once, in ``order`` (the request's)."""

    topics: tuple[NewTopic, ...]
    refused: Mapping[str, CreateTopicResult]
    order: tuple[str, ...]
    validate_only: bool


def read_create_topics(request: Any, client_id: str | None) -> CreateTopicsAsk:
    counts = Counter(topic.name for topic in request.topics)
    refused: dict[str, CreateTopicResult] = {}
    topics: list[NewTopic] = []
    for topic in request.topics:
        if counts[topic.name] > 1:
            refused[topic.name] = CreateTopicResult(
                topic.name, None, ErrorCode.invalid_request,
                f"Create topics request from client {client_id!r} contains topic {topic.name!r} more than once",
            )
            continue
        nulls = [c.name for c in topic.configs if c.value is None]
        if nulls:
            # Kafka's controller refuses a topic whose config has no value (ReplicationControlManager's
            # computeConfigChanges); dropping the key would create the topic with the default instead.
            refused[topic.name] = CreateTopicResult(
                topic.name, None, ErrorCode.invalid_config,
                f"Null value not supported for topic configs: {','.join(nulls)}",
            )
            continue
        if topic.assignments and (topic.num_partitions != -1 or topic.replication_factor != -1):
            refused[topic.name] = CreateTopicResult(
                topic.name, None, ErrorCode.invalid_request,
                "Both numPartitions or replicationFactor and replicasAssignments were set. Both cannot be used "
                "at the same time.",
            )
            continue
        repeated = _repeated_partition(topic.assignments)
        if repeated is not None:
            # Read into a mapping, the last assignment of the partition would silently win.
            refused[topic.name] = CreateTopicResult(
                topic.name, None, ErrorCode.invalid_replica_assignment,
                f"Found multiple manual partition assignments for partition {repeated}",
            )
            continue
        topics.append(
            NewTopic(
                name=topic.name,
                num_partitions=topic.num_partitions,
                replication_factor=topic.replication_factor,
                assignments={a.partition_index: tuple(a.broker_ids) for a in topic.assignments} or None,
                configs={c.name: c.value for c in topic.configs if c.value is not None},
            )
        )
    order = tuple(dict.fromkeys(topic.name for topic in request.topics))
    return CreateTopicsAsk(tuple(topics), refused, order, bool(request.validate_only))


def _repeated_partition(assignments: Sequence[Any]) -> int | None:
    """The first partition index a CreateTopics topic assigns a second time, in request order (Kafka's check)."""
    seen: set[int] = set()
    for assignment in assignments:
        if assignment.partition_index in seen:
            return int(assignment.partition_index)
        seen.add(assignment.partition_index)
    return None


def create_topics_refused(topics: Sequence[NewTopic], code: ErrorCode, message: str) -> list[CreateTopicResult]:
    """Every topic failed the same way (no controller answered, or asking it raised)."""
    return [CreateTopicResult(t.name, None, code, message) for t in topics]


def _config_entries(result_cls: type[Any], configs: list[ConfigEntry]) -> tuple[Any, ...]:
    return tuple(
        schema.build_nested(
            result_cls,
            "configs",
            name=entry.name,
            value=None if entry.is_sensitive else entry.value,
            read_only=entry.read_only,
            config_source=int(entry.source),
            is_sensitive=entry.is_sensitive,
        )
        for entry in configs
    )


def _create_result(result_cls: type[Any], result: CreateTopicResult, describable: bool) -> Any:
    ok = result.error == ErrorCode.none
    # Kafka's controller answers a topic created for a caller without DESCRIBE_CONFIGS on it with
    # TopicConfigErrorCode TOPIC_AUTHORIZATION_FAILED and none of its settings (the fields' defaults).
    withheld = ok and not describable
    shown = ok and describable
    configs: tuple[Any, ...] | None = () if withheld else None
    if shown and schema.has_field(result_cls, "configs"):
        configs = _config_entries(result_cls, result.configs)
    return schema.build(
        result_cls,
        name=result.name,
        topic_id=result.topic_id or uuid_zero,
        error_code=result.error,
        error_message=result.message,
        topic_config_error_code=ErrorCode.topic_authorization_failed if withheld else ErrorCode.none,
        num_partitions=result.num_partitions if shown else -1,
        replication_factor=result.replication_factor if shown else -1,
        configs=configs,
    )


def create_topics_response(
    response_cls: type[Any],
    ask: CreateTopicsAsk,
    created: Sequence[CreateTopicResult],
    describable: Callable[[str], bool] | None = None,
) -> Any:
    """``describable(name)``: whether the caller may DESCRIBE_CONFIGS the topic, so v5+ may show the settings it
    was created with (None: every topic, as when no authorizer is configured)."""
    result_cls = schema.field_entity(response_cls, "topics")
    results = dict(ask.refused)
    results.update((result.name, result) for result in created)
    return schema.build(
        response_cls,
        throttle_time=0,
        topics=tuple(
            _create_result(result_cls, results[name], describable is None or describable(name)) for name in ask.order
        ),
    )


def create_topics_request(topics: Sequence[NewTopic], validate_only: bool, timeout_ms: int) -> Any:
    cls = codec.request_class(_CREATE_TOPICS, _CREATE_TOPICS_VERSION)
    topic_cls = schema.field_entity(cls, "topics")
    entries = tuple(
        schema.build_nested(
            cls, "topics", name=t.name, num_partitions=t.num_partitions, replication_factor=t.replication_factor,
            assignments=tuple(
                schema.build_nested(topic_cls, "assignments", partition_index=p, broker_ids=tuple(r))
                for p, r in sorted((t.assignments or {}).items())
            ),
            configs=tuple(schema.build_nested(topic_cls, "configs", name=k, value=v) for k, v in t.configs.items()),
        )
        for t in topics
    )
    return schema.build(cls, topics=entries, timeout=timeout_ms, validate_only=validate_only)


def read_create_topics_response(response: Any) -> list[CreateTopicResult]:
    return [
        CreateTopicResult(
            r.name, r.topic_id if r.error_code == ErrorCode.none else None, ErrorCode(int(r.error_code)),
            r.error_message, int(r.num_partitions), int(r.replication_factor),
            [ConfigEntry(c.name, c.value, ConfigSource(int(c.config_source)), bool(c.read_only),
                         bool(c.is_sensitive)) for c in (r.configs or ())],
        )
        for r in response.topics
    ]


# ------------------------------------------------------------------------------------------ DeleteTopics (20)


@dataclass(frozen=True, slots=True)
class DeleteTopicsAsk:
    """A DeleteTopics request read: topics by name and by id, and the entries refused (answered first)."""

    names: tuple[str, ...]
    ids: tuple[uuid.UUID, ...]
    refused: tuple[DeleteTopicResult, ...]


def read_delete_topics(request: Any) -> DeleteTopicsAsk:
    names: list[str] = []
    ids: list[uuid.UUID] = []
    refused: list[DeleteTopicResult] = []
    if hasattr(request, "topics"):  # v6: by name or by id
        for state in request.topics:
            has_id = state.topic_id is not None and state.topic_id != uuid_zero
            if state.name is not None and has_id:
                refused.append(DeleteTopicResult(state.name, state.topic_id, ErrorCode.invalid_request,
                                                 "topic name and topic id cannot both be given"))
            elif has_id:
                ids.append(state.topic_id)
            elif state.name is not None:
                names.append(state.name)
            else:
                refused.append(DeleteTopicResult(None, None, ErrorCode.invalid_request,
                                                 "neither topic name nor topic id given"))
    else:
        names.extend(request.topic_names)
    # A topic named (or identified) twice is refused once, as Kafka's controller does, before the quota charges it
    # twice or the controller is asked to delete it twice.
    duplicate_names = [name for name, count in Counter(names).items() if count > 1]
    duplicate_ids = [topic_id for topic_id, count in Counter(ids).items() if count > 1]
    refused.extend(DeleteTopicResult(name, None, ErrorCode.invalid_request, "Duplicate topic name.")
                   for name in duplicate_names)
    refused.extend(DeleteTopicResult(None, topic_id, ErrorCode.invalid_request, "Duplicate topic id.")
                   for topic_id in duplicate_ids)
    names = [name for name in dict.fromkeys(names) if name not in duplicate_names]
    ids = [topic_id for topic_id in dict.fromkeys(ids) if topic_id not in duplicate_ids]
    return DeleteTopicsAsk(tuple(names), tuple(ids), tuple(refused))


def delete_topics_refused(
    names: Sequence[str], ids: Sequence[uuid.UUID], code: ErrorCode, message: str
) -> list[DeleteTopicResult]:
    return [DeleteTopicResult(n, None, code, message) for n in names] + [
        DeleteTopicResult(None, i, code, message) for i in ids
    ]


def delete_topics_response(response_cls: type[Any], ask: DeleteTopicsAsk, deleted: Sequence[DeleteTopicResult]) -> Any:
    result_cls = schema.field_entity(response_cls, "responses")
    responses = tuple(
        schema.build(result_cls, name=r.name, topic_id=r.topic_id or uuid_zero, error_code=r.error,
                    error_message=r.message)
        for r in (*ask.refused, *deleted)
    )
    return schema.build(response_cls, throttle_time=0, responses=responses)


def delete_topics_request(names: Sequence[str], ids: Sequence[uuid.UUID], timeout_ms: int) -> Any:
    cls = codec.request_class(_DELETE_TOPICS, _DELETE_TOPICS_VERSION)
    entries = tuple(schema.build_nested(cls, "topics", name=n, topic_id=uuid_zero) for n in names) + tuple(
        schema.build_nested(cls, "topics", name=None, topic_id=i) for i in ids
    )
    return schema.build(cls, topics=entries, timeout=timeout_ms)


def read_delete_topics_response(response: Any) -> list[DeleteTopicResult]:
    return [
        DeleteTopicResult(r.name, None if r.topic_id == uuid_zero else r.topic_id, ErrorCode(int(r.error_code)),
                          r.error_message)
        for r in response.responses
    ]


# -------------------------------------------------------------------------------------- CreatePartitions (37)


@dataclass(frozen=True, slots=True)
class NewPartitions:
    """One topic of a CreatePartitions request; ``refused`` is the request-level check's answer (not sent on)."""

    topic: str
    count: int
    assignments: tuple[tuple[int, ...], ...] | None
    refused: Outcome | None = None


@dataclass(frozen=True, slots=True)
class PartitionsAsk:
    topics: tuple[NewPartitions, ...]
    validate_only: bool


def read_create_partitions(request: Any) -> PartitionsAsk:
    counts = Counter(topic.name for topic in request.topics)
    topics = []
    for topic in request.topics:
        assignments = None
        if topic.assignments is not None:
            assignments = tuple(tuple(a.broker_ids) for a in topic.assignments)
        refused: Outcome | None = None
        if counts[topic.name] > 1:
            refused = ErrorCode.invalid_request, f"duplicate topic {topic.name!r} in the request"
        topics.append(NewPartitions(topic.name, topic.count, assignments, refused))
    return PartitionsAsk(tuple(topics), bool(request.validate_only))


def create_partitions_response(response_cls: type[Any], answers: Sequence[tuple[str, ErrorCode, str | None]]) -> Any:
    """``answers``: (topic, code, message) per topic of the request, in its order."""
    return schema.build(response_cls, throttle_time=0, results=tuple(
        schema.build_nested(response_cls, "results", name=topic, error_code=code, error_message=message)
        for topic, code, message in answers
    ))


def create_partitions_request(
    topic: str, count: int, assignments: Sequence[Sequence[int]] | None, validate_only: bool, timeout_ms: int
) -> Any:
    cls = codec.request_class(_CREATE_PARTITIONS, _CREATE_PARTITIONS_VERSION)
    topic_cls = schema.field_entity(cls, "topics")
    entry = schema.build_nested(
        cls, "topics", name=topic, count=count,
        assignments=None if assignments is None else tuple(
            schema.build_nested(topic_cls, "assignments", broker_ids=tuple(a)) for a in assignments
        ),
    )
    return schema.build(cls, topics=(entry,), timeout=timeout_ms, validate_only=validate_only)


def read_create_partitions_response(response: Any) -> Outcome:
    """The answer for the one topic :func:`create_partitions_request` asks about."""
    result = response.results[0]
    return ErrorCode(int(result.error_code)), result.error_message


# ------------------------------------------------------------------------------------------ ElectLeaders (43)


@dataclass(frozen=True, slots=True)
class ElectLeadersAsk:
    """``partitions`` None: every partition of the cluster (Kafka's null ``topic_partitions``)."""

    election_type: int
    partitions: tuple[tuple[str, int], ...] | None


def read_elect_leaders(request: Any) -> ElectLeadersAsk:
    """v0 has no election type: it is a preferred election."""
    election_type = int(getattr(request, "election_type", 0))
    if request.topic_partitions is None:
        return ElectLeadersAsk(election_type, None)
    asked = dict.fromkeys((t.topic, int(p)) for t in request.topic_partitions for p in t.partitions)
    return ElectLeadersAsk(election_type, tuple(asked))


def elect_leaders_refused(ask: ElectLeadersAsk, code: ErrorCode, message: str) -> list[ElectLeaderResult]:
    return [ElectLeaderResult(topic, index, code, message) for topic, index in ask.partitions or ()]


def elect_leaders_response(
    response_cls: type[Any], results: Sequence[ElectLeaderResult], error: ErrorCode = ErrorCode.none
) -> Any:
    """``error``: the request's top-level refusal (Kafka answers it beside the same error for every partition)."""
    topic_cls = schema.field_entity(response_cls, "replica_election_results")
    by_topic: dict[str, list[Any]] = {}
    for result in results:
        by_topic.setdefault(result.topic, []).append(
            schema.build_nested(topic_cls, "partition_result", partition_id=result.partition, error_code=result.error,
                               error_message=result.message)
        )
    return schema.build(response_cls, throttle_time=0, error_code=error, replica_election_results=tuple(
        schema.build(topic_cls, topic=name, partition_result=tuple(parts)) for name, parts in by_topic.items()
    ))


def elect_leaders_request(ask: ElectLeadersAsk) -> Any:
    cls = codec.request_class(_ELECT_LEADERS, _ELECT_LEADERS_VERSION)
    topics: tuple[Any, ...] | None = None
    if ask.partitions is not None:
        by_topic: dict[str, list[int]] = {}
        for topic, index in ask.partitions:
            by_topic.setdefault(topic, []).append(index)
        topics = tuple(schema.build_nested(cls, "topic_partitions", topic=name, partitions=tuple(indexes))
                       for name, indexes in by_topic.items())
    return schema.build(cls, election_type=ask.election_type, topic_partitions=topics)


def read_elect_leaders_response(response: Any, ask: ElectLeadersAsk) -> list[ElectLeaderResult]:
    """The answer's results. A top-level error (the controller refused the whole request) is raised as a
    ControllerError, so the caller refuses the request as the controller did: returning no results would answer a
    null partition list ("all partitions") with success."""
    code = ErrorCode(int(response.error_code))
    if code is not ErrorCode.none:
        raise ControllerError(code, f"the controller refused the election: {code.name}")
    return [
        ElectLeaderResult(t.topic, int(p.partition_id), ErrorCode(int(p.error_code)), p.error_message)
        for t in response.replica_election_results
        for p in t.partition_result
    ]


# --------------------------------------------------------------------------- AlterPartitionReassignments (45)


def read_alter_partition_reassignments(request: Any) -> list[PartitionReassignment]:
    return [
        PartitionReassignment(topic.name, int(p.partition_index), None if p.replicas is None else tuple(p.replicas))
        for topic in request.topics
        for p in topic.partitions
    ]


def reassignments_refused(
    reassignments: Sequence[PartitionReassignment], code: ErrorCode, message: str
) -> list[ReassignmentResult]:
    return [ReassignmentResult(r.topic, r.partition, code, message) for r in reassignments]


def alter_partition_reassignments_response(response_cls: type[Any], results: Sequence[ReassignmentResult]) -> Any:
    topic_cls = schema.field_entity(response_cls, "responses")
    by_topic: dict[str, list[Any]] = {}
    for result in results:
        by_topic.setdefault(result.topic, []).append(
            schema.build_nested(topic_cls, "partitions", partition_index=result.partition, error_code=result.error,
                               error_message=result.message)
        )
    responses = tuple(schema.build(topic_cls, name=name, partitions=tuple(parts)) for name, parts in by_topic.items())
    return schema.build(response_cls, throttle_time=0, responses=responses)


def alter_partition_reassignments_request(reassignments: Sequence[PartitionReassignment]) -> Any:
    cls = codec.request_class(_ALTER_PARTITION_REASSIGNMENTS, _ALTER_PARTITION_REASSIGNMENTS_VERSION)
    topic_cls = schema.field_entity(cls, "topics")
    by_topic: dict[str, list[Any]] = {}
    for r in reassignments:
        by_topic.setdefault(r.topic, []).append(
            schema.build_nested(topic_cls, "partitions", partition_index=r.partition, replicas=r.replicas)
        )
    topics = tuple(schema.build_nested(cls, "topics", name=n, partitions=tuple(p)) for n, p in by_topic.items())
    return schema.build(cls, topics=topics)


def read_alter_partition_reassignments_response(
    response: Any, reassignments: Sequence[PartitionReassignment]
) -> list[ReassignmentResult]:
    """One result per item asked, in its order; a partition the answer leaves out is UNKNOWN_SERVER_ERROR."""
    answered = {
        (t.name, int(p.partition_index)): (ErrorCode(int(p.error_code)), p.error_message)
        for t in response.responses
        for p in t.partitions
    }
    return [
        ReassignmentResult(r.topic, r.partition,
                           *answered.get((r.topic, r.partition), (ErrorCode.unknown_server_error, "no answer")))
        for r in reassignments
    ]
