"""The active controller: owns the image, the metadata log and the stream metadata, and implements
``metadata.controller_api.ControllerClient``.

Every write runs under one lock: decide against the current image, append the records to the metadata log
(durable when ``append`` returns), then apply them to a new image and tell subscribers. A write therefore returns
only after its records are durable and visible in :attr:`Controller.image`. Stream/object/KV records come from the
composed stream metadata through its ``sink`` and land in the same log, interleaved in commit order.

The decisions are not made here. As Kafka splits its QuorumController into control managers, each idea has its own
module of pure functions that read the image and return the records to append (or the error to answer):
``controller.decisions.brokers`` (registration, fencing, WAL failover), ``controller.decisions.leadership`` (who leads
each partition), ``controller.decisions.topics`` (topics, partitions, placement), ``controller.decisions.configs``
(AlterConfigs), ``controller.decisions.reassignment`` and ``controller.decisions.balancing`` (the auto-balancer's
moves), ``controller.decisions.controlled_shutdown`` (a stopping broker's partitions moved first, UnregisterBroker).
This class does the I/O around them: the lock, reads of the stream metadata, appends, logs and snapshots, and it runs
the reassignment watch (``controller.reassignment_watch``) and the sweep of deleted topics' streams
(``controller.orphan_streams``); the same decisions serve the Raft quorum's active controller.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence

from kio.schema.errors import ErrorCode

from controller.decisions import balancing, brokers, controlled_shutdown, leadership, reassignment
from controller.decisions.acls import plan_create_acls, plan_delete_acls
from controller.decisions.configs import plan_alter_configs
from controller.decisions.features import plan_update_features
from controller.decisions.scram import plan_scram_alterations
from controller.decisions.topics import plan_create_partitions, plan_create_topics, plan_delete_topics, without_id
from controller.decisions.wal_failover import reassignments
from controller.delegation_tokens import DelegationTokens
from controller.kraft_version import QuorumVersion, raise_kraft_version
from controller.local_snapshots import LocalSnapshots
from controller.metrics import commit_histogram
from controller.orphan_streams import OrphanSweep
from controller.reassignment_watch import Decide, ReassignmentWatch
from metadata.acl.binding import AclBinding, AclBindingFilter
from metadata.client_quotas import QuotaAlteration, QuotaAlterResult, describe_entity, plan_alter_client_quotas
from metadata.cluster_records import NO_LEADER
from metadata.controller_api import (
    AclCreateResult,
    AclDeleteResult,
    ConfigResource,
    CreateTopicResult,
    DeleteTopicResult,
    ElectionType,
    ElectLeaderResult,
    FeatureUpdate,
    FeatureUpdateResult,
    ImageListener,
    NewTopic,
    PartitionReassignment,
    ReassignmentResult,
    ScramAlterResult,
    ScramDeletion,
    ScramUpsertion,
)
from metadata.delegation_tokens import TokenRequest, TokenResult
from metadata.errors import ControllerError
from metadata.image import MetadataImage, is_cluster_record
from metadata.log import LocalMetadataLog, RecordLog, SnapshotPolicy
from metadata.producer_ids import (
    ProducerIdBlock,
    ProducerIdsExhaustedError,
    decode_legacy_floor,
    legacy_kv_key,
    next_block,
)
from metadata.wal_failover import announced_wal_locations
from settings.config_resources import RESOURCE_CLIENT_METRICS, RESOURCE_GROUP, RESOURCE_TOPIC
from settings.endpoint import Endpoint
from settings.meta_properties import ensure_meta_properties
from settings.server import ServerConfig
from storage.metadata.api import NodeIdentity
from storage.metadata.record_codec import MetadataRecord
from storage.metadata.state_machine import StreamMetadataStateMachine, wall_clock_ms
from wire.log_text import LOG_TEXT_MAX, untrusted

logger = logging.getLogger(__name__)

_RESOURCE_KINDS = {RESOURCE_TOPIC: "topic", RESOURCE_CLIENT_METRICS: "client metrics", RESOURCE_GROUP: "group"}


class Controller:
    """The single active controller of the local node (the embedded default), and the state machine the Raft
    quorum's active controller writes through: it implements ``metadata.controller_api.ControllerClient`` directly,
    so the embedded broker calls it without a network hop."""

    def __init__(
        self,
        config: ServerConfig,
        image: MetadataImage,
        log: RecordLog,
        *,
        clock_ms: Callable[[], int] = wall_clock_ms,
        quorum: QuorumVersion | None = None,
        replica: bool = False,
    ) -> None:
        """``replica``: a broker's read-only copy of the metadata, which runs no sweep (it could delete nothing)."""
        self._config = config
        self._replica = replica
        self._quorum = quorum  # the Raft quorum's KIP-853 level, which UpdateFeatures may raise (None: a local log)
        self._image = image
        self._log = log
        self._clock_ms = clock_ms
        self._lock = asyncio.Lock()
        self.commit_seconds = commit_histogram()
        self._listeners: list[ImageListener] = []
        self._streams = self._new_stream_metadata()
        self._snapshots = LocalSnapshots(log, self.snapshot_records)
        self._reassignments = ReassignmentWatch(config, lambda: self._streams, self._decide_and_commit)
        self._tokens = DelegationTokens(config, clock_ms, self._decide_and_commit)
        self._orphans = OrphanSweep(config, lambda: self._streams, lambda: self._image)

    @classmethod
    async def start(cls, config: ServerConfig, *, clock_ms: Callable[[], int] = wall_clock_ms) -> Controller:
        """Opens (formatting on first start) the node's metadata directory and replays its log into a controller.

        Raises ConfigError when the directory belongs to another node, MetadataLogError when the log is unreadable.
        """
        directory = config.metadata_dir
        meta = await asyncio.to_thread(ensure_meta_properties, directory, config.node_id)
        log = LocalMetadataLog.open(directory, SnapshotPolicy.of(config))
        recovered = await asyncio.to_thread(log.recover)
        image = MetadataImage(cluster_id=meta.cluster_id, controller_id=config.node_id)
        controller = cls(config, image, log, clock_ms=clock_ms)
        # One image build for the whole replay (one per batch was half its time); records still apply in log order.
        records = [*recovered.snapshot_records, *(record for batch in recovered.batches for record in batch.records)]
        controller._replay(records, recovered.last_offset)
        controller._tokens.saw(controller.image)
        logger.info("controller %d of cluster %s started at metadata offset %d: %d topics, %d brokers",
                    config.node_id, meta.cluster_id, recovered.last_offset, len(controller.image.topics_by_name),
                    len(controller.image.brokers))
        return controller

    def _new_stream_metadata(self) -> StreamMetadataStateMachine:
        return StreamMetadataStateMachine(
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
        self._tell(old, last_offset)

    def set_controller_id(self, controller_id: int) -> None:
        """Which node is the active controller (what Metadata responses report); not a replicated fact."""
        if self._image.controller_id != controller_id:
            self._image = self._image.with_controller(controller_id)

    async def close(self) -> None:
        """Waits for a running snapshot and closes the log; the controller must not be used afterwards."""
        await self._reassignments.stop()
        await self._tokens.stop()
        await self._orphans.stop()
        async with self._lock:
            await self._snapshots.close()

    # ------------------------------------------------------------------ state

    @property
    def image(self) -> MetadataImage:
        return self._image

    @property
    def config(self) -> ServerConfig:
        return self._config

    @property
    def stream_metadata(self) -> StreamMetadataStateMachine:
        return self._streams

    def subscribe(self, listener: ImageListener) -> None:
        self._listeners.append(listener)

    async def _commit(self, records: Sequence[MetadataRecord]) -> None:
        """Appends durably, then publishes the new image. Callers hold ``self._lock``."""
        if not records:
            return
        last_offset = await self._timed_append(records)
        self._publish(records, last_offset)
        self._snapshots.maybe_start()

    async def _append_stream_records(self, records: Sequence[MetadataRecord]) -> None:
        """The stream metadata's sink: its records share the log (it applies them itself once this returns).

        The image does not hold stream state, but its ``offset`` still advances so that it always names the last
        record of the log, live and after a replay alike; subscribers are not called for an offset-only change.
        """
        last_offset = await self._timed_append(records)
        if last_offset > self._image.offset:
            self._image = self._image.with_offset(last_offset)
        self._reassignments.saw(records)
        self._snapshots.maybe_start()

    async def _timed_append(self, records: Sequence[MetadataRecord]) -> int:
        """Appends to the log (durable, or committed by the quorum), timing it for ``commit_seconds``."""
        started = time.perf_counter()
        last_offset = await self._log.append(records)
        self.commit_seconds.observe(time.perf_counter() - started)
        return last_offset

    def snapshot_records(self) -> list[MetadataRecord]:
        """Records rebuilding the whole metadata state (cluster image, then streams/objects/KV)."""
        records: list[MetadataRecord] = self._image.to_records()
        records.extend(self._streams.snapshot())
        return records

    async def take_snapshot(self) -> int:
        """Snapshots now (tools and tests; normally size-triggered). Returns the snapshot's offset."""
        return await self._snapshots.take()

    def _publish(self, records: Sequence[MetadataRecord], last_offset: int) -> None:
        old = self._image
        self._image = old.apply(records, last_offset)
        self._tell(old, last_offset)

    def _tell(self, old: MetadataImage, last_offset: int) -> None:  # the image's subscribers, and the sweeps
        self._tokens.saw(self._image)
        if not self._replica:
            self._orphans.start()
        for listener in list(self._listeners):
            try:
                listener(old, self._image)
            except Exception:
                logger.exception("metadata image listener %r failed at offset %d", listener, last_offset)

    # ------------------------------------------------------------------ brokers

    async def register_broker(self, node_id: int, listeners: Sequence[Endpoint], rack: str | None) -> int:
        async with self._lock:
            registration = brokers.register(self._image, node_id, listeners, rack, self._clock_ms())
            epoch = registration.epoch
            await self._commit(registration.records)
            await self._streams.register_node(node_id, epoch)
            logger.info(
                "broker %d registered with epoch %d (%s); leads %d partitions",
                node_id,
                epoch,
                untrusted(", ".join(f"{e.name}://{e.host}:{e.port}" for e in listeners), 4 * LOG_TEXT_MAX)
                or "no listeners",
                len(self._image.partitions_led_by(node_id)),
            )
            return epoch

    async def fence_broker(self, node_id: int, epoch: int, *, session_expired: bool = False) -> bool:
        """Fences ``node_id`` (session timeout or controlled shutdown) and moves the partitions it leads; False if
        ``epoch`` is not its current registration (a late request from an older incarnation changes nothing).

        A broker fenced because its session expired may have died with acknowledged records only in its WAL: if
        that WAL is in the shared S3 WAL bucket, the same write assigns it to a live broker to replay
        (``controller.decisions.wal_failover``). A controlled shutdown uploaded and closed everything first."""
        async with self._lock:
            image = self._image
            if not brokers.is_current(image, node_id, epoch):
                logger.info("fence of broker %d epoch %d ignored: not its current registration", node_id, epoch)
                return False
            locations = await self.wal_locations() if session_expired else None
            fencing = brokers.fence(image, node_id, epoch, locations)
            await self._commit(fencing.records)
            logger.info("broker %d (epoch %d) fenced; %d partitions moved", node_id, epoch, fencing.moved)
            failover = self._image.wal_failovers.get(node_id)
            if session_expired and failover is not None and failover.pending and failover.node_epoch == epoch:
                if failover.target_id >= 0:
                    logger.info("WAL of broker %d (epoch %d) assigned to broker %d for failover (attempt %d)",
                                node_id, epoch, failover.target_id, failover.attempt)
                else:
                    logger.warning("WAL of broker %d (epoch %d) needs a failover but no live broker shares its WAL "
                                   "bucket; it is assigned as soon as one is", node_id, epoch)
            return True

    async def wal_locations(self) -> dict[int, str]:
        """Where each registered broker's S3 WAL lives, as it announced it (brokers with a file WAL have none)."""
        return await announced_wal_locations(self._streams.get_kv, self._image.brokers)

    async def reconcile_wal_failovers(self) -> int:
        """Gives every pending WAL failover whose target is gone (fenced, restarted, never found) to a live broker;
        the active controller calls it periodically. Returns how many assignments changed."""
        async with self._lock:
            image = self._image
            if not any(f.pending for f in image.wal_failovers.values()):
                return 0
            records = reassignments(image, await self.wal_locations())
            await self._commit(records)
            for record in records:
                logger.info("WAL failover of broker %d (epoch %d) reassigned to broker %d (attempt %d)",
                            record.node_id, record.node_epoch, record.target_id, record.attempt)
            return len(records)

    async def complete_wal_failover(self, node: NodeIdentity, failed_node_id: int, failed_node_epoch: int) -> None:
        """The target reports the failover of ``failed_node_id``'s WAL done; idempotent. NodeEpochExpiredError
        when ``node`` is not (or no longer) the assigned target (``controller.decisions.brokers.wal_failover_done``)."""
        async with self._lock:
            record = brokers.wal_failover_done(self._image, node, failed_node_id, failed_node_epoch)
            if record is None:
                return
            await self._commit([record])
            logger.info("WAL failover of broker %d (epoch %d) done by broker %d", failed_node_id,
                        failed_node_epoch, node.node_id)

    async def unfence_broker(self, node_id: int, epoch: int) -> bool:
        """Unfences ``node_id`` (it heartbeats again and caught up with the metadata log) and gives it the
        partitions it should lead; False if ``epoch`` is not its current registration or it is not fenced."""
        async with self._lock:
            records = brokers.unfence(self._image, node_id, epoch)
            if records is None:
                return False
            await self._commit(records)
            logger.info("broker %d (epoch %d) unfenced; it now leads %d partitions", node_id, epoch,
                        len(self._image.partitions_led_by(node_id)))
            return True

    async def controlled_shutdown(self, node_id: int, epoch: int) -> int:
        """A ``wantShutDown`` heartbeat of ``node_id`` (current registration ``epoch``, unfenced): it enters
        controlled shutdown and the partitions it leads start moving to other brokers
        (``controller.decisions.controlled_shutdown``). Returns how many are still to move: 0 means it may stop."""
        async with self._lock:
            exclude = balancing.effective_settings(self._config, self._image).exclude_brokers
            shutdown = controlled_shutdown.plan(self._image, node_id, epoch, exclude)
            await self._commit(shutdown.records)
        if shutdown.started:
            logger.info("broker %d (epoch %d) is in controlled shutdown: no leadership, %d partitions to move, %d WAL "
                        "failovers to end", node_id, epoch, shutdown.remaining - shutdown.failovers, shutdown.failovers)
        for move in shutdown.moves:
            logger.info("controlled shutdown of broker %d: moving %s-%d to broker %d", node_id, move.topic,
                        move.partition, move.target)
        if shutdown.moves:
            self.watch_reassignments()
        return shutdown.remaining

    async def unregister_broker(self, node_id: int) -> None:
        """UnregisterBroker: removes a stopped broker from the cluster; ControllerError when refused
        (``controller.decisions.controlled_shutdown.unregister``)."""
        async with self._lock:
            record = controlled_shutdown.unregister(self._image, node_id)
            await self._commit([record])
        logger.info("broker %d (epoch %d) unregistered", node_id, record.epoch)

    # ------------------------------------------------------------------ producer ids

    async def allocate_producer_ids(self, broker_id: int, broker_epoch: int) -> ProducerIdBlock:
        """AllocateProducerIds: a block of producer ids no other broker was or will be given, durable in the
        metadata log before it is returned. ControllerError for an unknown broker, a stale epoch, or when the id
        space is exhausted."""
        async with self._lock:
            image = self._image
            brokers.check_producer_ids_request(image, broker_id, broker_epoch)
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
            plan = plan_create_topics(self._image, self._config, topics)
            if not validate_only:
                await self._commit(plan.records)
            results: list[CreateTopicResult] = plan.results
            if validate_only:
                results = [without_id(r) for r in results]
            for result in results:
                if result.error is ErrorCode.none and not validate_only:
                    logger.info("created topic %s (id %s) with %d partitions", result.name, result.topic_id,
                                result.num_partitions)
            return results

    async def delete_topics(self, names: Sequence[str] = (), ids: Sequence[uuid.UUID] = ()) -> list[DeleteTopicResult]:
        async with self._lock:
            deletion = plan_delete_topics(self._image, self._config, names, ids)
            await self._commit(deletion.records)
            for topic_id, name in deletion.deleted.items():
                logger.info("deleted topic %s (id %s)", name, topic_id)
            return deletion.results

    async def create_partitions(
        self, topic: str, count: int, assignments: Sequence[Sequence[int]] | None, validate_only: bool
    ) -> tuple[ErrorCode, str | None]:
        async with self._lock:
            try:
                records = plan_create_partitions(self._image, topic, count, assignments)
            except ControllerError as exc:
                return exc.error, exc.message
            if validate_only:
                return ErrorCode.none, None
            await self._commit(records)
            logger.info("topic %s now has %d partitions (was %d)", topic, count, count - len(records))
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
                records = plan_alter_configs(self._image, resource, changes, incremental_ops, self._config)
            except ControllerError as exc:
                return exc.error, exc.message
            if not validate_only:
                await self._commit(records)
                if records:
                    changed = untrusted(", ".join(f"{r.name}={r.value}" for r in records), 4 * LOG_TEXT_MAX)
                    logger.info("configs of %s '%s' changed: %s", _RESOURCE_KINDS.get(resource.type, "broker"),
                                untrusted(resource.name), changed)
            return ErrorCode.none, None

    # ------------------------------------------------------------------ SCRAM credentials

    async def alter_user_scram_credentials(
        self, deletions: Sequence[ScramDeletion], upsertions: Sequence[ScramUpsertion]
    ) -> list[ScramAlterResult]:
        async with self._lock:
            plan = plan_scram_alterations(self._image, deletions, upsertions)
            await self._commit(plan.records)
        for result in plan.results:  # a user name, and a message quoting it, are what a client sent: escaped, capped
            done = "altered" if result.error is ErrorCode.none else f"not altered: {result.message}"
            logger.info("SCRAM credentials of user '%s' %s", untrusted(result.user), untrusted(done, 4 * LOG_TEXT_MAX))
        return plan.results

    async def change_delegation_token(self, request: TokenRequest) -> TokenResult:
        return await self._tokens.change(request)

    # ------------------------------------------------------------------ client quotas

    async def alter_client_quotas(
        self, alterations: Sequence[QuotaAlteration], validate_only: bool
    ) -> list[QuotaAlterResult]:
        async with self._lock:
            plan = plan_alter_client_quotas(self._image.client_quotas, alterations)
            if not validate_only:
                await self._commit(plan.records)
        for alteration, result in zip(alterations, plan.results, strict=True):  # a client's names: escaped, capped
            entity = untrusted(describe_entity(alteration.entity), 4 * LOG_TEXT_MAX)
            if result.error is not ErrorCode.none:
                logger.info("client quotas of %s not altered: %s", entity, untrusted(result.message, 4 * LOG_TEXT_MAX))
            elif not validate_only:
                logger.info("client quotas of %s altered: %s", entity, untrusted(
                    ", ".join(f"{k}={'removed' if v is None else v}" for k, v in alteration.ops), 4 * LOG_TEXT_MAX))
        return plan.results

    # ------------------------------------------------------------------ features

    async def update_features(self, updates: Sequence[FeatureUpdate], validate_only: bool) -> list[FeatureUpdateResult]:
        quorum = self._quorum
        async with self._lock:
            plan = plan_update_features(self._image, updates, quorum.kraft_version if quorum is not None else 0,
                                        may_write_voters=quorum is not None)
            plan = await raise_kraft_version(plan, quorum, updates, validate_only)
            if not validate_only:
                await self._commit(plan.records)
        if plan.records and not validate_only:
            logger.info("features finalized: %s", ", ".join(f"{u.feature}={u.level}" for u in updates))
        return plan.results

    # ------------------------------------------------------------------ ACLs

    async def create_acls(self, bindings: Sequence[AclBinding]) -> list[AclCreateResult]:
        async with self._lock:
            plan = plan_create_acls(self._image.acls, bindings)
            await self._commit(plan.records)
        for binding, result in zip(bindings, plan.results, strict=True):  # a client's names: escaped, capped
            described = untrusted(binding.describe(), 4 * LOG_TEXT_MAX)
            if result.error is ErrorCode.none:
                logger.info("ACL %s created", described)
            else:
                logger.info("ACL %s not created: %s", described, untrusted(result.message, 4 * LOG_TEXT_MAX))
        return plan.results

    async def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[AclDeleteResult]:
        async with self._lock:
            plan = plan_delete_acls(self._image.acls, filters)
            await self._commit(plan.records)
        for result in plan.results:
            for binding in result.deleted:
                logger.info("ACL %s deleted", untrusted(binding.describe(), 4 * LOG_TEXT_MAX))
        return plan.results

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

    async def rebalance(self, decide: Callable[[MetadataImage], balancing.Decision]) -> balancing.Decision:
        """Starts the moves ``decide`` (``controller.decisions.balancing.plan``) chooses on the current image, deciding
        and committing under the write lock so that no request (an operator's reassignment) changes the image between
        the two; ``controller.auto_balancer`` calls it and logs the moves."""
        async with self._lock:
            image = self._image
            decision = decide(image)
            await self._commit([reassignment.start(move.partition, move.target) for move in decision.moves])
        if decision.moves:
            self.watch_reassignments()
        return decision

    def watch_reassignments(self) -> None:
        """Runs the reassignment watch unless it runs already; the active controller calls it after a
        reassignment and when it takes over (moves a previous active controller started)."""
        self._reassignments.start()

    async def complete_reassignments(self) -> int:
        """Elects the targets whose source let go (``controller.reassignment_watch``); how many still wait."""
        return await self._reassignments.complete()

    async def _decide_and_commit(self, decide: Decide) -> None:
        """One write of the reassignment watch: decided against the current image and committed under the lock."""
        async with self._lock:
            await self._commit(await decide(self._image))

    # ------------------------------------------------------------------ leadership

    async def elect_leaders(
        self, partitions: Sequence[tuple[str, int]] | None, election_type: int = ElectionType.PREFERRED
    ) -> list[ElectLeaderResult]:
        async with self._lock:
            election = leadership.elect(self._image, partitions, election_type)
            await self._commit(election.records)
            kind = "unclean" if election_type == ElectionType.UNCLEAN else "preferred"
            for result, record in zip((r for r in election.results if r.error is ErrorCode.none), election.records,
                                      strict=True):
                logger.info("%s election: broker %d leads %s-%d", kind, record.leader, result.topic, result.partition)
            return election.results
