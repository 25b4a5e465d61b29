"""`ControllerClient` for a broker of a cluster (``process.roles=broker``): the controller quorum over the network.

:class:`RemoteControllerClient` ties the parts of ``metadata.remote`` together: it reads the image of its
:class:`~metadata.remote.follower.MetadataFollower`; admin writes (topics, partitions, configs, reassignments) are
forwarded through the :class:`~metadata.remote.channel.ActiveControllerChannel` as the Kafka requests brokers
forward in KRaft, built and read by ``metadata.admin``'s translations (the ones the controller answers them with);
stream and object operations are Fjord's own RPCs (:class:`~metadata.remote.stream_metadata.RemoteStreamMetadata`);
registration and the heartbeat timer are BrokerRegistration / BrokerHeartbeat.

`ControllerClient` promises that a write's effects are in :attr:`RemoteControllerClient.image` when it returns, so
every image-changing write ends with a *barrier*: the active controller's high watermark (DescribeQuorum) is read
after the write and the replica waits until it has applied everything below it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from metadata.acl.binding import AclBinding, AclBindingFilter
from metadata.admin import acl_wire, config_wire, feature_wire, quota_wire, scram_wire, topic_wire
from metadata.broker_load import REPORT_INTERVAL, PartitionKey, rates
from metadata.client_quotas import QuotaAlteration, QuotaAlterResult
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
from metadata.image import MetadataImage
from metadata.producer_ids import ProducerIdBlock
from metadata.remote.channel import ActiveControllerChannel, ControllerUnavailableError, quorum_leader_redirect
from metadata.remote.follower import MetadataFollower
from metadata.remote.stream_metadata import RemoteStreamMetadata
from metadata.rpc.kafka_apis import (
    ALLOCATE_PRODUCER_IDS,
    BROKER_HEARTBEAT,
    BROKER_REGISTRATION,
    DESCRIBE_QUORUM,
    UNREGISTER_BROKER,
)
from metadata.rpc.raft_codec import describe_quorum_request
from metadata.rpc.stream_rpcs import ChangeDelegationToken, CompleteWALFailover, ReportBrokerLoad
from settings.endpoint import Endpoint
from settings.meta_properties import ensure_quorum_meta_properties
from settings.server import ServerConfig
from storage.config import ConfigError
from storage.errors import StorageError
from storage.metadata.api import NodeIdentity
from wire import codec, schema

logger = logging.getLogger(__name__)

_SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}
_BROKER_REGISTRATION_VERSION = 2
_ALLOCATE_PRODUCER_IDS_VERSION = 0
_BROKER_HEARTBEAT_VERSION = 1
_UNREGISTER_BROKER_VERSION = 0
_DESCRIBE_QUORUM_VERSION = 2
_ADMIN_TIMEOUT_MS = 30_000


class RemoteControllerClient:
    """The broker's `ControllerClient` in a cluster; build it with :meth:`start`, stop it with :meth:`close`."""

    def __init__(
        self, config: ServerConfig, cluster_id: str, replica: MetadataFollower, directory_id: str | None = None
    ) -> None:
        """``replica``: where the committed metadata is read: a broker-only node's Raft observer of its own, or a
        combined node's voter, whose applied state the broker reads while it sends its writes to the active
        controller like any broker (the node builds either: ``node.controller_handle``)."""
        self.config = config
        self.node_id = config.node_id
        self.cluster_id = cluster_id
        voters = {v.node_id: (v.host, v.port) for v in config.voters}
        self.replica = replica
        request_s = int(config.value("controller.quorum.request.timeout.ms")) / 1000
        retry_budget_s = max(int(config.value("request.timeout.ms")) / 1000, 2 * request_s)
        # Kafka's NodeToControllerChannelManager bounds each attempt by min(controller.socket.timeout.ms, its retry
        # timeout); Fjord's attempts are shorter by default (a dead controller is left after the quorum's request
        # timeout), and controller.socket.timeout.ms caps them as Kafka's does.
        socket_s = int(config.value("controller.socket.timeout.ms")) / 1000
        self.channel = ActiveControllerChannel(
            voters,
            client_id=f"broker-{self.node_id}",
            request_timeout_s=request_s,
            retry_budget_s=retry_budget_s,
            max_attempt_s=min(socket_s, retry_budget_s),
            leader_hint=lambda: self.replica.leader_id,
            ssl_context=config.controller_client_tls(),
            sasl=config.controller_client_sasl(),
        )
        replica.watch_voters(self.channel.update_voters)  # a controller added later is reached too (KIP-853)
        self._stream_metadata = RemoteStreamMetadata(self.channel, self.node_id, lambda: self.node_epoch,
                                                     self.wait_unfenced)
        self.node_epoch = -1
        self.is_fenced = True
        self._heartbeat_interval_s = config.broker_heartbeat_interval_ms / 1000
        self._session_timeout_s = config.broker_session_timeout_ms / 1000
        self._heartbeat_task: asyncio.Task[None] | None = None
        self._incarnation = uuid.uuid4()
        #: The metadata directory's ``directory.id``, sent as the registration's log directory: the controller tells
        #: this broker restarting from its directory from another live broker with its node.id by it.
        self._directory = uuid.UUID(bytes=base64.urlsafe_b64decode(directory_id + "==")) if directory_id else None
        self._heartbeat_error: ErrorCode | None = None  # the last refusal, logged once rather than every beat
        self._want_shutdown = False  # in controlled shutdown: every heartbeat asks for it
        self._want_fence = False  # handing over (its WAL cannot write): every heartbeat asks to stay fenced
        self._may_shut_down = asyncio.Event()  # the controller answered shouldShutDown
        self._load_task: asyncio.Task[None] | None = None

    @classmethod
    async def start(
        cls,
        config: ServerConfig,
        follower: Callable[[str], MetadataFollower],
        *,
        catch_up_timeout_s: float = 60.0,
    ) -> RemoteControllerClient:
        """Formats or checks the metadata directory, starts the follower (``follower(cluster_id)``: an observer of
        the metadata log, or the combined node's voter) and waits until it has caught up with the quorum's
        committed metadata (bounded: a quorum without a leader is a clear error, not a hang)."""
        meta = await asyncio.to_thread(ensure_quorum_meta_properties, config)
        cluster_id = meta.cluster_id
        client = cls(config, cluster_id, follower(cluster_id), meta.directory_id)
        await client.replica.start()
        try:
            await client.sync(timeout=catch_up_timeout_s, what="catch up with the metadata log")
        except BaseException:
            await client.close()
            raise
        logger.info("broker %d replayed the metadata log of cluster %s to offset %d", client.node_id, cluster_id,
                    client.image.offset)
        return client

    async def close(self) -> None:
        """Stops heartbeating (telling the controller the broker is going, so its partitions move now rather
        than after the session timeout) and stops the replica."""
        if self._load_task is not None:
            self._load_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._load_task
            self._load_task = None
        if self._heartbeat_task is not None:
            self._heartbeat_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeat_task
            self._heartbeat_task = None
            # A broker that asked to hand over (its WAL could not write, or it stopped leaving its tail in its WAL)
            # asks it once more, without wantShutDown: the fence then gives its WAL to another broker to replay.
            handing_over = self._want_fence
            if handing_over:
                self._want_shutdown = False
            with contextlib.suppress(StorageError, OSError, TimeoutError):
                await self._heartbeat(want_fence=True, want_shutdown=not handing_over,
                                      budget_s=min(5.0, self._session_timeout_s))
        await self.channel.close()
        await self.replica.stop()

    async def failed(self) -> Exception:
        """Returns once the broker's copy of the metadata stopped following the quorum for good
        (:meth:`MetadataFollower.failed`)."""
        return await self.replica.failed()

    # ---- ControllerClient: reads ---------------------------------------------------------------------------
    @property
    def image(self) -> MetadataImage:
        return self.replica.image

    def subscribe(self, listener: ImageListener) -> None:
        self.replica.subscribe(listener)

    @property
    def stream_metadata(self) -> RemoteStreamMetadata:
        return self._stream_metadata

    async def sync(self, *, timeout: float = 30.0, what: str = "wait for the metadata") -> None:
        """The barrier: reads the active controller's high watermark and waits until the replica has applied
        everything below it, so writes acknowledged before this call are in :attr:`image`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        response = await self.channel.kafka(
            DESCRIBE_QUORUM, _DESCRIBE_QUORUM_VERSION, what, budget_s=timeout,
            redirect=quorum_leader_redirect, idempotent=True, topics=describe_quorum_request().topics,
        )
        partition = response.topics[0].partitions[0]
        end = int(partition.high_watermark)
        try:
            await self.replica.wait_applied(end, max(0.1, deadline - loop.time()))
        except TimeoutError:
            raise ControllerUnavailableError(
                f"broker {self.node_id} could not {what}: metadata applied to offset {self.replica.applied_end}, "
                f"the active controller's high watermark is {end}"
            ) from None

    @property
    def kraft_version(self) -> int:
        return self.replica.kraft_version

    async def forward_to_quorum_leader(self, api_key: int, version: int, request: Any) -> Any:
        """Sends a client's request (DescribeQuorum, AddRaftVoter, RemoveRaftVoter) unchanged to the Raft leader and
        returns its answer."""
        fields = {name: getattr(request, name) for name in type(request).__dataclass_fields__}
        return await self.channel.kafka(api_key, version, f"forward api key {api_key} v{version}",
                                        redirect=quorum_leader_redirect, **fields)

    # ---- brokers -------------------------------------------------------------------------------------------
    async def register_broker(self, node_id: int, listeners: Sequence[Endpoint], rack: str | None) -> int:
        cls = codec.request_class(BROKER_REGISTRATION, _BROKER_REGISTRATION_VERSION)
        entries = tuple(
            schema.build_nested(cls, "listeners", name=e.name, host=e.host, port=e.port,
                               security_protocol=_SECURITY_PROTOCOL_IDS.get(e.security_protocol, 0))
            for e in listeners
        )
        loop = asyncio.get_running_loop()
        # The controller's session timeout is its own setting: wait well past this node's.
        patience_s = 3 * self._session_timeout_s + 2 * self._heartbeat_interval_s
        deadline, warned = loop.time() + patience_s, False
        while True:
            response = await self.channel.kafka(
                BROKER_REGISTRATION, _BROKER_REGISTRATION_VERSION, f"register broker {node_id}",
                broker_id=node_id, cluster_id=self.cluster_id, incarnation_id=self._incarnation,
                listeners=entries, rack=rack, log_dirs=(self._directory,) if self._directory else (),
            )
            code = ErrorCode(int(response.error_code))
            if code is not ErrorCode.duplicate_broker_registration:
                break
            # Another live broker holds node_id's registration from another directory: as Kafka's broker, wait
            # for its session to end (this node restarted elsewhere after a crash), but a broker that keeps
            # heartbeating is another one with this node.id, and this start fails.
            if loop.time() >= deadline:
                raise ConfigError(
                    f"node.id {node_id}: another broker with this node.id and other log directories is registered and "
                    f"alive (it kept heartbeating for {patience_s:.0f} s): give each broker its own node.id"
                )
            if not warned:
                warned = True
                logger.warning("broker %d: another live broker is registered with node.id %d from other log "
                               "directories; waiting up to %.0f s for its session to end", node_id, node_id,
                               deadline - loop.time())
            await asyncio.sleep(min(1.0, self._heartbeat_interval_s))
        if code is not ErrorCode.none:
            raise ConfigError(f"broker {node_id}: the controller refused the registration: {code.name}")
        epoch = int(response.broker_epoch)
        self.node_epoch = epoch
        await self.sync(what=f"see broker {node_id}'s registration")
        self.is_fenced = False
        if self._heartbeat_task is None:
            self._heartbeat_task = asyncio.create_task(self._heartbeat_loop(), name=f"broker-{node_id}-heartbeat")
        return epoch

    async def request_controlled_shutdown(self, timeout_s: float) -> bool:
        """Asks the controller to move every partition this broker leads to other brokers before it stops
        (``controller.decisions.controlled_shutdown``), heartbeating with ``wantShutDown`` until the answer is
        ``shouldShutDown``; False if that did not come within ``timeout_s``, or no controller answered for a
        session timeout (it fences this broker anyway), or the broker is no longer registered (the caller stops
        anyway)."""
        self._want_shutdown = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        answered = loop.time()
        interval = min(self._heartbeat_interval_s, 0.25)
        while not self._may_shut_down.is_set():
            left = deadline - loop.time()
            if left <= 0 or loop.time() - answered > self._session_timeout_s:
                return False
            try:
                await self._heartbeat(want_shutdown=True, budget_s=max(0.1, min(left, self._heartbeat_interval_s)))
                answered = loop.time()
            except ControllerUnavailableError as exc:
                logger.info("broker %d: controlled-shutdown heartbeat failed: %s", self.node_id, exc)
            if self._heartbeat_error is not None:
                return False  # no longer registered as this incarnation: there is nothing to hand over
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._may_shut_down.wait(), max(0.0, min(interval, deadline - loop.time())))
        return True

    async def unregister_broker(self, node_id: int) -> None:
        """UnregisterBroker (api key 64) to the active controller; ControllerError with its code when refused."""
        response = await self.channel.kafka(
            UNREGISTER_BROKER, _UNREGISTER_BROKER_VERSION, f"unregister broker {node_id}", broker_id=node_id
        )
        code = ErrorCode(int(response.error_code))
        if code is not ErrorCode.none:
            raise ControllerError(code, response.error_message or code.name)
        await self._sync_after(f"see broker {node_id} unregistered")

    def want_fence(self, wanted: bool) -> None:
        """Hand-over (``broker.wal_handover``): from the next heartbeat on, ask the controller to fence this broker
        (``wantFence`` without ``wantShutDown``: its partitions move and its WAL is replayed elsewhere), or, once
        its WAL writes again, stop asking so that the controller unfences it."""
        self._want_fence = wanted

    async def _heartbeat(self, *, want_fence: bool = False, want_shutdown: bool = False, budget_s: float) -> None:
        want_shutdown = want_shutdown or self._want_shutdown
        want_fence = want_fence or self._want_fence
        response = await self.channel.kafka(
            BROKER_HEARTBEAT, _BROKER_HEARTBEAT_VERSION, f"heartbeat of broker {self.node_id}",
            budget_s=budget_s, idempotent=True, broker_id=self.node_id, broker_epoch=self.node_epoch,
            current_metadata_offset=self.image.offset, want_fence=want_fence, want_shut_down=want_shutdown,
        )
        code = ErrorCode(int(response.error_code))
        if code is not ErrorCode.none:
            if code is not self._heartbeat_error:
                logger.error("broker %d (epoch %d): heartbeat refused with %s; restart the broker to register again",
                             self.node_id, self.node_epoch, code.name)
            self._heartbeat_error = code
            return
        self._heartbeat_error = None
        if want_shutdown and bool(response.should_shut_down):
            self._may_shut_down.set()
        fenced = bool(response.is_fenced)
        if fenced != self.is_fenced and not want_shutdown:
            logger.warning("broker %d is %s by the controller", self.node_id, "fenced" if fenced else "unfenced")
        self.is_fenced = fenced

    async def wait_unfenced(self, node: NodeIdentity) -> bool:
        """Heartbeats until the controller lifts a session fence on ``node`` (this broker at its current epoch);
        False at once for another identity or a superseded registration, or after twice the session timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 2 * self._session_timeout_s
        while loop.time() < deadline:
            registered = self.image.brokers.get(self.node_id)
            if node != NodeIdentity(self.node_id, self.node_epoch) or (
                registered is not None and registered.epoch != self.node_epoch
            ):
                return False
            try:
                await self._heartbeat(budget_s=self._heartbeat_interval_s)
            except ControllerUnavailableError as exc:
                logger.info("broker %d: heartbeat while fenced failed: %s", self.node_id, exc)
            if not self.is_fenced:
                return True
            await asyncio.sleep(self._heartbeat_interval_s)
        return False

    async def _heartbeat_loop(self) -> None:
        """Heartbeats every ``broker.heartbeat.interval.ms``; a failed round is logged and the next one tried
        (the controller fences a broker silent for its session timeout, which is what should happen)."""
        while True:
            await asyncio.sleep(self._heartbeat_interval_s)
            try:
                await self._heartbeat(budget_s=self._heartbeat_interval_s)
            except ControllerUnavailableError as exc:
                logger.warning("broker %d: heartbeat failed: %s", self.node_id, exc)
            except Exception:
                logger.exception("broker %d: heartbeat failed", self.node_id)

    # ---- load reports ----------------------------------------------------------------------------------------
    def report_load_from(self, counters: Callable[[], Mapping[PartitionKey, tuple[int, int]]]) -> None:
        if self._load_task is None:
            self._load_task = asyncio.create_task(self._load_report_loop(counters),
                                                  name=f"broker-{self.node_id}-load-reports")

    async def _load_report_loop(self, counters: Callable[[], Mapping[PartitionKey, tuple[int, int]]]) -> None:
        """Every reporting interval, the rates since the previous report (ReportBrokerLoad). A report the controller
        does not get is logged and skipped: the next one carries the next window, and the balancer ignores a
        broker whose reports stopped rather than plan on old numbers."""
        interval_ms = int(self.config.value(REPORT_INTERVAL))
        interval_s = interval_ms / 1000
        loop = asyncio.get_running_loop()
        previous, then = dict(counters()), loop.time()
        while True:
            await asyncio.sleep(interval_s)
            current, now = dict(counters()), loop.time()
            partitions = rates(previous, current, now - then)
            previous, then = current, now
            request = ReportBrokerLoad(NodeIdentity(self.node_id, self.node_epoch), tuple(partitions), interval_ms)
            try:
                await self.channel.stream(request, f"report the load of broker {self.node_id}")
            except (ControllerUnavailableError, StorageError, OSError, TimeoutError) as exc:
                logger.info("broker %d: load report of %d partitions not delivered: %s", self.node_id,
                            len(partitions), exc)

    # ---- admin writes --------------------------------------------------------------------------------------
    async def create_topics(self, topics: Sequence[NewTopic], validate_only: bool) -> list[CreateTopicResult]:
        names = ", ".join(t.name for t in topics)
        request = topic_wire.create_topics_request(topics, validate_only, _ADMIN_TIMEOUT_MS)
        try:
            response = await self.channel.request(request, f"create topics {names}")
        except ControllerUnavailableError as exc:
            return topic_wire.create_topics_refused(topics, ErrorCode.not_controller, str(exc))
        results = topic_wire.read_create_topics_response(response)
        if not validate_only and any(r.error is ErrorCode.none for r in results):
            await self._sync_after(f"see topics {names}")
        return results

    async def delete_topics(self, names: Sequence[str] = (), ids: Sequence[uuid.UUID] = ()) -> list[DeleteTopicResult]:
        request = topic_wire.delete_topics_request(names, ids, _ADMIN_TIMEOUT_MS)
        try:
            response = await self.channel.request(request, "delete topics")
        except ControllerUnavailableError as exc:
            return topic_wire.delete_topics_refused(names, ids, ErrorCode.not_controller, str(exc))
        results = topic_wire.read_delete_topics_response(response)
        if any(r.error is ErrorCode.none for r in results):
            await self._sync_after("see deleted topics")
        return results

    async def create_partitions(
        self, topic: str, count: int, assignments: Sequence[Sequence[int]] | None, validate_only: bool
    ) -> tuple[ErrorCode, str | None]:
        request = topic_wire.create_partitions_request(topic, count, assignments, validate_only, _ADMIN_TIMEOUT_MS)
        try:
            response = await self.channel.request(request, f"create partitions of {topic}")
        except ControllerUnavailableError as exc:
            return ErrorCode.not_controller, str(exc)
        code, message = topic_wire.read_create_partitions_response(response)
        if code is ErrorCode.none and not validate_only:
            await self._sync_after(f"see the new partitions of {topic}")
        return code, message

    async def alter_configs(
        self,
        resource: ConfigResource,
        changes: Mapping[str, str | None],
        *,
        incremental_ops: Mapping[str, int] | None,
        validate_only: bool,
    ) -> tuple[ErrorCode, str | None]:
        what = f"alter configs of resource type {resource.type} {resource.name!r}"
        request = config_wire.alter_configs_request(resource, changes, incremental_ops, validate_only)
        try:
            response = await self.channel.request(request, what)
        except ControllerUnavailableError as exc:
            return ErrorCode.not_controller, str(exc)
        code, message = config_wire.read_alter_configs_response(response)
        if code is ErrorCode.none and not validate_only:
            await self._sync_after(what)
        return code, message

    async def alter_partition_reassignments(
        self, reassignments: Sequence[PartitionReassignment]
    ) -> list[ReassignmentResult]:
        request = topic_wire.alter_partition_reassignments_request(reassignments)
        try:
            response = await self.channel.request(request, "reassign partitions")
        except ControllerUnavailableError as exc:
            return topic_wire.reassignments_refused(reassignments, ErrorCode.not_controller, str(exc))
        results = topic_wire.read_alter_partition_reassignments_response(response, reassignments)
        if any(r.error is ErrorCode.none for r in results):
            await self._sync_after("see the reassigned partitions")
        return results

    async def alter_user_scram_credentials(
        self, deletions: Sequence[ScramDeletion], upsertions: Sequence[ScramUpsertion]
    ) -> list[ScramAlterResult]:
        request = scram_wire.alter_user_scram_credentials_request(deletions, upsertions)
        try:
            response = await self.channel.request(request, "alter SCRAM credentials")
        except ControllerUnavailableError as exc:
            return scram_wire.scram_results_refused(deletions, upsertions, ErrorCode.not_controller, str(exc))
        results = scram_wire.read_alter_user_scram_credentials_response(response)
        if any(r.error is ErrorCode.none for r in results):
            await self._sync_after("see the altered SCRAM credentials")
        return results

    async def alter_client_quotas(
        self, alterations: Sequence[QuotaAlteration], validate_only: bool
    ) -> list[QuotaAlterResult]:
        request = quota_wire.alter_client_quotas_request(alterations, validate_only)
        try:
            response = await self.channel.request(request, "alter client quotas")
        except ControllerUnavailableError as exc:
            return quota_wire.alter_client_quotas_refused(alterations, ErrorCode.not_controller, str(exc))
        results = quota_wire.read_alter_client_quotas_response(response, alterations)
        if not validate_only and any(r.error is ErrorCode.none for r in results):
            await self._sync_after("see the altered client quotas")
        return results

    async def update_features(self, updates: Sequence[FeatureUpdate], validate_only: bool) -> list[FeatureUpdateResult]:
        try:
            request = feature_wire.update_features_request(updates, validate_only)
            response = await self.channel.request(request, "update features")
        except ControllerUnavailableError as exc:
            return feature_wire.update_features_refused(updates, ErrorCode.not_controller, str(exc))
        results = feature_wire.read_update_features_response(response, updates)
        if not validate_only and all(r.error is ErrorCode.none for r in results):
            await self._sync_after("see the finalized features")
        return results

    async def create_acls(self, bindings: Sequence[AclBinding]) -> list[AclCreateResult]:
        try:
            response = await self.channel.request(acl_wire.create_acls_request(bindings), "create ACLs")
        except ControllerUnavailableError as exc:
            return acl_wire.create_acls_refused(bindings, ErrorCode.not_controller, str(exc))
        results = acl_wire.read_create_acls_response(response, bindings)
        if any(r.error is ErrorCode.none for r in results):
            await self._sync_after("see the created ACLs")
        return results

    async def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[AclDeleteResult]:
        try:
            response = await self.channel.request(acl_wire.delete_acls_request(filters), "delete ACLs")
        except ControllerUnavailableError as exc:
            return acl_wire.delete_acls_refused(filters, ErrorCode.not_controller, str(exc))
        results = acl_wire.read_delete_acls_response(response, filters)
        if any(r.deleted for r in results):
            await self._sync_after("see the deleted ACLs")
        return results

    async def elect_leaders(
        self, partitions: Sequence[tuple[str, int]] | None, election_type: int = ElectionType.PREFERRED
    ) -> list[ElectLeaderResult]:
        """ElectLeaders, forwarded to the active controller as KRaft brokers do."""
        ask = topic_wire.ElectLeadersAsk(election_type, None if partitions is None else tuple(partitions))
        try:
            response = await self.channel.request(topic_wire.elect_leaders_request(ask), "elect leaders")
        except ControllerUnavailableError as exc:
            if ask.partitions is None:
                raise
            return topic_wire.elect_leaders_refused(ask, ErrorCode.not_controller, str(exc))
        results = topic_wire.read_elect_leaders_response(response, ask)
        if any(r.error is ErrorCode.none for r in results):
            await self._sync_after("see the elected leaders")
        return results

    async def allocate_producer_ids(self, broker_id: int, broker_epoch: int) -> ProducerIdBlock:
        """AllocateProducerIds (api key 67) to the active controller. A retry after a lost answer may cost a block
        (never an overlap: each answer is its own committed record)."""
        response = await self.channel.kafka(
            ALLOCATE_PRODUCER_IDS, _ALLOCATE_PRODUCER_IDS_VERSION, f"allocate producer ids for broker {broker_id}",
            broker_id=broker_id, broker_epoch=broker_epoch,
        )
        code = ErrorCode(int(response.error_code))
        if code is not ErrorCode.none:
            raise ControllerError(code, f"broker {broker_id} (epoch {broker_epoch}): the controller refused a "
                                        f"producer id block: {code.name}")
        return ProducerIdBlock(int(response.producer_id_start), int(response.producer_id_len))

    async def complete_wal_failover(self, node: NodeIdentity, failed_node_id: int, failed_node_epoch: int) -> None:
        """Reports this broker's replay of a dead broker's WAL done (``controller.decisions.wal_failover``)."""
        await self.channel.stream(CompleteWALFailover(node, failed_node_id, failed_node_epoch),
                                  f"complete the WAL failover of broker {failed_node_id}")
        await self._sync_after(f"see the WAL failover of broker {failed_node_id} done")

    async def change_delegation_token(self, request: TokenRequest) -> TokenResult:
        """Passes the token request on in Fjord's own RPC (it carries the principals the broker authenticated) and
        waits until this broker's image holds the change, so the client can log in with a new token at once."""
        try:
            result: TokenResult = await self.channel.stream(
                ChangeDelegationToken(NodeIdentity(self.node_id, self.node_epoch), request),
                f"{request.kind} a delegation token for {request.requester}")
        except ControllerUnavailableError as exc:
            logger.info("broker %d: %s", self.node_id, exc)
            return TokenResult(ErrorCode.not_controller)
        if result.error is ErrorCode.none:
            await self._sync_after(f"see the delegation token {request.kind} of {request.requester}")
        return result

    async def _sync_after(self, what: str) -> None:
        try:
            await self.sync(what=what)
        except ControllerUnavailableError as exc:
            # The write itself succeeded; only its visibility here is late. Say so rather than fail the request.
            logger.warning("broker %d: %s", self.node_id, exc)


