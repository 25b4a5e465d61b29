"""The quorum controller: `Controller` on a Raft-replicated metadata log, served on the CONTROLLER listener.

Every voter runs one. The Raft log holds metadata writes, one entry per write (the write's records as one
``metadata.log`` batch frame, so a write is applied all-or-nothing). Committed entries are applied on
every voter to the same `Controller` state (image + stream metadata). The Raft leader is the *active controller*: its
`Controller` validates requests and appends their records through :class:`RaftRecordLog`, whose ``append``
proposes one entry and returns only when it is committed; the `Controller` (or the stream metadata) then applies
the records itself, as it does over the local log. The commit callback therefore skips exactly the entries whose
proposer is about to apply them: the leader's own entries of its current epoch still awaited by a proposer. Entries
of earlier epochs, and entries whose proposer was told NOT_CONTROLLER (leadership moved; the next leader may still
commit them), are applied by the callback like on a follower.

A new leader becomes active only once its own first entry (the leader-change entry) is committed: everything
before it is then committed and applied, so validation sees the whole history. A deposed leader refuses writes at
once (:class:`~metadata.errors.NotControllerError`); writes it had in flight fail the same way when the
driver reports the role change, so the client retries on the new leader.

Snapshots: when the entries applied since the last snapshot exceed
``metadata.log.max.record.bytes.between.snapshots`` or the last snapshot (or the start) is
``metadata.log.max.snapshot.interval.ms`` old with entries applied since (``metadata.log.SnapshotPolicy``), and no
proposal is in flight (so the state is exactly the applied prefix), the state's records become a Raft snapshot;
Raft then drops the log below it and ships the snapshot to voters or observers that fall behind it.

Broker sessions (active controller only, not replicated, as in KRaft): a registration or heartbeat refreshes the
broker's session; a broker silent for ``broker.session.timeout.ms`` is fenced (`Controller.fence_broker` moves its
partitions, and hands its S3 WAL to a live broker to replay: ``controller.decisions.wal_failover``), and a fenced broker
that heartbeats again with its current epoch is unfenced once its metadata offset has caught up — unless its WAL was
taken over meanwhile: that incarnation must restart. Pending WAL failovers whose target died are reassigned. A new
active controller gives every broker a fresh session. The auto-balancer (``controller.auto_balancer``) runs on the
active controller only, from the same watch loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kio.schema.errors import ErrorCode

from controller.auto_balancer import AutoBalancer
from controller.controller import Controller
from controller.decisions.wal_failover import choose_target
from controller.node_roles import controller_listener
from controller.quorum_membership import QuorumMembership
from controller.rpc.server import ControllerServer
from controller.rpc.transport import NetworkTransport
from metadata.broker_load import BrokerLoad, PartitionLoad
from metadata.cluster_records import NO_TARGET
from metadata.errors import ControllerError, NodeFencedError, NotControllerError
from metadata.image import MetadataImage
from metadata.log import SnapshotPolicy, decode_metadata_records, encode_metadata_records, wall_ms
from metadata.rpc.stream_rpcs import MetadataDump
from metadata.wal_failover import zombie_failover
from raft.core import RaftConfig
from raft.driver import NotLeaderError, RaftDriver
from raft.effects import Role
from raft.log import LogEntry, SnapshotId
from raft.voter_set import Voter
from settings.endpoint import Endpoint
from settings.kafka_uuid import parse_kafka_uuid
from settings.meta_properties import ensure_quorum_meta_properties
from settings.quorum_voters import KEEP_VOTERS_LISTED
from settings.server import ServerConfig
from storage.config import ConfigError
from storage.metadata.api import NodeIdentity
from storage.metadata.record_codec import MetadataRecord
from storage.metadata.state_machine import wall_clock_ms
from wire.log_text import untrusted
from wire.metrics import ServerMetrics

logger = logging.getLogger(__name__)

RAFT_DIR_NAME = "__cluster_metadata-0.raft"
_POLL_S = 0.02
_FAILOVER_CHECK_S = 1.0


class RaftRecordLog:
    """`metadata.log.RecordLog` over Raft: ``append`` proposes one entry and returns once it is committed."""

    def __init__(self, quorum: QuorumController) -> None:
        self._quorum = quorum

    async def append(self, records: Sequence[MetadataRecord]) -> int:
        return await self._quorum.propose(records)


@dataclass(slots=True)
class _Session:
    epoch: int
    last_heartbeat: float
    caught_up_offset: int  # the metadata offset the broker must reach before it is unfenced
    #: The log directories the broker registered with (their ``directory.id``): a registration of the same node id
    #: from none of them, while this session lives, is another broker (``_refuse_duplicate``).
    directories: frozenset[uuid.UUID] = frozenset()


class QuorumController:
    def __init__(self, config: ServerConfig, cluster_id: str, *, clock_ms: Callable[[], int] = wall_clock_ms) -> None:
        self.config = config
        self.node_id = config.node_id
        self.cluster_id = cluster_id
        self.membership = QuorumMembership(config)
        image = MetadataImage(cluster_id=cluster_id, controller_id=-1)
        self.controller = Controller(config, image, RaftRecordLog(self), clock_ms=clock_ms, quorum=self.membership)
        self.balancer = AutoBalancer(self.controller, config)
        self.transport = NetworkTransport(
            self.node_id,
            self.membership.addresses,
            request_timeout_s=int(config.value("controller.quorum.request.timeout.ms")) / 1000,
            ssl_context=config.controller_client_tls(),
            sasl=config.controller_client_sasl(),
        )
        election_ms = int(config.value("controller.quorum.election.timeout.ms"))
        fetch_ms = int(config.value("controller.quorum.fetch.timeout.ms"))
        raft_config = RaftConfig(
            cluster_id=cluster_id,
            election_timeout_ms=election_ms,
            election_backoff_max_ms=int(config.value("controller.quorum.election.backoff.max.ms")),
            fetch_timeout_ms=fetch_ms,
            fetch_max_wait_ms=min(500, max(1, fetch_ms // 4)),
            request_timeout_ms=max(int(config.value("controller.quorum.request.timeout.ms")),
                                   min(500, max(1, fetch_ms // 4)) + 1),
        )
        self.driver = RaftDriver(
            self.node_id,
            self.membership.initial,
            Path(config.metadata_dir) / RAFT_DIR_NAME,
            self.transport,
            apply=self._apply,
            load_snapshot=self._load_snapshot,
            config=raft_config,
            on_committed=self._committed,
            on_voters=self.membership.voters_changed,
        )
        self.membership.attach(self.driver, self.transport.update_peers)
        self._snapshot_policy = SnapshotPolicy.of(config)
        self._last_snapshot_ms = wall_ms()  # as Kafka's SnapshotGenerator: the interval counts from the start
        self._session_timeout_s = config.broker_session_timeout_ms / 1000
        self._pending: set[tuple[int, int]] = set()  # (epoch, offset) of own entries whose proposer applies them
        self._applied_end = 0
        self._committed_end = 0  # every committed entry below it was handed to _apply (control entries counted)
        self._progress = asyncio.Event()  # set whenever applied_end may have grown
        self._bytes_since_snapshot = 0
        self._leader_epoch: int | None = None  # the epoch this node leads (active or catching up)
        self._activation_offset = 0
        self._active = False
        self._active_changed = asyncio.Event()
        self._metadata_loaded = False  # latched by metadata_loaded()
        self._sessions: dict[int, _Session] = {}
        self._registering = asyncio.Lock()
        self._fencing: set[int] = set()
        self._next_failover_check = 0.0
        self._failover_task: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[None]] = set()
        self._watcher: asyncio.Task[None] | None = None
        self.server: ControllerServer | None = None

    # ---- lifecycle -----------------------------------------------------------------------------------------
    @classmethod
    async def start(cls, config: ServerConfig, *, metrics: ServerMetrics | None = None) -> QuorumController:
        """Formats (first start) or checks the metadata directory, binds the CONTROLLER listener, starts the Raft
        member and serves. Raises ConfigError for a directory of another node or cluster, a port in use, or a static
        quorum's controller named by bootstrap servers alone whose log names no voters (``KEEP_VOTERS_LISTED``).
        ``metrics``: the registry the CONTROLLER listener and the auto-balancer report to (a node's own)."""
        listener = controller_listener(config)
        meta = await asyncio.to_thread(ensure_quorum_meta_properties, config)
        cluster_id = meta.cluster_id
        quorum = cls(config, cluster_id)
        quorum.server = ControllerServer(quorum, listener, metrics)
        quorum.balancer.register_metrics(quorum.server.dispatcher.metrics.registry)
        await quorum.server.bind()
        try:
            await quorum.driver.start()
            if config.voters_in_log and not quorum.driver.node.voters_from_log:
                await quorum.driver.stop(resign=False)
                raise ConfigError(KEEP_VOTERS_LISTED)
        except BaseException:
            await quorum.server.close()
            raise
        await quorum.server.start_serving()
        quorum.membership.start(parse_kafka_uuid(meta.directory_id) if meta.directory_id else None)
        quorum._watcher = asyncio.create_task(quorum._watch(), name=f"quorum-controller-{quorum.node_id}")
        logger.info("controller %d of cluster %s started: voters %s%s, metadata at offset %d", quorum.node_id,
                    cluster_id, quorum.membership.voter_set.describe() or "none yet (joining)",
                    " (the log's, kraft.version 1: controller.quorum.voters's list is ignored)"
                    if config.voters and not config.dynamic_quorum and quorum.kraft_version else "",
                    quorum.controller.image.offset)
        return quorum

    async def stop(self, *, resign: bool = True) -> None:
        """Stops serving, hands leadership over (unless ``resign`` is False) and closes the log."""
        if self.server is not None:
            await self.server.close()
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
            self._watcher = None
        for task in list(self._background):
            task.cancel()
        self._deactivate("the controller is stopping")
        await self.membership.stop()
        await self.driver.stop(resign=resign)
        await self.transport.close()
        logger.info("controller %d stopped", self.node_id)

    # ---- queries -------------------------------------------------------------------------------------------
    @property
    def is_active(self) -> bool:
        """This node leads the quorum and has applied everything committed before its epoch."""
        return self._active and self.driver.role is Role.LEADER and self.driver.epoch == self._leader_epoch

    @property
    def leader_id(self) -> int | None:
        return self.driver.leader_id

    @property
    def kraft_version(self) -> int:
        """KIP-853's level: 1 when the voters are the log's and may change (ApiVersions, UpdateFeatures)."""
        return self.membership.kraft_version

    @property
    def voters(self) -> Mapping[int, tuple[str, int]]:
        """Each voter's CONTROLLER listener, as the log now says them (``controller.quorum_membership``)."""
        return self.membership.addresses

    @property
    def image(self) -> MetadataImage:
        return self.controller.image

    def metadata_loaded(self) -> bool:
        """Whether this voter has applied the metadata log up to the commit offset it learned from the quorum since
        it started: it is the active controller (which applied everything committed before its epoch), or it
        applied what the leader's first fetch answer reported committed (a newly elected leader reports nothing
        until it has committed in its epoch, so a follower does not take the leader's stale value after a full
        restart for the quorum's). Until then a restarted voter serves from
        its snapshot and local log, whose ACLs may be stale, so the CONTROLLER listener serves super users only
        (Kafka's StandardAuthorizer initial load). Once true it stays true, as in Kafka."""
        if not self._metadata_loaded:
            learned = self.driver.node.first_leader_high_watermark
            if self.is_active or (learned is not None and self.applied_end >= learned):
                self._metadata_loaded = True
                logger.info("controller %d: metadata applied up to offset %d, the quorum's commit offset it learned; "
                            "ACLs now decide for callers that are not super users", self.node_id, self.applied_end)
        return self._metadata_loaded

    def not_controller(self, what: str) -> NotControllerError:
        leader = self.driver.leader_id
        where = f"the active controller is {leader}" if leader is not None else "no active controller is known"
        if leader == self.node_id:
            where = "this node was just elected and is still replaying the metadata log"
        return NotControllerError(f"controller {self.node_id} cannot {what}: {where}",
                                  leader if leader != self.node_id else None)

    def active_controller(self, what: str) -> Controller:
        """The `Controller` to validate and write with; NotControllerError unless this node is active."""
        if not self.is_active:
            raise self.not_controller(what)
        return self.controller

    async def wait_active(self, timeout: float) -> None:
        async with asyncio.timeout(timeout):
            while not self.is_active:
                self._active_changed.clear()
                await self._active_changed.wait()

    # ---- writes --------------------------------------------------------------------------------------------
    async def propose(self, records: Sequence[MetadataRecord]) -> int:
        """One write: appended as one entry; returns its offset once committed (the caller applies it)."""
        if not self.is_active:
            raise self.not_controller("append metadata records")
        epoch = self.driver.epoch
        offset = self.driver.node.log.end_offset  # where node.propose appends, synchronously, below
        key = (epoch, offset)
        data = encode_metadata_records(records)
        self._pending.add(key)
        try:
            committed = await self.driver.propose([data])
        except NotLeaderError as exc:
            self._deactivate(f"leadership moved ({exc})")
            raise NotControllerError(
                f"controller {self.node_id}: the write at offset {offset} was not committed in epoch {epoch}; "
                f"{exc}", exc.leader_id
            ) from None
        finally:
            self._pending.discard(key)
            self._progress.set()
        if committed != offset:  # a broken invariant, not a runtime condition: stop applying rather than diverge
            raise RuntimeError(f"controller {self.node_id}: proposed at {offset} but committed at {committed}")
        self._applied_end = max(self._applied_end, offset + 1)
        self._bytes_since_snapshot += len(data)
        return offset

    # ---- the state machine ---------------------------------------------------------------------------------
    def _apply(self, entries: Sequence[LogEntry]) -> None:
        leading = self.driver.role is Role.LEADER
        for entry in entries:
            if leading and entry.epoch == self.driver.epoch and (entry.epoch, entry.offset) in self._pending:
                continue
            records = decode_metadata_records(entry.data, f"metadata log entry {entry.offset}")
            self.controller.replay(records, entry.offset)
            self._applied_end = max(self._applied_end, entry.offset + 1)
            self._bytes_since_snapshot += len(entry.data)

    def _committed(self, end: int) -> None:
        if end > self._committed_end:
            self._committed_end = end
            self._progress.set()

    @property
    def applied_end(self) -> int:
        """Every committed entry below this offset is applied to :attr:`controller` (its own proposals, which the
        proposer applies when it resumes, included): what a broker in this process reads is at least that fresh."""
        end = self._committed_end
        for _, offset in self._pending:
            end = min(end, offset)
        return end

    async def wait_applied(self, end: int, timeout: float) -> None:
        """Waits until :attr:`applied_end` reaches ``end``; TimeoutError after ``timeout``."""
        async with asyncio.timeout(timeout):
            while self.applied_end < end:
                self._progress.clear()
                await self._progress.wait()

    def _load_snapshot(self, snapshot_id: SnapshotId, data: bytes) -> None:
        records = decode_metadata_records(data, f"metadata snapshot {snapshot_id}")
        self.controller.reset(records, snapshot_id.end_offset - 1)
        self._committed(snapshot_id.end_offset)
        self._applied_end = snapshot_id.end_offset
        self._bytes_since_snapshot = 0
        self._last_snapshot_ms = wall_ms()
        logger.info("controller %d: loaded snapshot %s (%d records)", self.node_id, snapshot_id, len(records))

    async def snapshot(self) -> SnapshotId | None:
        """Snapshots the applied state now if no write is in flight (tests and tools; normally size-triggered)."""
        if self._pending or self._applied_end <= self.driver.node.log.start_offset:
            return None
        end = self._applied_end
        data = encode_metadata_records(self.controller.snapshot_records())
        snapshot_id = await self.driver.take_snapshot(end, data)
        self._bytes_since_snapshot = 0
        self._last_snapshot_ms = wall_ms()
        return snapshot_id

    # ---- leadership and sessions ---------------------------------------------------------------------------
    async def _watch(self) -> None:
        """Follows role changes (activation after catching up), broker sessions and snapshot triggers."""
        last_leader: int | None = None
        while True:
            driver = self.driver
            if driver.role is Role.LEADER:
                if self._leader_epoch != driver.epoch:
                    self._deactivate(f"new epoch {driver.epoch}")
                    self._leader_epoch = driver.epoch
                    self._activation_offset = driver.node.log.end_offset
                if not self._active and driver.high_watermark >= self._activation_offset:
                    self._activate()
            elif self._leader_epoch is not None:
                self._deactivate(f"now {driver.role} in epoch {driver.epoch}")
            leader = driver.leader_id
            if leader != last_leader:
                last_leader = leader
                self.controller.set_controller_id(leader if leader is not None else -1)
            if self.is_active:
                self._expire_sessions()
                self._reconcile_failovers()
                self.balancer.tick()
                if any(p.reassigning for t in self.controller.image.topics_by_name.values()
                       for p in t.partitions.values()):
                    self.controller.watch_reassignments()  # moves a previous active controller started
            if not self._pending and self._snapshot_policy.due(self._bytes_since_snapshot, self._last_snapshot_ms,
                                                               wall_ms()):
                try:
                    await self.snapshot()
                except ValueError as exc:
                    logger.debug("controller %d: snapshot deferred: %s", self.node_id, exc)
            await asyncio.sleep(_POLL_S)

    def _activate(self) -> None:
        self._active = True
        now = time.monotonic()
        self._sessions = {
            b.node_id: _Session(b.epoch, now, -1) for b in self.controller.image.brokers.values()
        }
        self._active_changed.set()
        logger.info("controller %d is the active controller in epoch %d (metadata offset %d, %d brokers)",
                    self.node_id, self.driver.epoch, self.controller.image.offset, len(self._sessions))

    def _deactivate(self, reason: str) -> None:
        if self._active:
            logger.info("controller %d is no longer active: %s", self.node_id, reason)
        self._active = False
        self.balancer.reset()
        self._leader_epoch = None if self.driver.role is not Role.LEADER else self._leader_epoch
        self._sessions.clear()
        self._active_changed.set()

    def _expire_sessions(self) -> None:
        now = time.monotonic()
        for broker in self.controller.image.brokers.values():
            if broker.fenced or broker.node_id in self._fencing:
                continue
            session = self._sessions.get(broker.node_id)
            if session is None or session.epoch != broker.epoch:
                self._sessions[broker.node_id] = _Session(broker.epoch, now, -1)
                continue
            if now - session.last_heartbeat > self._session_timeout_s:
                self._fencing.add(broker.node_id)
                task = asyncio.create_task(self._fence(broker.node_id, broker.epoch, now - session.last_heartbeat))
                self._background.add(task)
                task.add_done_callback(self._background.discard)

    def _reconcile_failovers(self) -> None:
        """Every second, hands pending WAL failovers whose target is gone to a live broker (in the background:
        the write must not hold up session expiry)."""
        now = time.monotonic()
        if now < self._next_failover_check or (self._failover_task is not None and not self._failover_task.done()):
            return
        self._next_failover_check = now + _FAILOVER_CHECK_S
        if not any(f.pending for f in self.controller.image.wal_failovers.values()):
            return
        self._failover_task = asyncio.create_task(self._reassign_failovers())
        self._background.add(self._failover_task)
        self._failover_task.add_done_callback(self._background.discard)

    async def _reassign_failovers(self) -> None:
        try:
            await self.controller.reconcile_wal_failovers()
        except NotControllerError as exc:
            logger.info("controller %d: WAL failover check abandoned: %s", self.node_id, exc)
        except Exception:
            logger.exception("controller %d: WAL failover check failed", self.node_id)

    async def _fence(self, node_id: int, epoch: int, silent_s: float) -> None:
        try:
            logger.info("controller %d: broker %d (epoch %d) sent no heartbeat for %.1f s; fencing it",
                        self.node_id, node_id, epoch, silent_s)
            await self.controller.fence_broker(node_id, epoch, session_expired=True)
        except NotControllerError as exc:
            logger.info("controller %d: fencing broker %d abandoned: %s", self.node_id, node_id, exc)
        except Exception:
            logger.exception("controller %d: fencing broker %d failed", self.node_id, node_id)
        finally:
            self._fencing.discard(node_id)

    async def register_broker(
        self, node_id: int, listeners: Sequence[Endpoint], rack: str | None, directories: Sequence[uuid.UUID] = ()
    ) -> int:
        controller = self.active_controller(f"register broker {node_id}")
        async with self._registering:  # two registrations of one node id: the second is checked against the first
            self._refuse_duplicate(controller, node_id, frozenset(directories))
            epoch = await controller.register_broker(node_id, listeners, rack)
            self._sessions[node_id] = _Session(epoch, time.monotonic(), -1, frozenset(directories))
        return epoch

    def _refuse_duplicate(self, controller: Controller, node_id: int, directories: frozenset[uuid.UUID]) -> None:
        """DUPLICATE_BROKER_REGISTRATION, as Kafka's controller answers it, for a registration of a live broker's
        node id from other log directories: another broker started with the same node.id would otherwise fence
        the running one. The same broker restarting from its directories (after a kill -9, its session still
        open) registers at once, as before; so does a broker this controller has no directories for (one that
        registered before this controller became active, or an older Fjord)."""
        existing = controller.image.brokers.get(node_id)
        session = self._sessions.get(node_id)
        # Fenced or not, as Kafka's heartbeat tracker: a broker handing over its WAL is fenced and alive.
        if (existing is None or session is None or session.epoch != existing.epoch or not session.directories
                or not directories or not session.directories.isdisjoint(directories)):
            return
        silent_s = time.monotonic() - session.last_heartbeat
        if silent_s > self._session_timeout_s:
            return
        endpoints = untrusted(", ".join(f"{e.name}://{e.host}:{e.port}" for e in existing.listeners)) or "no listeners"
        raise ControllerError(
            ErrorCode.duplicate_broker_registration,
            f"node {node_id} is registered by a live broker ({endpoints}, heartbeat {silent_s:.1f} s ago) from "
            "other log directories: another broker has its node.id",
        )

    async def heartbeat(
        self, node_id: int, epoch: int, metadata_offset: int, *, want_fence: bool, want_shutdown: bool
    ) -> tuple[bool, bool, bool]:
        """A broker's heartbeat; returns (is_caught_up, is_fenced, should_shut_down). Raises NotControllerError, or
        NodeFencedError for an unknown broker or a stale epoch (the broker must register again).

        ``want_shutdown`` alone is a controlled shutdown (``controller.decisions.controlled_shutdown``): the broker's
        partitions move away and ``should_shut_down`` is true once it leads nothing; ``want_fence`` (a stopping
        broker's last heartbeat, after it uploaded its WAL) fences it; ``want_fence`` alone (a broker whose WAL
        cannot write hands over: ``broker.wal_handover``) fences it and gives its WAL to another broker to replay,
        unless no other broker could lead its partitions (they would be left without a leader) or no live broker
        shares its WAL bucket (nobody could replay what it acknowledged: its partitions would move without their
        tail). Refused, it stays unfenced and keeps its partitions, acknowledging nothing its WAL cannot write."""
        controller = self.active_controller(f"accept a heartbeat from broker {node_id}")
        broker = controller.image.brokers.get(node_id)
        if broker is None:
            raise NodeFencedError(f"broker {node_id} is not registered")
        if broker.epoch != epoch:
            raise NodeFencedError(f"broker {node_id}: epoch {epoch} is not its current registration {broker.epoch}")
        taken = zombie_failover(controller.image, node_id, epoch)
        if taken is not None:
            raise NodeFencedError(
                f"broker {node_id} (epoch {epoch}) missed its session and broker {taken.target_id} took over its WAL; "
                "it must restart and register again"
            )
        now = time.monotonic()
        session = self._sessions.get(node_id)
        if session is None or session.epoch != epoch:
            session = self._sessions[node_id] = _Session(epoch, now, -1)
        session.last_heartbeat = now
        if want_fence:
            handing_over = not want_shutdown
            if handing_over and not broker.fenced and not await _can_hand_over(controller, node_id):
                return True, False, False  # nobody to hand over to: it keeps its partitions, and asks again
            if not broker.fenced:
                if handing_over:
                    logger.info("controller %d: broker %d (epoch %d) cannot write its WAL and hands over; fencing "
                                "it", self.node_id, node_id, epoch)
                # A stopping broker uploaded and closed everything first; one handing over (wantFence alone) holds
                # acknowledged records in its WAL, which another broker replays as a dead broker's.
                await controller.fence_broker(node_id, epoch, session_expired=handing_over)
            return True, True, want_shutdown
        if want_shutdown and not broker.fenced:
            remaining = await controller.controlled_shutdown(node_id, epoch)
            return True, False, remaining == 0
        if want_shutdown or not broker.fenced:
            return True, broker.fenced, want_shutdown  # a fenced broker leads nothing: it may stop
        if session.caught_up_offset < 0:
            session.caught_up_offset = controller.image.offset
        caught_up = metadata_offset >= session.caught_up_offset
        if caught_up and await controller.unfence_broker(node_id, epoch):
            return True, False, False
        return caught_up, True, False

    def dump(self) -> MetadataDump:
        """This voter's applied state and its view of the quorum (DescribeMetadata)."""
        leader = self.driver.leader_id
        return MetadataDump(
            self.node_id,
            leader if leader is not None else -1,
            self.driver.epoch,
            self.driver.high_watermark,
            self.controller.image.offset,
            encode_metadata_records(self.controller.snapshot_records()),
        )

    def record_load(self, node: NodeIdentity, partitions: Sequence[PartitionLoad], interval_ms: int = 0) -> None:
        """Keeps the report of a registered broker's current incarnation; any other is dropped (it would never be
        used, and must not grow the controller's memory)."""
        broker = self.controller.image.brokers.get(node.node_id)
        if broker is not None and broker.epoch == node.node_epoch:
            self.balancer.record_load(node.node_id, node.node_epoch, partitions, interval_ms)

    def broker_loads(self) -> list[BrokerLoad]:
        return sorted(self.balancer.loads(self.controller.image).values(), key=lambda load: load.node_id)

    async def add_voter(self, voter: Voter, timeout_s: float) -> None:
        await self.membership.add(voter, timeout_s)

    async def remove_voter(self, node_id: int, directory_id: uuid.UUID | None, timeout_s: float) -> None:
        await self.membership.remove(node_id, directory_id, timeout_s)

    async def update_voter(self, voter: Voter, leader_epoch: int, timeout_s: float) -> None:
        await self.membership.update(voter, leader_epoch, timeout_s)

    def current_leader(self) -> tuple[int, int, str, int]:
        leader = self.driver.leader_id
        host, port = self.membership.addresses.get(leader, ("", 0)) if leader is not None else ("", 0)
        return (leader if leader is not None else -1), self.driver.epoch, host, port

    def check_node(self, node: NodeIdentity, what: str) -> None:
        """Refuses a mutation from a fenced broker or from an older incarnation of one (NodeFencedError)."""
        broker = self.controller.image.brokers.get(node.node_id)
        if broker is None:
            return
        if broker.epoch != node.node_epoch:
            raise NodeFencedError(
                f"node {node.node_id} cannot {what}: epoch {node.node_epoch} is not its current registration "
                f"{broker.epoch}"
            )
        if broker.fenced:
            raise NodeFencedError(f"node {node.node_id} cannot {what}: it is fenced (epoch {broker.epoch})")


async def _can_hand_over(controller: Controller, node_id: int) -> bool:
    """Whether a broker handing over may be fenced: another broker may lead its partitions, and a live broker of its
    WAL bucket can replay its WAL (``controller.decisions.wal_failover.choose_target``)."""
    image = controller.image
    if not any(b.node_id != node_id for b in image.leader_candidates()):
        return False
    target, _ = choose_target(image, node_id, await controller.wal_locations())
    return target != NO_TARGET
