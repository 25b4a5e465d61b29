"""Topics and their partitions — CreateTopics, DeleteTopics, CreatePartitions and replica placement — sans-I/O.

Each function validates a request against the image (and the node's defaults for partition counts and replication
factors) and returns the records to append with what to answer, or raises :class:`ControllerError` with the Kafka
code and message the client sees; ``controller.controller.Controller`` appends and logs. Kafka's rules and wording
(``Topic.validate``, which ``metadata.topic_names`` keeps for the broker too; the topic-name collision check, manual
assignment checks) are kept so that clients and their test suites see the errors they expect.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from metadata.cluster_records import NO_LEADER, ConfigRecord, PartitionRecord, RemoveTopicRecord, TopicRecord
from metadata.controller_api import CreateTopicResult, DeleteTopicResult, NewTopic
from metadata.errors import ControllerError
from metadata.image import MetadataImage
from metadata.rpc.kafka_apis import METADATA_TOPIC
from metadata.topic_names import validate_topic_name
from settings.config_key import ConfigValueError
from settings.config_resources import RESOURCE_TOPIC
from settings.describe import check_topic_values, describe_topic_configs
from settings.keys import validate_topic_config
from settings.server import ServerConfig
from storage.metadata.record_codec import MetadataRecord

#: Kafka's bounds on one request: the partitions a CreateTopics asks for (``ReplicationControlManager.
#: MAX_PARTITIONS_PER_BATCH``) and the records it writes (``QuorumController.MAX_RECORDS_PER_USER_OP``). The replicas
#: of every partition are placed in memory under the controller's lock, so 2^31-1 partitions must be refused before.
#: Kafka bounds CreatePartitions only by its records, failing midway; it is refused up front here with the
#: CreateTopics answer, as Kafka's KAFKA-19673 proposes.
MAX_PARTITIONS_PER_REQUEST = 10_000
MAX_RECORDS_PER_REQUEST = 10_000
_TOO_MANY_PARTITIONS = "Excessively large number of partitions per request."


@dataclass(frozen=True, slots=True)
class CreateTopicsPlan:
    """A validated CreateTopics request: the records to append and what to answer, one result per topic."""

    records: list[MetadataRecord]
    results: list[CreateTopicResult]


@dataclass(frozen=True, slots=True)
class Deletion:
    """A DeleteTopics request decided: the records to append, one result per name or id asked, and the topics that
    go (id -> name; a topic asked twice appears once)."""

    records: list[RemoveTopicRecord]
    results: list[DeleteTopicResult]
    deleted: dict[uuid.UUID, str]


def _collision_key(name: str) -> str:
    """Kafka refuses topics differing only in '.' vs '_' (their metric names would collide)."""
    return name.replace(".", "_")


# ---------------------------------------------------------------------- CreateTopics


def plan_create_topics(image: MetadataImage, config: ServerConfig, topics: Sequence[NewTopic]) -> CreateTopicsPlan:
    """Each topic is decided on its own (one refused topic does not refuse the others), but a name given twice is
    refused for both, and topics of one request collide with each other as with existing ones."""
    counts: dict[str, int] = {}
    for topic in topics:
        counts[topic.name] = counts.get(topic.name, 0) + 1
    creatable = [t for t in topics if counts[t.name] == 1 and t.name != METADATA_TOPIC]
    if _requested_partitions(creatable, config.num_partitions) > MAX_PARTITIONS_PER_REQUEST:
        return _refused_whole(topics, _TOO_MANY_PARTITIONS)
    records: list[MetadataRecord] = []
    results: list[CreateTopicResult] = []
    taken = {_collision_key(name): name for name in image.topics_by_name}
    live = _placement_brokers(image)
    for topic in topics:
        if counts[topic.name] > 1:
            results.append(
                CreateTopicResult(
                    topic.name,
                    None,
                    ErrorCode.invalid_request,
                    f"Create topics request contains multiple entries for the topic {topic.name}",
                )
            )
            continue
        if topic.name == METADATA_TOPIC:
            # The metadata log's own name; Kafka's ControllerApis refuses it before anything else is checked.
            results.append(
                CreateTopicResult(
                    topic.name,
                    None,
                    ErrorCode.invalid_request,
                    f"Creation of internal topic {METADATA_TOPIC} is prohibited.",
                )
            )
            continue
        try:
            topic_records, result = _plan_one_topic(image, config, topic, taken, live)
        except ControllerError as exc:
            results.append(CreateTopicResult(topic.name, None, exc.error, exc.message))
            continue
        taken[_collision_key(topic.name)] = topic.name
        records.extend(topic_records)
        results.append(result)
    if len(records) > MAX_RECORDS_PER_REQUEST:
        # Kafka's bounded record list fails the whole request, validate-only or not.
        return _refused_whole(topics, "Unable to perform excessively large batch operation.")
    return CreateTopicsPlan(records, results)


def _requested_partitions(topics: Sequence[NewTopic], default_partitions: int) -> int:
    """The partitions a CreateTopics asks for before any is validated, as Kafka's
    ``validateTotalNumberOfPartitions`` counts them (an invalid count counts nothing)."""
    total = 0
    for topic in topics:
        if topic.assignments:
            total += len(topic.assignments)
        elif topic.num_partitions == -1:
            total += default_partitions
        elif topic.num_partitions > 0:
            total += topic.num_partitions
    return total


def _refused_whole(topics: Sequence[NewTopic], message: str) -> CreateTopicsPlan:
    """Kafka refuses such a request as a whole: every topic is answered POLICY_VIOLATION and none is created."""
    return CreateTopicsPlan(
        [], [CreateTopicResult(t.name, None, ErrorCode.policy_violation, message) for t in topics]
    )


def _plan_one_topic(
    image: MetadataImage, config: ServerConfig, topic: NewTopic, taken: Mapping[str, str], live: Sequence[int]
) -> tuple[list[MetadataRecord], CreateTopicResult]:
    validate_topic_name(topic.name)
    if topic.name in image.topics_by_name:
        raise ControllerError(ErrorCode.topic_already_exists, f"Topic '{topic.name}' already exists.")
    clash = taken.get(_collision_key(topic.name))
    if clash is not None:
        raise ControllerError(
            ErrorCode.invalid_topic_exception, f"Topic '{topic.name}' collides with existing topic: {clash}"
        )
    configs = _validated_topic_configs(topic.name, topic.configs)
    try:
        check_topic_values(config, image.broker_configs, configs)
    except ConfigValueError as exc:
        raise ControllerError(ErrorCode.invalid_config, f"{exc} (topic {topic.name})") from None
    if topic.assignments:
        if topic.num_partitions != -1 or topic.replication_factor != -1:
            raise ControllerError(
                ErrorCode.invalid_request,
                "Both numPartitions or replicationFactor and replicasAssignments were set. Both cannot be used "
                "at the same time.",
            )
        assignment = _validated_assignments(image, topic.assignments)
        in_sync = _active_brokers(image)
    else:
        num_partitions = config.num_partitions if topic.num_partitions == -1 else topic.num_partitions
        if num_partitions <= 0:
            raise ControllerError(
                ErrorCode.invalid_partitions, "Number of partitions was set to an invalid non-positive value."
            )
        factor = config.default_replication_factor if topic.replication_factor == -1 else topic.replication_factor
        if factor <= 0:
            raise ControllerError(
                ErrorCode.invalid_replication_factor,
                "Replication factor must be larger than 0, or -1 to use the default value.",
            )
        assignment = _place_replicas(live, num_partitions, factor, start=_placement_start(image))
        in_sync = set(live)
    topic_id = uuid.uuid4()
    records: list[MetadataRecord] = [TopicRecord(topic.name, str(topic_id))]
    records.extend(ConfigRecord(RESOURCE_TOPIC, topic.name, k, v) for k, v in sorted(configs.items()))
    records.extend(_new_partitions(topic_id, 0, assignment, in_sync))
    entries = describe_topic_configs(config, image.broker_configs, configs)
    return records, CreateTopicResult(
        topic.name, topic_id, ErrorCode.none, None, len(assignment), len(assignment[0]), entries
    )


def _validated_topic_configs(topic: str, configs: Mapping[str, str | None]) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in configs.items():
        if value is None:
            raise ControllerError(ErrorCode.invalid_config, f"Null value not supported for topic configs: {key}")
        try:
            out[key] = validate_topic_config(key, value)
        except ConfigValueError as exc:
            raise ControllerError(ErrorCode.invalid_config, f"{exc} (topic {topic})") from None
    return out


def without_id(result: CreateTopicResult) -> CreateTopicResult:
    """A validate-only CreateTopics answer: the topic was not created, so it has no id."""
    return CreateTopicResult(
        result.name,
        None,
        result.error,
        result.message,
        result.num_partitions,
        result.replication_factor,
        result.configs,
    )


# ---------------------------------------------------------------------- DeleteTopics


def plan_delete_topics(
    image: MetadataImage, config: ServerConfig, names: Sequence[str], ids: Sequence[uuid.UUID]
) -> Deletion:
    """Topics asked by name, then by id; unknown ones are refused one by one, and none go while
    ``delete.topic.enable`` is false. A topic asked both by name and by id is not deleted: as Kafka's ControllerApis
    answers, its name is refused with INVALID_REQUEST (with the id) and its id is not answered at all."""
    results: list[DeleteTopicResult] = []
    doomed: dict[uuid.UUID, str] = {}
    asked_ids = set(ids)
    named_twice: set[uuid.UUID] = set()
    if not config.value("delete.topic.enable"):
        message = "Topic deletion is disabled."
        return Deletion(
            [],
            [DeleteTopicResult(n, None, ErrorCode.topic_deletion_disabled, message) for n in names]
            + [DeleteTopicResult(None, i, ErrorCode.topic_deletion_disabled, message) for i in ids],
            {},
        )
    for name in names:
        topic = image.topics_by_name.get(name)
        if topic is None:
            results.append(
                DeleteTopicResult(
                    name,
                    None,
                    ErrorCode.unknown_topic_or_partition,
                    "This server does not host this topic-partition.",
                )
            )
            continue
        if topic.topic_id in asked_ids:
            named_twice.add(topic.topic_id)
            results.append(
                DeleteTopicResult(
                    name,
                    topic.topic_id,
                    ErrorCode.invalid_request,
                    "The provided topic name maps to an ID that was already supplied.",
                )
            )
            continue
        doomed[topic.topic_id] = topic.name
        results.append(DeleteTopicResult(name, topic.topic_id, ErrorCode.none))
    for topic_id in ids:
        if topic_id in named_twice:
            continue
        found = image.topics_by_id.get(topic_id)
        if found is None:
            results.append(
                DeleteTopicResult(
                    None, topic_id, ErrorCode.unknown_topic_id, "This server does not host this topic ID."
                )
            )
            continue
        doomed[topic_id] = found.name
        results.append(DeleteTopicResult(found.name, topic_id, ErrorCode.none))
    return Deletion([RemoveTopicRecord(str(topic_id)) for topic_id in doomed], results, doomed)


# ---------------------------------------------------------------------- CreatePartitions


def plan_create_partitions(
    image: MetadataImage, topic: str, count: int, assignments: Sequence[Sequence[int]] | None
) -> list[PartitionRecord]:
    """The partitions that grow ``topic`` to ``count``, placed as asked or spread over the live brokers with the
    topic's replication factor; ControllerError with Kafka's code and message when refused."""
    current = image.topics_by_name.get(topic)
    if current is None:
        raise ControllerError(ErrorCode.unknown_topic_or_partition, f"The topic '{topic}' does not exist.")
    existing = len(current.partitions)
    if count < existing:
        raise ControllerError(
            ErrorCode.invalid_partitions,
            f"Topic currently has {existing} partitions, which is higher than the requested {count}.",
        )
    if count == existing:
        raise ControllerError(ErrorCode.invalid_partitions, f"Topic already has {existing} partitions.")
    factor = len(current.partitions[0].replicas) if current.partitions else 1
    added = count - existing
    if added > MAX_PARTITIONS_PER_REQUEST:
        raise ControllerError(ErrorCode.policy_violation, _TOO_MANY_PARTITIONS)
    if assignments is not None:
        if len(assignments) != added:
            raise ControllerError(
                ErrorCode.invalid_replica_assignment,
                f"Attempted to add {added} additional partition(s), but only {len(assignments)} "
                "assignment(s) were specified.",
            )
        placed = _validated_assignments(image, dict(enumerate(assignments)), factor, first=existing)
        in_sync = _active_brokers(image)
    else:
        live = _placement_brokers(image)
        placed = _place_replicas(live, added, factor, start=existing)
        in_sync = set(live)
    return _new_partitions(current.topic_id, existing, placed, in_sync)


# ---------------------------------------------------------------------- placement


def _placement_brokers(image: MetadataImage) -> list[int]:
    """The brokers new partitions are placed on: live ones not in controlled shutdown (``controller.
    controlled_shutdown``: it would only have to move them again), unless every live broker is shutting down."""
    return [b.node_id for b in image.leader_candidates() or image.live_brokers()]


def _active_brokers(image: MetadataImage) -> set[int]:
    """The brokers a manually placed partition may start in sync on and be led by: neither fenced nor in
    controlled shutdown (Kafka's ``ClusterControlManager.isActive``)."""
    return {b.node_id for b in image.leader_candidates()}


def _new_partitions(
    topic_id: uuid.UUID, first: int, assignment: Sequence[Sequence[int]], in_sync: Set[int]
) -> list[PartitionRecord]:
    """Partitions ``first``, ``first + 1``... on ``assignment``'s replicas: those in ``in_sync`` are the ISR, the
    first of them the leader (Kafka's ``buildPartitionRegistration``)."""
    records: list[PartitionRecord] = []
    for offset, replicas in enumerate(assignment):
        isr = tuple(r for r in replicas if r in in_sync)
        leader = isr[0] if isr else NO_LEADER
        records.append(PartitionRecord(str(topic_id), first + offset, tuple(replicas), isr, leader, 0, 0))
    return records


def _placement_start(image: MetadataImage) -> int:
    """Rotates where new topics' first replicas land so leadership spreads over brokers."""
    return sum(len(t.partitions) for t in image.topics_by_name.values())


def _place_replicas(live: Sequence[int], partitions: int, factor: int, start: int) -> list[list[int]]:
    if factor > len(live):
        raise ControllerError(
            ErrorCode.invalid_replication_factor,
            f"Unable to replicate the partition {factor} time(s): The target replication factor of {factor} cannot "
            f"be reached because only {len(live)} broker(s) are registered.",
        )
    brokers = sorted(live)
    return [[brokers[(start + p + r) % len(brokers)] for r in range(factor)] for p in range(partitions)]


def _validated_assignments(
    image: MetadataImage, assignments: Mapping[int, Sequence[int]], factor: int | None = None, first: int = 0
) -> list[list[int]]:
    """``assignments`` (index from 0 -> replicas) checked as Kafka checks a manual assignment; ``first``: the
    partition the first one becomes (CreatePartitions adds after the existing ones), as messages name it."""
    registered = set(image.brokers)
    active = _active_brokers(image)
    ordered: list[list[int]] = []
    for expected, index in enumerate(sorted(assignments)):
        if index != expected:
            raise ControllerError(
                ErrorCode.invalid_replica_assignment,
                "Partitions in the manual replica assignment must be consecutive and start at 0.",
            )
        replicas = list(assignments[index])
        number = first + index
        if not replicas:
            raise ControllerError(
                ErrorCode.invalid_replica_assignment, f"Partition {number} has an empty replica list."
            )
        if len(set(replicas)) != len(replicas):
            raise ControllerError(
                ErrorCode.invalid_replica_assignment, f"Duplicate brokers in the assignment of partition {number}."
            )
        unknown = [r for r in replicas if r not in registered]
        if unknown:
            raise ControllerError(
                ErrorCode.invalid_replica_assignment,
                f"Partition {number} is assigned to broker(s) {unknown} that are not registered.",
            )
        wanted = factor if factor is not None else (len(ordered[0]) if ordered else len(replicas))
        if len(replicas) != wanted:
            raise ControllerError(
                ErrorCode.invalid_replica_assignment,
                f"All partitions must have the same replication factor ({wanted}); partition {number} has "
                f"{len(replicas)}.",
            )
        if not active.intersection(replicas):
            # Kafka refuses a partition that would start with no leader and an empty ISR.
            raise ControllerError(
                ErrorCode.invalid_replica_assignment,
                f"All brokers specified in the manual partition assignment for partition {number} are "
                "fenced or in controlled shutdown.",
            )
        ordered.append(replicas)
    return ordered
