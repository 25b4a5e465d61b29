"""The active controller: validates requests against the image and turns them into metadata records.

Every write runs under one lock: validate against the current image, append the records to the metadata log
(durable when ``append`` returns), then apply them to a new image and tell subscribers. A write therefore returns
only after its records are durable and visible in :attr:`Controller.image`. Stream/object/KV records come from the
composed stream metadata through its ``sink`` and land in the same log, interleaved in commit order.

Request validation (the ``_plan_*`` methods and module helpers) reads only the image and returns records or a
``ControllerError``, so the same logic can serve the Raft quorum's active controller.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import struct
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from controller import reassignment
from controller.api import (
    ConfigResource,
    CreateTopicResult,
    DeleteTopicResult,
    ElectLeaderResult,
    ImageListener,
    IncrementalOp,
    NewTopic,
    PartitionReassignment,
    ReassignmentResult,
)
from controller.config import (
    ConfigType,
    ConfigValueError,
    ServerConfig,
    config_key,
    describe_topic_configs,
    ensure_meta_properties,
    validate_broker_config,
    validate_topic_config,
)
from controller.image import MetadataImage, PartitionImage, is_cluster_record
from controller.kv_keys import partition_kv_key
from controller.metadata_log import LocalMetadataLog, RecordLog
from controller.metadata_records import (
    NO_LEADER,
    RESOURCE_BROKER,
    RESOURCE_TOPIC,
    ConfigRecord,
    Endpoint,
    FenceBrokerRecord,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    WALFailoverDoneRecord,
)
from controller.producer_ids import (
    ProducerIdBlock,
    ProducerIdsExhaustedError,
    decode_legacy_floor,
    legacy_kv_key,
    next_block,
)
from controller.wal_failover import assign, needs_failover, reassignments, wal_location_key, zombie_failover
from storage.errors import NodeEpochExpiredError
from storage.metadata.api import NodeIdentity, StreamState
from storage.metadata.memory import InMemoryStreamMetadata, wall_clock_ms
from storage.objects.format import namespace_for

logger = logging.getLogger(__name__)

MAX_TOPIC_NAME_LENGTH = 249
_REASSIGNMENT_POLL_S = 0.05  # how often the watch looks at the source's streams while a move waits
_LEGAL_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")


class ControllerError(Exception):
    """A request the controller refuses; carries the Kafka error code the broker answers with."""

    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


def validate_topic_name(name: str) -> None:
    """Kafka's topic name rules (``Topic.validate``)."""
    if not name:
        raise ControllerError(ErrorCode.invalid_topic_exception, "Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise ControllerError(ErrorCode.invalid_topic_exception, 'Topic name cannot be "." or ".."')
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise ControllerError(
            ErrorCode.invalid_topic_exception,
            f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters, topic name: {name}",
        )
    if not _LEGAL_TOPIC_NAME.fullmatch(name):
        raise ControllerError(
            ErrorCode.invalid_topic_exception,
            f"Topic name \"{name}\" is illegal, it contains a character other than ASCII alphanumerics, '.', '_' "
            "and '-'",
        )


def _collision_key(name: str) -> str:
    """Kafka refuses topics differing only in '.' vs '_' (their metric names would collide)."""
    return name.replace(".", "_")


@dataclass(frozen=True, slots=True)
class _Plan:
    """A validated request: the records to append and what to answer."""

    records: list[MetadataRecord]
    results: list[CreateTopicResult]


class Controller:
    """The single active controller of the local node (the embedded default)."""

    def __init__(
        self,
        config: ServerConfig,
        image: MetadataImage,
        log: RecordLog,
        *,
        clock_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self._config = config
        self._image = image
        self._log = log
        self._clock_ms = clock_ms
        self._lock = asyncio.Lock()
        self._listeners: list[ImageListener] = []
        self._streams = self._new_stream_metadata()
        self._snapshot_task: asyncio.Task[None] | None = None
        self._reassign_task: asyncio.Task[None] | None = None
        # (topic id, partition, leader epoch) of each reassignment in flight -> loop time this controller saw it.
        self._reassign_seen: dict[tuple[uuid.UUID, int, int], float] = {}

    @classmethod
    async def start(cls, config: ServerConfig, *, clock_ms: Callable[[], int] = wall_clock_ms) -> Controller:
        """Opens (formatting on first start) the node's metadata directory and replays its log into a controller.

        Raises ConfigError when the directory belongs to another node, MetadataLogError when the log is unreadable.
        """
        directory = config.metadata_dir
        meta = await asyncio.to_thread(ensure_meta_properties, directory, config.node_id)
        log = LocalMetadataLog.open(
            directory, snapshot_after_bytes=int(config.value("metadata.log.max.record.bytes.between.snapshots"))
        )
        recovered = await asyncio.to_thread(log.recover)
        image = MetadataImage(cluster_id=meta.cluster_id, controller_id=config.node_id)
        controller = cls(config, image, log, clock_ms=clock_ms)
        controller._replay(recovered.snapshot_records, recovered.snapshot_offset)
        for batch in recovered.batches:
            controller._replay(batch.records, batch.last_offset)
        logger.info(
            "controller %d of cluster %s started at metadata offset %d: %d topics, %d brokers",
            config.node_id,
            meta.cluster_id,
            recovered.last_offset,
            len(controller.image.topics_by_name),
            len(controller.image.brokers),
        )
        return controller

    def _new_stream_metadata(self) -> InMemoryStreamMetadata:
        return InMemoryStreamMetadata(
            sink=self._append_stream_records,
            clock=self._clock_ms,
            object_delete_retention_ms=self._config.storage.object_delete_retention_ms,
            delegations=self._failovers_delegated_to,
        )

    def _failovers_delegated_to(self, node: NodeIdentity) -> list[int]:
        """The stream metadata's view of WAL failovers: whose opened streams ``node`` may commit to and close."""
        return self._image.failovers_delegated_to(node.node_id, node.node_epoch)

    def _apply_stream_records(self, records: Sequence[MetadataRecord]) -> list[MetadataRecord]:
        """Hands the stream/object/KV records to the stream metadata and returns the cluster records, in log order,
        for the image: one log carries both, and each side replays only its own."""
        cluster: list[MetadataRecord] = []
        for record in records:
            if is_cluster_record(record):
                cluster.append(record)
            else:
                self._streams.apply(record)
        return cluster

    def _replay(self, records: Sequence[MetadataRecord], last_offset: int) -> None:
        if last_offset < 0:
            return
        self._image = self._image.apply(self._apply_stream_records(records), last_offset)

    def replay(self, records: Sequence[MetadataRecord], last_offset: int) -> None:
        """Applies records another controller committed (a Raft follower, or entries of a previous leader),
        telling image subscribers like a local write would."""
        cluster = self._apply_stream_records(records)
        if cluster:
            self._publish(cluster, last_offset)
        elif last_offset > self._image.offset:
            self._image = self._image.with_offset(last_offset)

    def reset(self, records: Sequence[MetadataRecord], last_offset: int) -> None:
        """Replaces the whole state with a snapshot's (a lagging Raft member catching up); the stream metadata
        object is replaced too, so callers must fetch ``stream_metadata`` again afterwards."""
        self._streams = self._new_stream_metadata()
        old = self._image
        self._image = MetadataImage(cluster_id=old.cluster_id, controller_id=old.controller_id)
        self._replay(records, last_offset)
        for listener in list(self._listeners):
            try:
                listener(old, self._image)
            except Exception:
                logger.exception("metadata image listener %r failed on a snapshot at offset %d", listener,
                                 last_offset)

    def set_controller_id(self, controller_id: int) -> None:
        """Which node is the active controller (what Metadata responses report); not a replicated fact."""
        if self._image.controller_id != controller_id:
            self._image = self._image.with_controller(controller_id)

    async def close(self) -> None:
        """Waits for a running snapshot and closes the log; the controller must not be used afterwards."""
        if self._reassign_task is not None:
            self._reassign_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reassign_task
        async with self._lock:
            if self._snapshot_task is not None:
                await self._snapshot_task
            if isinstance(self._log, LocalMetadataLog):
                self._log.close()

    # ------------------------------------------------------------------ state

    @property
    def image(self) -> MetadataImage:
        return self._image

    @property
    def config(self) -> ServerConfig:
        return self._config

    @property
    def stream_metadata(self) -> InMemoryStreamMetadata:
        return self._streams

    def subscribe(self, listener: ImageListener) -> None:
        self._listeners.append(listener)

    async def _commit(self, records: Sequence[MetadataRecord]) -> None:
        """Appends durably, then publishes the new image. Callers hold ``self._lock``."""
        if not records:
            return
        last_offset = await self._log.append(records)
        self._publish(records, last_offset)
        self._maybe_snapshot()

    async def _append_stream_records(self, records: Sequence[MetadataRecord]) -> None:
        """The stream metadata's sink: its records share the log (it applies them itself once this returns).

        The image does not hold stream state, but its ``offset`` still advances so that it always names the last
        record of the log, live and after a replay alike; subscribers are not called for an offset-only change.
        """
        last_offset = await self._log.append(records)
        if last_offset > self._image.offset:
            self._image = self._image.with_offset(last_offset)
        self._maybe_snapshot()

    def _maybe_snapshot(self) -> None:
        """Starts a background snapshot when the log has grown enough.

        It runs as its own task because the stream metadata applies its records only after the sink returns: a
        snapshot taken inside the sink would miss them. The task captures state with appends blocked.
        """
        log = self._log
        if not isinstance(log, LocalMetadataLog) or not log.should_snapshot():
            return
        if self._snapshot_task is not None and not self._snapshot_task.done():
            return
        self._snapshot_task = asyncio.get_running_loop().create_task(self._snapshot(log))

    async def _snapshot(self, log: LocalMetadataLog) -> None:
        try:
            await log.snapshot(self.snapshot_records)
        except Exception:
            logger.exception(
                "metadata snapshot in %s failed; the log keeps growing until the next attempt", log.directory
            )

    def snapshot_records(self) -> list[MetadataRecord]:
        """Records rebuilding the whole metadata state (cluster image, then streams/objects/KV)."""
        records: list[MetadataRecord] = self._image.to_records()
        records.extend(self._streams.snapshot())
        return records

    async def take_snapshot(self) -> int:
        """Snapshots now (tools and tests; normally size-triggered). Returns the snapshot's offset."""
        if not isinstance(self._log, LocalMetadataLog):
            raise RuntimeError("this controller's log does not take local snapshots")
        return await self._log.snapshot(self.snapshot_records)

    def _publish(self, records: Sequence[MetadataRecord], last_offset: int) -> None:
        old = self._image
        new = old.apply(records, last_offset)
        self._image = new
        for listener in list(self._listeners):
            try:
                listener(old, new)
            except Exception:
                logger.exception("metadata image listener %r failed at offset %d", listener, last_offset)

    # ------------------------------------------------------------------ brokers

    async def register_broker(self, node_id: int, listeners: Sequence[Endpoint], rack: str | None) -> int:
        async with self._lock:
            image = self._image
            previous = image.brokers.get(node_id)
            epoch = max(self._clock_ms(), previous.epoch + 1 if previous is not None else 0)
            records: list[MetadataRecord] = [RegisterBrokerRecord(node_id, epoch, tuple(listeners), rack, fenced=False)]
            records.extend(_leadership_on_register(image, node_id))
            await self._commit(records)
            await self._streams.register_node(node_id, epoch)
            logger.info(
                "broker %d registered with epoch %d (%s); leads %d partitions",
                node_id,
                epoch,
                ", ".join(f"{e.name}://{e.host}:{e.port}" for e in listeners) or "no listeners",
                len(self._image.partitions_led_by(node_id)),
            )
            return epoch

    async def fence_broker(self, node_id: int, epoch: int, *, session_expired: bool = False) -> bool:
        """Fences ``node_id`` (session timeout or controlled shutdown) and moves the partitions it leads; False if
        ``epoch`` is not its current registration (a late request from an older incarnation changes nothing).

        A broker fenced because its session expired may have died with acknowledged records only in its WAL: if
        that WAL is in the shared S3 WAL bucket, the same write assigns it to a live broker to replay
        (``controller.wal_failover``). A controlled shutdown uploaded and closed everything first."""
        async with self._lock:
            image = self._image
            broker = image.brokers.get(node_id)
            if broker is None or broker.epoch != epoch:
                logger.info("fence of broker %d epoch %d ignored: not its current registration", node_id, epoch)
                return False
            changes = _leadership_on_fence(image, node_id)
            records: list[MetadataRecord] = [FenceBrokerRecord(node_id, epoch), *changes]
            if session_expired:
                locations = await self._wal_locations()
                if needs_failover(image, node_id, epoch, locations):
                    records.append(assign(image, node_id, epoch, locations))
            await self._commit(records)
            logger.info("broker %d (epoch %d) fenced; %d partitions moved", node_id, epoch, len(changes))
            failover = self._image.wal_failovers.get(node_id)
            if session_expired and failover is not None and failover.pending and failover.node_epoch == epoch:
                if failover.target_id >= 0:
                    logger.info("WAL of broker %d (epoch %d) assigned to broker %d for failover (attempt %d)",
                                node_id, epoch, failover.target_id, failover.attempt)
                else:
                    logger.warning("WAL of broker %d (epoch %d) needs a failover but no live broker shares its WAL "
                                   "bucket; it is assigned as soon as one is", node_id, epoch)
            return True

    async def _wal_locations(self) -> dict[int, str]:
        """Where each registered broker's S3 WAL lives, as it announced it (brokers with a file WAL have none)."""
        out: dict[int, str] = {}
        for node_id in self._image.brokers:
            value = await self._streams.get_kv(wal_location_key(node_id))
            if value:
                out[node_id] = value.decode("utf-8", "replace")
        return out

    async def reconcile_wal_failovers(self) -> int:
        """Gives every pending WAL failover whose target is gone (fenced, restarted, never found) to a live broker;
        the active controller calls it periodically. Returns how many assignments changed."""
        async with self._lock:
            image = self._image
            if not any(f.pending for f in image.wal_failovers.values()):
                return 0
            records = reassignments(image, await self._wal_locations())
            await self._commit(records)
            for record in records:
                logger.info("WAL failover of broker %d (epoch %d) reassigned to broker %d (attempt %d)",
                            record.node_id, record.node_epoch, record.target_id, record.attempt)
            return len(records)

    async def complete_wal_failover(self, node: NodeIdentity, failed_node_id: int, failed_node_epoch: int) -> None:
        """The target reports the failover of ``failed_node_id``'s WAL done; idempotent. NodeEpochExpiredError
        when ``node`` is not (or no longer) the assigned target: its work may be redone by the current one.

        A newer incarnation of the failed broker itself may also end a failover that has no live target at the
        moment: its own restart recovery replays the same WAL (idempotently, fencing any earlier target's
        reservation with its higher epoch), so it need not wait for a broker that may never come."""
        async with self._lock:
            failover = self._image.wal_failovers.get(failed_node_id)
            if failover is None or failover.node_epoch != failed_node_epoch:
                raise NodeEpochExpiredError(
                    f"node {node.node_id}: no WAL failover of broker {failed_node_id} epoch {failed_node_epoch}"
                )
            if failover.done:
                return
            taken_back = (
                node.node_id == failed_node_id and node.node_epoch > failed_node_epoch and failover.target_id < 0
            )
            if not taken_back and not failover.delegated_to(node.node_id, node.node_epoch):
                raise NodeEpochExpiredError(
                    f"node {node.node_id} (epoch {node.node_epoch}) is not the assigned target of the WAL failover "
                    f"of broker {failed_node_id}: broker {failover.target_id} epoch {failover.target_epoch} is"
                )
            await self._commit([WALFailoverDoneRecord(failed_node_id, failed_node_epoch)])
            logger.info("WAL failover of broker %d (epoch %d) done by broker %d", failed_node_id,
                        failed_node_epoch, node.node_id)

    async def unfence_broker(self, node_id: int, epoch: int) -> bool:
        """Unfences ``node_id`` (it heartbeats again and caught up with the metadata log) and gives it the
        partitions it should lead; False if ``epoch`` is not its current registration or it is not fenced."""
        async with self._lock:
            image = self._image
            broker = image.brokers.get(node_id)
            if broker is None or broker.epoch != epoch or not broker.fenced:
                return False
            if zombie_failover(image, node_id, epoch) is not None:
                return False  # its WAL was taken over: this incarnation can never write again
            records: list[MetadataRecord] = [UnfenceBrokerRecord(node_id, epoch)]
            untouched = image.wal_failovers.get(node_id)
            if untouched is not None and untouched.pending and untouched.node_epoch == epoch:
                records.append(WALFailoverDoneRecord(node_id, epoch))  # back before any broker took its WAL
            changes = _leadership_on_register(image, node_id)
            await self._commit([*records, *changes])
            logger.info("broker %d (epoch %d) unfenced; it now leads %d partitions", node_id, epoch,
                        len(self._image.partitions_led_by(node_id)))
            return True

    # ------------------------------------------------------------------ producer ids

    async def allocate_producer_ids(self, broker_id: int, broker_epoch: int) -> ProducerIdBlock:
        """AllocateProducerIds: a block of producer ids no other broker was or will be given, durable in the
        metadata log before it is returned. ControllerError for an unknown broker, a stale epoch, or when the id
        space is exhausted."""
        async with self._lock:
            image = self._image
            broker = image.brokers.get(broker_id)
            if broker is None:
                raise ControllerError(
                    ErrorCode.broker_id_not_registered, f"broker {broker_id} asked for producer ids unregistered"
                )
            if broker.epoch != broker_epoch:
                raise ControllerError(
                    ErrorCode.stale_broker_epoch,
                    f"broker {broker_id} asked for producer ids with epoch {broker_epoch}, its registration is "
                    f"{broker.epoch}",
                )
            floor = 0
            if image.producer_ids.next_producer_id == 0:  # first allocation: respect a pre-upgrade KV reservation
                floor = decode_legacy_floor(await self._streams.get_kv(legacy_kv_key(image.cluster_id)))
            try:
                block, record = next_block(image, broker_id, broker_epoch, floor)
            except ProducerIdsExhaustedError as exc:
                raise ControllerError(ErrorCode.unknown_server_error, str(exc)) from None
            await self._commit([record])
            logger.info("producer ids [%d, %d) given to broker %d (epoch %d)", block.start, block.end, broker_id,
                        broker_epoch)
            return block

    # ------------------------------------------------------------------ topics

    async def create_topics(self, topics: Sequence[NewTopic], validate_only: bool) -> list[CreateTopicResult]:
        async with self._lock:
            plan = self._plan_create_topics(self._image, topics)
            if not validate_only:
                await self._commit(plan.records)
            results: list[CreateTopicResult] = plan.results
            if validate_only:
                results = [_without_id(r) for r in results]
            for result in results:
                if result.error is ErrorCode.none and not validate_only:
                    logger.info(
                        "created topic %s (id %s) with %d partitions",
                        result.name,
                        result.topic_id,
                        result.num_partitions,
                    )
            return results

    def _plan_create_topics(self, image: MetadataImage, topics: Sequence[NewTopic]) -> _Plan:
        counts: dict[str, int] = {}
        for topic in topics:
            counts[topic.name] = counts.get(topic.name, 0) + 1
        records: list[MetadataRecord] = []
        results: list[CreateTopicResult] = []
        taken = {_collision_key(name): name for name in image.topics_by_name}
        live = [b.node_id for b in image.live_brokers()]
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
            try:
                topic_records, result = self._plan_one_topic(image, topic, taken, live)
            except ControllerError as exc:
                results.append(CreateTopicResult(topic.name, None, exc.error, exc.message))
                continue
            taken[_collision_key(topic.name)] = topic.name
            records.extend(topic_records)
            results.append(result)
        return _Plan(records, results)

    def _plan_one_topic(
        self, image: MetadataImage, topic: NewTopic, taken: Mapping[str, str], live: Sequence[int]
    ) -> tuple[list[MetadataRecord], CreateTopicResult]:
        validate_topic_name(topic.name)
        if topic.name in image.topics_by_name:
            raise ControllerError(ErrorCode.topic_already_exists, f"Topic '{topic.name}' already exists.")
        clash = taken.get(_collision_key(topic.name))
        if clash is not None:
            raise ControllerError(
                ErrorCode.invalid_topic_exception, f"Topic '{topic.name}' collides with existing topic: {clash}"
            )
        configs = self._validated_topic_configs(topic.name, topic.configs)
        if topic.assignments:
            if topic.num_partitions != -1 or topic.replication_factor != -1:
                raise ControllerError(
                    ErrorCode.invalid_request,
                    "Both numPartitions or replicationFactor and replicasAssignments were set. Both cannot be used "
                    "at the same time.",
                )
            assignment = _validated_assignments(image, topic.assignments)
        else:
            num_partitions = self._config.num_partitions if topic.num_partitions == -1 else topic.num_partitions
            if num_partitions <= 0:
                raise ControllerError(
                    ErrorCode.invalid_partitions, "Number of partitions was set to an invalid non-positive value."
                )
            factor = (
                self._config.default_replication_factor if topic.replication_factor == -1 else topic.replication_factor
            )
            if factor <= 0:
                raise ControllerError(
                    ErrorCode.invalid_replication_factor,
                    "Replication factor must be larger than 0, or -1 to use the default value.",
                )
            assignment = _place_replicas(live, num_partitions, factor, start=_placement_start(image))
        topic_id = uuid.uuid4()
        records: list[MetadataRecord] = [TopicRecord(topic.name, str(topic_id))]
        records.extend(ConfigRecord(RESOURCE_TOPIC, topic.name, k, v) for k, v in sorted(configs.items()))
        live_set = set(live)
        for index, replicas in enumerate(assignment):
            leader = next((r for r in replicas if r in live_set), NO_LEADER)
            isr = tuple(r for r in replicas if r in live_set)
            records.append(PartitionRecord(str(topic_id), index, tuple(replicas), isr, leader, 0, 0))
        entries = describe_topic_configs(self._config, self._image.broker_configs, configs)
        return records, CreateTopicResult(
            topic.name, topic_id, ErrorCode.none, None, len(assignment), len(assignment[0]), entries
        )

    def _validated_topic_configs(self, topic: str, configs: Mapping[str, str | None]) -> dict[str, str]:
        out: dict[str, str] = {}
        for key, value in configs.items():
            if value is None:
                raise ControllerError(ErrorCode.invalid_request, f"Null value not supported for topic configs: {key}")
            try:
                out[key] = validate_topic_config(key, value)
            except ConfigValueError as exc:
                raise ControllerError(ErrorCode.invalid_config, f"{exc} (topic {topic})") from None
        return out

    async def delete_topics(self, names: Sequence[str] = (), ids: Sequence[uuid.UUID] = ()) -> list[DeleteTopicResult]:
        async with self._lock:
            image = self._image
            results: list[DeleteTopicResult] = []
            doomed: dict[uuid.UUID, str] = {}
            if not self._config.value("delete.topic.enable"):
                message = "Topic deletion is disabled."
                return [DeleteTopicResult(n, None, ErrorCode.topic_deletion_disabled, message) for n in names] + [
                    DeleteTopicResult(None, i, ErrorCode.topic_deletion_disabled, message) for i in ids
                ]
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
                doomed[topic.topic_id] = topic.name
                results.append(DeleteTopicResult(name, topic.topic_id, ErrorCode.none))
            for topic_id in ids:
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
            await self._commit([RemoveTopicRecord(str(topic_id)) for topic_id in doomed])
            for topic_id, name in doomed.items():
                logger.info("deleted topic %s (id %s)", name, topic_id)
            return results

    async def create_partitions(
        self, topic: str, count: int, assignments: Sequence[Sequence[int]] | None, validate_only: bool
    ) -> tuple[ErrorCode, str | None]:
        async with self._lock:
            image = self._image
            current = image.topics_by_name.get(topic)
            if current is None:
                return ErrorCode.unknown_topic_or_partition, f"The topic '{topic}' does not exist."
            existing = len(current.partitions)
            if count < existing:
                return (
                    ErrorCode.invalid_partitions,
                    f"Topic currently has {existing} partitions, which is higher than the requested {count}.",
                )
            if count == existing:
                return ErrorCode.invalid_partitions, f"Topic already has {existing} partitions."
            factor = len(current.partitions[0].replicas) if current.partitions else 1
            added = count - existing
            try:
                if assignments is not None:
                    if len(assignments) != added:
                        raise ControllerError(
                            ErrorCode.invalid_replica_assignment,
                            f"Attempted to add {added} additional partition(s), but only {len(assignments)} "
                            "assignment(s) were specified.",
                        )
                    placed = _validated_assignments(image, dict(enumerate(assignments)), factor)
                else:
                    live = [b.node_id for b in image.live_brokers()]
                    placed = _place_replicas(live, added, factor, start=existing)
            except ControllerError as exc:
                return exc.error, exc.message
            if validate_only:
                return ErrorCode.none, None
            live_set = {b.node_id for b in image.live_brokers()}
            records: list[MetadataRecord] = []
            for offset, replicas in enumerate(placed):
                leader = next((r for r in replicas if r in live_set), NO_LEADER)
                isr = tuple(r for r in replicas if r in live_set)
                records.append(
                    PartitionRecord(str(current.topic_id), existing + offset, tuple(replicas), isr, leader, 0, 0)
                )
            await self._commit(records)
            logger.info("topic %s now has %d partitions (was %d)", topic, count, existing)
            return ErrorCode.none, None

    # ------------------------------------------------------------------ configs

    async def alter_configs(
        self,
        resource: ConfigResource,
        changes: Mapping[str, str | None],
        *,
        incremental_ops: Mapping[str, int] | None,
        validate_only: bool,
    ) -> tuple[ErrorCode, str | None]:
        async with self._lock:
            try:
                records = self._plan_alter_configs(self._image, resource, changes, incremental_ops)
            except ControllerError as exc:
                return exc.error, exc.message
            if not validate_only:
                await self._commit(records)
                if records:
                    logger.info(
                        "configs of %s %r changed: %s",
                        "topic" if resource.type == RESOURCE_TOPIC else "broker",
                        resource.name,
                        ", ".join(f"{r.name}={r.value}" for r in records if isinstance(r, ConfigRecord)),
                    )
            return ErrorCode.none, None

    def _plan_alter_configs(
        self,
        image: MetadataImage,
        resource: ConfigResource,
        changes: Mapping[str, str | None],
        incremental_ops: Mapping[str, int] | None,
    ) -> list[MetadataRecord]:
        if resource.type == RESOURCE_TOPIC:
            topic = image.topics_by_name.get(resource.name)
            if topic is None:
                raise ControllerError(ErrorCode.unknown_topic_or_partition, f"Topic {resource.name} does not exist")
            current: Mapping[str, str] = topic.configs
        elif resource.type == RESOURCE_BROKER:
            if resource.name != "":
                try:
                    node_id = int(resource.name)
                except ValueError:
                    raise ControllerError(
                        ErrorCode.invalid_request, f"Broker id must be an integer, got {resource.name!r}"
                    ) from None
                current = image.node_configs.get(node_id, {})
            else:
                current = image.broker_configs
        else:
            raise ControllerError(ErrorCode.invalid_request, f"Unsupported config resource type {resource.type}")
        wanted = _apply_config_ops(resource, current, changes, incremental_ops)
        validated: dict[str, str] = {}
        for key, value in wanted.items():
            try:
                if resource.type == RESOURCE_TOPIC:
                    validated[key] = validate_topic_config(key, value)
                else:
                    validated[key] = validate_broker_config(key, value)
            except ConfigValueError as exc:
                raise ControllerError(ErrorCode.invalid_config, str(exc)) from None
        records: list[MetadataRecord] = []
        for key in sorted(set(current) | set(validated)):
            new = validated.get(key)
            if current.get(key) != new:
                records.append(ConfigRecord(resource.type, resource.name, key, new))
        return records

    # ------------------------------------------------------------------ reassignment

    async def alter_partition_reassignments(
        self, reassignments: Sequence[PartitionReassignment]
    ) -> list[ReassignmentResult]:
        """Starts (or cancels) moves of partitions to another broker (DESIGN §9): the partitions lose their leader
        at once, and the target is elected by the reassignment watch once the source has closed their streams."""
        async with self._lock:
            planned = reassignment.plan(self._image, reassignments)
            await self._commit(planned.records)
        for record in planned.records:
            logger.info("partition %s-%d: reassignment %s (replicas %s, leader epoch %s)", record.topic_id,
                        record.partition, "started" if record.leader == NO_LEADER else "cancelled",
                        list(record.replicas or ()), record.leader_epoch)
        if planned.records:
            self.watch_reassignments()
        return planned.results

    def watch_reassignments(self) -> None:
        """Runs the reassignment watch unless it runs already; the active controller calls it after a
        reassignment and when it takes over (moves a previous active controller started)."""
        if self._reassign_task is None or self._reassign_task.done():
            self._reassign_task = asyncio.create_task(self._watch_reassignments(), name="partition-reassignments")

    async def _watch_reassignments(self) -> None:
        while True:
            try:
                pending = await self.complete_reassignments()
            except Exception as exc:  # NotControllerError after losing leadership, a log write failed, ...
                logger.info("controller %d: reassignment watch stopped: %s", self._config.node_id, exc)
                return
            if not pending:
                return
            await asyncio.sleep(_REASSIGNMENT_POLL_S)

    async def complete_reassignments(self) -> int:
        """Elects the target of each reassigned partition whose source closed its streams, or whose election timer
        (``partition.reassignment.election.timeout.ms``, from when this controller first saw the move) fired.
        Returns how many reassignments are still waiting."""
        timeout_s = int(self._config.value("partition.reassignment.election.timeout.ms")) / 1000
        now = asyncio.get_running_loop().time()
        async with self._lock:
            image = self._image
            moving = reassignment.in_flight(image)
            keys = {(p.topic_id, p.partition, p.leader_epoch) for _, p in moving}
            for stale in [k for k in self._reassign_seen if k not in keys]:
                del self._reassign_seen[stale]
            records: list[MetadataRecord] = []
            for name, partition in moving:
                seen = self._reassign_seen.setdefault((partition.topic_id, partition.partition,
                                                       partition.leader_epoch), now)
                closed = await self._streams_closed(image.cluster_id, partition)
                if closed or now - seen >= timeout_s:
                    records.append(reassignment.complete(image, partition))
                    logger.info(
                        "partition %s-%d: %s; electing broker %s (reassigned from %s)", name, partition.partition,
                        "the source closed its streams" if closed else f"no close after {timeout_s:.1f} s",
                        list(partition.replicas), list(partition.removing_replicas),
                    )
            await self._commit(records)
            return len(moving) - len(records)

    async def _streams_closed(self, cluster_id: str, partition: PartitionImage) -> bool:
        """Whether the partition's streams are all closed: its meta stream is closed last (PartitionLog.close),
        so its state says it. A partition never opened has no streams to wait for."""
        raw = await self._streams.get_kv(
            partition_kv_key(namespace_for(cluster_id), partition.topic_id, partition.partition)
        )
        if raw is None or len(raw) != 8:
            return True
        (meta_id,) = struct.unpack(">q", raw)
        streams = await self._streams.get_streams([meta_id])
        return not streams or streams[0].state is StreamState.CLOSED

    # ------------------------------------------------------------------ leadership

    async def elect_leaders(self, partitions: Sequence[tuple[str, int]] | None) -> list[ElectLeaderResult]:
        async with self._lock:
            image = self._image
            live = {b.node_id for b in image.live_brokers()}
            targets: list[tuple[str, int]] = (
                list(partitions)
                if partitions is not None
                else [(t.name, p) for t in image.topics_by_name.values() for p in sorted(t.partitions)]
            )
            results: list[ElectLeaderResult] = []
            records: list[MetadataRecord] = []
            for name, index in targets:
                partition = image.partition(name, index)
                if partition is None:
                    results.append(
                        ElectLeaderResult(
                            name,
                            index,
                            ErrorCode.unknown_topic_or_partition,
                            f"Partition {name}-{index} does not exist.",
                        )
                    )
                    continue
                preferred = next((r for r in partition.replicas if r in live), NO_LEADER)
                if partition.reassigning:
                    results.append(
                        ElectLeaderResult(
                            name,
                            index,
                            ErrorCode.reassignment_in_progress,
                            f"Partition {name}-{index} is being reassigned; its target is elected when the move ends",
                        )
                    )
                elif preferred == NO_LEADER:
                    results.append(
                        ElectLeaderResult(
                            name,
                            index,
                            ErrorCode.eligible_leaders_not_available,
                            f"No live replica of {name}-{index} among {list(partition.replicas)}",
                        )
                    )
                elif partition.leader == preferred:
                    results.append(
                        ElectLeaderResult(
                            name,
                            index,
                            ErrorCode.election_not_needed,
                            f"Partition {name}-{index} already has its preferred leader",
                        )
                    )
                else:
                    records.append(_leader_change(partition, preferred, live))
                    results.append(ElectLeaderResult(name, index, ErrorCode.none))
            await self._commit(records)
            return results


# ---------------------------------------------------------------------- pure helpers


def _without_id(result: CreateTopicResult) -> CreateTopicResult:
    return CreateTopicResult(
        result.name,
        None,
        result.error,
        result.message,
        result.num_partitions,
        result.replication_factor,
        result.configs,
    )


def _leader_change(partition: PartitionImage, leader: int, live: set[int]) -> PartitionChangeRecord:
    return PartitionChangeRecord(
        str(partition.topic_id),
        partition.partition,
        leader=leader,
        leader_epoch=partition.leader_epoch + 1,
        isr=tuple(r for r in partition.replicas if r in live),
    )


def _leadership_on_register(image: MetadataImage, node_id: int) -> list[PartitionChangeRecord]:
    """A (re)registering broker keeps what it led with a bumped leader epoch (so it reopens its streams with a
    strictly higher epoch), takes every leaderless partition it is a replica of, and adopts leaderless partitions
    with no live replica at all: their data is in shared object storage, so any broker can serve them."""
    live = {b.node_id for b in image.live_brokers()} | {node_id}
    changes: list[PartitionChangeRecord] = []
    for topic in image.topics_by_name.values():
        for partition in topic.partitions.values():
            if partition.reassigning:
                continue  # its target is elected when the source closed its streams (controller.reassignment)
            if partition.leader == node_id or (partition.leader == NO_LEADER and node_id in partition.replicas):
                changes.append(_leader_change(partition, node_id, live))
            elif partition.leader == NO_LEADER and not live.intersection(partition.replicas):
                changes.append(_moved(partition, node_id))
    return changes


def _moved(partition: PartitionImage, target: int) -> PartitionChangeRecord:
    """Reassigns a partition whose replicas are all gone to ``target`` alone."""
    return PartitionChangeRecord(
        str(partition.topic_id),
        partition.partition,
        leader=target,
        leader_epoch=partition.leader_epoch + 1,
        isr=(target,),
        replicas=(target,),
    )


def _leadership_on_fence(image: MetadataImage, node_id: int) -> list[PartitionChangeRecord]:
    """Moves every partition ``node_id`` leads: to another live replica, else to the live broker leading the
    fewest partitions, else to no leader (the next broker to register adopts it)."""
    live = {b.node_id for b in image.live_brokers()} - {node_id}
    load = {broker: 0 for broker in live}
    for topic in image.topics_by_name.values():
        for partition in topic.partitions.values():
            if partition.leader in load:
                load[partition.leader] += 1
    changes: list[PartitionChangeRecord] = []
    for _, partition in sorted(image.partitions_led_by(node_id), key=lambda item: (item[0], item[1].partition)):
        candidates = [r for r in partition.replicas if r in live]
        if candidates:
            changes.append(_leader_change(partition, candidates[0], live))
            load[candidates[0]] += 1
        elif load:
            target = min(load, key=lambda broker: (load[broker], broker))
            changes.append(_moved(partition, target))
            load[target] += 1
        else:
            changes.append(
                PartitionChangeRecord(
                    str(partition.topic_id),
                    partition.partition,
                    leader=NO_LEADER,
                    leader_epoch=partition.leader_epoch + 1,
                    isr=(),
                )
            )
    return changes


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
    image: MetadataImage, assignments: Mapping[int, Sequence[int]], factor: int | None = None
) -> list[list[int]]:
    registered = set(image.brokers)
    ordered: list[list[int]] = []
    for expected, index in enumerate(sorted(assignments)):
        if index != expected:
            raise ControllerError(
                ErrorCode.invalid_replica_assignment,
                "Partitions in the manual replica assignment must be consecutive and start at 0.",
            )
        replicas = list(assignments[index])
        if not replicas:
            raise ControllerError(ErrorCode.invalid_replica_assignment, f"Partition {index} has an empty replica list.")
        if len(set(replicas)) != len(replicas):
            raise ControllerError(
                ErrorCode.invalid_replica_assignment, f"Duplicate brokers in the assignment of partition {index}."
            )
        unknown = [r for r in replicas if r not in registered]
        if unknown:
            raise ControllerError(
                ErrorCode.invalid_replica_assignment,
                f"Partition {index} is assigned to broker(s) {unknown} that are not registered.",
            )
        wanted = factor if factor is not None else (len(ordered[0]) if ordered else len(replicas))
        if len(replicas) != wanted:
            raise ControllerError(
                ErrorCode.invalid_replica_assignment,
                f"All partitions must have the same replication factor ({wanted}); partition {index} has "
                f"{len(replicas)}.",
            )
        ordered.append(replicas)
    return ordered


def _apply_config_ops(
    resource: ConfigResource,
    current: Mapping[str, str],
    changes: Mapping[str, str | None],
    incremental_ops: Mapping[str, int] | None,
) -> dict[str, str]:
    """The full set of dynamic configs after the request (before value validation)."""
    if incremental_ops is None:
        return {k: v for k, v in changes.items() if v is not None}
    wanted = dict(current)
    for key, value in changes.items():
        op = incremental_ops.get(key, IncrementalOp.SET)
        if op == IncrementalOp.SET:
            if value is None:
                raise ControllerError(ErrorCode.invalid_request, f"Null value not supported for SET of {key}")
            wanted[key] = value
        elif op == IncrementalOp.DELETE:
            if config_key(resource.type, key) is None:
                kind = "topic" if resource.type == RESOURCE_TOPIC else "broker"
                raise ControllerError(ErrorCode.invalid_config, f"Unknown {kind} config name: {key}")
            wanted.pop(key, None)
        elif op in (IncrementalOp.APPEND, IncrementalOp.SUBTRACT):
            definition = config_key(resource.type, key)
            if definition is None or definition.type is not ConfigType.LIST:
                raise ControllerError(
                    ErrorCode.invalid_config,
                    f"Config value {'append' if op == IncrementalOp.APPEND else 'subtract'} is not allowed for "
                    f"config key: {key}",
                )
            base = wanted.get(key, definition.default_text() or "")
            items = [item for item in base.split(",") if item.strip()]
            given = [item.strip() for item in (value or "").split(",") if item.strip()]
            if op == IncrementalOp.APPEND:
                items.extend(item for item in given if item not in items)
            else:
                items = [item for item in items if item not in given]
            wanted[key] = ",".join(items)
        else:
            raise ControllerError(ErrorCode.invalid_request, f"Unknown incremental config operation {op} for {key}")
    return wanted
