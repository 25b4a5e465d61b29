"""A broker's local copy of the committed metadata (``metadata.remote.follower.MetadataFollower``), and where it
comes from.

A broker-only node runs :class:`MetadataReplica`, a Raft *observer* of the metadata log (it fetches
``__cluster_metadata`` like a follower but never votes): committed entries are replayed into a read-only
`Controller`, whose image the broker reads and whose subscribers are told of every change, exactly as on the
combined node. A snapshot arrives when the broker is further behind than the leader's log start. A combined node's
broker reads its own voter instead (:class:`VoterFollower`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from controller.controller import Controller
from controller.quorum import RAFT_DIR_NAME, QuorumController
from controller.quorum_membership import PeersCallback, QuorumMembership
from controller.rpc.transport import NetworkTransport
from metadata.controller_api import ImageListener
from metadata.errors import NotControllerError
from metadata.image import MetadataImage
from metadata.log import SnapshotPolicy, decode_metadata_records, encode_metadata_records, wall_ms
from raft.core import RaftConfig
from raft.driver import RaftDriver
from raft.log import LogEntry, SnapshotId
from settings.server import ServerConfig
from storage.config import ConfigError
from storage.metadata.record_codec import MetadataRecord

logger = logging.getLogger(__name__)


class _ReadOnlyLog:
    """The replica's `Controller` replays; it never writes (writes go to the active controller)."""

    async def append(self, records: Sequence[MetadataRecord]) -> int:
        raise NotControllerError("a broker's metadata replica does not accept writes")


class VoterFollower:
    """A combined node's broker reads its own voter's state: the voter applies every committed entry (as leader
    or follower), so no observer of its own is needed. Starting and stopping the voter is the node's business."""

    def __init__(self, quorum: QuorumController) -> None:
        self._quorum = quorum

    @property
    def image(self) -> MetadataImage:
        return self._quorum.image

    def subscribe(self, listener: ImageListener) -> None:
        self._quorum.controller.subscribe(listener)

    @property
    def leader_id(self) -> int | None:
        return self._quorum.leader_id

    @property
    def applied_end(self) -> int:
        return self._quorum.applied_end

    async def wait_applied(self, end: int, timeout: float) -> None:
        await self._quorum.wait_applied(end, timeout)

    @property
    def kraft_version(self) -> int:
        return self._quorum.kraft_version

    def watch_voters(self, callback: PeersCallback) -> None:
        self._quorum.membership.watch(callback)

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def failed(self) -> Exception:
        return await self._quorum.driver.failed()


class MetadataReplica:
    """The broker's copy of the metadata: a Raft observer replaying committed entries into a `Controller`."""

    def __init__(self, config: ServerConfig, cluster_id: str) -> None:
        self.node_id = config.node_id
        self.membership = QuorumMembership(config)
        if self.node_id in self.membership.addresses:
            raise ConfigError(
                f"node.id {self.node_id} is one of the controller.quorum.voters; a broker-only node needs a node.id "
                "of its own"
            )
        self.controller = Controller(config, MetadataImage(cluster_id=cluster_id, controller_id=-1), _ReadOnlyLog(),
                                     replica=True)
        self.applied_end = 0  # every committed entry below this offset is applied
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._started = False
        # The observer's log would grow without bound: like the controllers, snapshot the replayed state after
        # so many bytes of entries or so long (SnapshotPolicy), and Raft drops the log below the snapshot.
        self._snapshot_policy = SnapshotPolicy.of(config)
        self._bytes_since_snapshot = 0
        self._last_snapshot_ms = wall_ms()  # as Kafka's SnapshotGenerator: the interval counts from the start
        self._snapshot_pending = False
        self._snapshot_task: asyncio.Task[None] | None = None
        request_ms = int(config.value("controller.quorum.request.timeout.ms"))
        fetch_ms = int(config.value("controller.quorum.fetch.timeout.ms"))
        fetch_wait_ms = min(500, max(1, fetch_ms // 4))
        self.transport = NetworkTransport(self.node_id, self.membership.addresses, request_timeout_s=request_ms / 1000,
                                          ssl_context=config.controller_client_tls(),
                                          sasl=config.controller_client_sasl())
        self.driver = RaftDriver(
            self.node_id,
            self.membership.initial,
            config.metadata_dir / RAFT_DIR_NAME,
            self.transport,
            apply=self._apply,
            load_snapshot=self._load_snapshot,
            config=RaftConfig(
                cluster_id=cluster_id,
                election_timeout_ms=int(config.value("controller.quorum.election.timeout.ms")),
                election_backoff_max_ms=int(config.value("controller.quorum.election.backoff.max.ms")),
                fetch_timeout_ms=fetch_ms,
                fetch_max_wait_ms=fetch_wait_ms,
                request_timeout_ms=max(request_ms, fetch_wait_ms + 1),
            ),
            on_committed=self._committed,
            on_voters=self.membership.voters_changed,
        )
        self.membership.attach(self.driver, self.transport.update_peers)

    @property
    def image(self) -> MetadataImage:
        return self.controller.image

    @property
    def leader_id(self) -> int | None:
        """The Raft leader this observer follows (None before start or while it looks for one)."""
        return self.driver.leader_id if self._started else None

    def subscribe(self, listener: ImageListener) -> None:
        self.controller.subscribe(listener)

    @property
    def kraft_version(self) -> int:
        return self.membership.kraft_version

    def watch_voters(self, callback: PeersCallback) -> None:
        self.membership.watch(callback)

    async def start(self) -> None:
        await self.driver.start()
        self._started = True

    async def stop(self) -> None:
        await self.driver.stop(resign=False)
        await self.transport.close()

    async def failed(self) -> Exception:
        return await self.driver.failed()

    def _apply(self, entries: Sequence[LogEntry]) -> None:
        for entry in entries:
            records = decode_metadata_records(entry.data, f"metadata log entry {entry.offset}")
            self.controller.replay(records, entry.offset)
            self._bytes_since_snapshot += len(entry.data)
        self._note_leader()
        due = self._snapshot_policy.due(self._bytes_since_snapshot, self._last_snapshot_ms, wall_ms())
        if due and not self._snapshot_pending:
            self._snapshot_pending = True
            asyncio.get_running_loop().call_soon(self._snapshot)

    def _snapshot(self) -> None:
        """Captures the state and its applied end together (no await in between), so the snapshot is exact."""
        end = self.applied_end
        data = encode_metadata_records(self.controller.snapshot_records())
        self._bytes_since_snapshot = 0
        self._last_snapshot_ms = wall_ms()
        task = asyncio.get_running_loop().create_task(self._hand_over_snapshot(end, data))
        self._snapshot_task = task

    async def _hand_over_snapshot(self, end: int, data: bytes) -> None:
        try:
            await self.driver.take_snapshot(end, data)
        except ValueError as exc:  # the Raft core has not counted that far yet: try again after more entries
            logger.debug("broker %d: metadata snapshot at %d deferred: %s", self.node_id, end, exc)
        except Exception:
            logger.exception("broker %d: metadata snapshot at %d failed", self.node_id, end)
        finally:
            self._snapshot_pending = False

    def _load_snapshot(self, snapshot_id: SnapshotId, data: bytes) -> None:
        records = decode_metadata_records(data, f"metadata snapshot {snapshot_id}")
        self.controller.reset(records, snapshot_id.end_offset - 1)
        self._committed(snapshot_id.end_offset)
        logger.info("broker %d: loaded metadata snapshot %s (%d records)", self.node_id, snapshot_id, len(records))

    def _note_leader(self) -> None:
        leader = self.leader_id
        self.controller.set_controller_id(leader if leader is not None else -1)

    def _committed(self, end: int) -> None:
        if end <= self.applied_end:
            return
        self.applied_end = end
        self._note_leader()
        waiting = []
        for wanted, future in self._waiters:
            if wanted <= end:
                if not future.done():
                    future.set_result(None)
            else:
                waiting.append((wanted, future))
        self._waiters = waiting

    async def wait_applied(self, end: int, timeout: float) -> None:
        """Waits until every committed entry below ``end`` is applied; TimeoutError after ``timeout``."""
        if self.applied_end >= end:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((end, future))
        try:
            async with asyncio.timeout(timeout):
                await future
        finally:
            self._waiters = [(e, f) for e, f in self._waiters if f is not future]
