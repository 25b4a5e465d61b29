"""`ControllerClient` for a broker of a cluster (``process.roles=broker``): the controller quorum over the network.

Three parts, each with one job:

- :class:`ActiveControllerChannel` finds the active controller among ``controller.quorum.voters`` and sends it
  requests. A voter that is not active answers NOT_CONTROLLER (with the leader's id when it knows it); an
  unreachable one fails to connect. Either way the request is retried on the next candidate with exponential
  backoff, bounded in time, and the error that ends the retries names every voter tried.
- :class:`MetadataReplica` is a Raft *observer* of the metadata log (the broker fetches ``__cluster_metadata`` like
  a follower but never votes): committed entries are replayed into a read-only `Controller`, whose image the
  broker reads and whose subscribers are told of every change, exactly as on the combined node. A snapshot arrives
  when the broker is further behind than the leader's log start.
- :class:`RemoteControllerClient` ties them together: admin writes (topics, partitions, configs) are forwarded as
  the Kafka requests brokers forward in KRaft; stream and object operations are Fjord's own RPCs
  (:class:`RemoteStreamMetadata`); registration and the heartbeat timer are BrokerRegistration / BrokerHeartbeat.

Why stream metadata *reads* also go to the active controller: the storage engine trims its WAL once an object
commit returns, then reads that data through ``get_objects``; a lagging local replica could not find it yet. The
image has no such read-your-write hazard for data, but `ControllerClient` promises that a write's effects are in
:attr:`RemoteControllerClient.image` when it returns, so every image-changing write ends with a *barrier*: the
active controller's high watermark (DescribeQuorum) is read after the write and the replica waits until it has
applied everything below it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from controller.api import (
    ConfigResource,
    CreateTopicResult,
    DeleteTopicResult,
    ElectLeaderResult,
    ImageListener,
    NewTopic,
    PartitionReassignment,
    ReassignmentResult,
)
from controller.config import ConfigEntry, ConfigSource, ServerConfig, ensure_meta_properties
from controller.controller import Controller, ControllerError
from controller.image import MetadataImage
from controller.metadata_records import Endpoint, MetadataRecord
from controller.producer_ids import ProducerIdBlock
from controller.quorum import RAFT_DIR_NAME, QuorumController, quorum_cluster_id
from controller.raft.core import RaftConfig
from controller.raft.driver import RaftDriver
from controller.raft.log import LogEntry, SnapshotId
from controller.rpc import messages as m
from controller.rpc.connection import ConnectionClosedError, ControllerConnection
from controller.rpc.messages import NotControllerError, decode_metadata_records, encode_metadata_records
from controller.rpc.transport import NetworkTransport
from storage.config import ConfigError
from storage.errors import NodeEpochExpiredError, StorageError
from storage.metadata.api import (
    CommitStreamObjectRequest,
    CommitStreamSetObjectRequest,
    NodeIdentity,
    OpeningStream,
    OpenStreamResult,
    S3ObjectMetadata,
    StreamMetadataRecord,
)
from wire import codec

__all__ = [
    "ActiveControllerChannel",
    "ControllerUnavailableError",
    "MetadataReplica",
    "RemoteControllerClient",
    "RemoteStreamMetadata",
]

logger = logging.getLogger(__name__)

_SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}
_BACKOFF_INITIAL_S = 0.05
_BACKOFF_MAX_S = 1.0
_BROKER_REGISTRATION_VERSION = 2
_ALLOCATE_PRODUCER_IDS_VERSION = 0
_BROKER_HEARTBEAT_VERSION = 1
_DESCRIBE_QUORUM_VERSION = 2
_CREATE_TOPICS_VERSION = 7
_DELETE_TOPICS_VERSION = 6
_CREATE_PARTITIONS_VERSION = 3
_ALTER_CONFIGS_VERSION = 2
_INCREMENTAL_ALTER_CONFIGS_VERSION = 1
_ADMIN_TIMEOUT_MS = 30_000
_ALTER_PARTITION_REASSIGNMENTS_VERSION = 0
#: The least time one attempt waits for its answer. A write that times out is sent again, and not every write is
#: idempotent (a second CreateStream makes a second stream), so a busy controller gets seconds, not the Raft
#: request timeout meant for peers; a dead one closes the connection and is left at once.
_MIN_ATTEMPT_TIMEOUT_S = 5.0


class ControllerUnavailableError(NotControllerError):
    """No voter answered as the active controller within the retry budget.

    A NotControllerError (hence a StorageError) so the storage engine treats it like any failed metadata call.
    """


class ControllerLostWhileStoppingError(ControllerUnavailableError, NodeEpochExpiredError):
    """The node is stopping and no active controller answers: this incarnation gives up on metadata writes, as a
    fenced one does (it will never write again; its WAL keeps what it did not upload, recovered at its next
    start). A NodeEpochExpiredError so the storage engine stops retrying rather than holding up the shutdown."""


def _backoff(attempt: int) -> float:
    delay: float = min(_BACKOFF_MAX_S, _BACKOFF_INITIAL_S * 2.0 ** max(0, attempt - 1))
    return delay * (0.5 + random.random() / 2)


# ------------------------------------------------------------------------------------------ the channel


class ActiveControllerChannel:
    """Requests to the active controller, wherever it is now.

    ``leader_hint`` (the metadata replica's view of the Raft leader) is tried first; NOT_CONTROLLER answers and
    connection failures move on to the leader the answer names, else to the next voter in id order.
    """

    def __init__(
        self,
        voters: Mapping[int, tuple[str, int]],
        *,
        client_id: str,
        request_timeout_s: float,
        retry_budget_s: float,
        leader_hint: Callable[[], int | None] = lambda: None,
    ) -> None:
        if not voters:
            raise ConfigError("controller.quorum.voters: a broker needs at least one controller")
        self._voters = dict(voters)
        self._order = sorted(voters)
        self._client_id = client_id
        self._request_timeout_s = request_timeout_s  # connecting
        self._attempt_timeout_s = max(request_timeout_s, _MIN_ATTEMPT_TIMEOUT_S)  # waiting for an answer
        self._retry_budget_s = retry_budget_s
        self._leader_hint = leader_hint
        self._connections: dict[int, ControllerConnection] = {}
        self._connecting: dict[int, asyncio.Lock] = {voter: asyncio.Lock() for voter in voters}
        self._active: int | None = None
        self._closed = False
        self._stopping = False
        self._stop_deadline = float("inf")
        self._unreachable = False  # stopping, and a call already ran out of budget: later calls fail at once

    @property
    def active_id(self) -> int | None:
        """The voter that last answered as the active controller."""
        return self._active

    def stopping(self, budget_s: float) -> None:
        """The node shuts down: each call gets at most ``budget_s``, and once one finds no active controller in
        it the rest fail at once. A combined node stopping last finds no majority of voters left; its uploads
        and closes cannot commit (its WAL keeps the data for its next start), so it must not spend the full
        retry budget on each of them."""
        self._stopping = True
        self._retry_budget_s = min(self._retry_budget_s, budget_s)
        # Calls already retrying (a partition opening when the stop came) end by then too, not at their own deadline.
        self._stop_deadline = time.monotonic() + budget_s

    def _address(self, voter: int) -> str:
        host, port = self._voters[voter]
        return f"{host}:{port}"

    def _first_candidate(self) -> int:
        for candidate in (self._active, self._leader_hint()):
            if candidate is not None and candidate in self._voters:
                return candidate
        return self._order[0]

    def _next_candidate(self, current: int, named: int | None) -> int:
        if named is not None and named in self._voters and named != current:
            return named
        hint = self._leader_hint()
        if hint is not None and hint in self._voters and hint != current:
            return hint
        return self._order[(self._order.index(current) + 1) % len(self._order)]

    async def _connection(self, voter: int) -> ControllerConnection:
        async with self._connecting[voter]:
            existing = self._connections.get(voter)
            if existing is not None and existing.connected:
                return existing
            host, port = self._voters[voter]
            connection = ControllerConnection(host, port, client_id=self._client_id)
            try:
                await connection.connect(timeout=self._request_timeout_s)
            except BaseException:
                await connection.close()
                raise
            self._connections[voter] = connection
            return connection

    async def _drop(self, voter: int) -> None:
        connection = self._connections.pop(voter, None)
        if connection is not None:
            await connection.close()

    async def _call(
        self,
        what: str,
        send: Callable[[ControllerConnection], Any],
        redirect: Callable[[Any], tuple[bool, int | None]],
        *,
        budget_s: float | None = None,
    ) -> Any:
        """Runs ``send`` on the active controller; ``redirect(response)`` says whether the answer is
        NOT_CONTROLLER and which leader it names. Raises ControllerUnavailableError when the budget runs out."""
        if self._closed:
            raise ControllerUnavailableError(f"{what}: the controller channel is closed")
        if self._unreachable:
            raise ControllerLostWhileStoppingError(
                f"{what}: no active controller answered while the node is stopping; what is not uploaded stays in "
                "the WAL for the next start"
            )
        deadline = time.monotonic() + (self._retry_budget_s if budget_s is None else budget_s)
        voter = self._first_candidate()
        attempt = 0
        problems: dict[int, str] = {}
        while True:
            attempt += 1
            named: int | None = None
            try:
                connection = await self._connection(voter)
                response = await send(connection)
            except (OSError, TimeoutError, ConnectionClosedError) as exc:
                await self._drop(voter)
                problems[voter] = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            else:
                refused, named = redirect(response)
                if not refused:
                    self._unreachable = False
                    if self._active != voter:
                        logger.info("active controller is node %d (%s)", voter, self._address(voter))
                    self._active = voter
                    return response
                problems[voter] = "not the active controller" + (f" (names {named})" if named is not None else "")
                if self._active == voter:
                    self._active = None
            now = time.monotonic()
            if now >= deadline or self._closed or now >= self._stop_deadline:
                tried = "; ".join(f"node {v} at {self._address(v)}: {p}" for v, p in sorted(problems.items()))
                message = f"{what}: no active controller answered after {attempt} attempts ({tried})"
                if self._stopping:
                    self._unreachable = True
                    raise ControllerLostWhileStoppingError(message)
                raise ControllerUnavailableError(message)
            voter = self._next_candidate(voter, named)
            await asyncio.sleep(min(_backoff(attempt), max(0.0, deadline - time.monotonic())))

    async def kafka(
        self,
        api_key: int,
        version: int,
        what: str,
        *,
        budget_s: float | None = None,
        redirect: Callable[[Any], tuple[bool, int | None]] | None = None,
        idempotent: bool = False,
        **fields: object,
    ) -> Any:
        """A Kafka-protocol request (kio entity built from ``fields``) answered by the active controller;
        ``redirect`` overrides how a refusal is recognised (default: NOT_CONTROLLER anywhere in the answer).
        An ``idempotent`` request (a heartbeat, a read) gives up on a silent controller sooner."""
        entity = codec.build(codec.request_class(api_key, version), **fields)
        timeout = self._request_timeout_s if idempotent else self._attempt_timeout_s

        async def send(connection: ControllerConnection) -> Any:
            return await connection.request(entity, timeout=timeout)

        return await self._call(what, send, redirect or _kafka_redirect, budget_s=budget_s)

    async def stream(self, request: m.StreamRequest, what: str, *, stream_id: int = -1) -> Any:
        """One of Fjord's own RPCs; returns its result or raises the storage error it carries."""

        async def send(connection: ControllerConnection) -> m.StreamResponse:
            return await connection.stream_request(request, timeout=self._attempt_timeout_s)

        def redirect(response: m.StreamResponse) -> tuple[bool, int | None]:
            if response.error_code != m.RpcError.NOT_CONTROLLER:
                return False, None
            return True, response.leader_id if response.leader_id >= 0 else None

        response: m.StreamResponse = await self._call(what, send, redirect)
        m.raise_for_error(response.error_code, response.error_message, response.leader_id, stream_id)
        return response.result

    async def close(self) -> None:
        self._closed = True
        for voter in list(self._connections):
            await self._drop(voter)


def _kafka_redirect(response: Any) -> tuple[bool, int | None]:
    """NOT_CONTROLLER anywhere in a Kafka response (top level, or per topic / resource)."""
    codes: list[int] = []
    code = getattr(response, "error_code", None)
    if code is not None:
        codes.append(int(code))
    for name in ("topics", "responses", "results"):
        for item in getattr(response, name, None) or ():
            item_code = getattr(item, "error_code", None)
            if item_code is not None:
                codes.append(int(item_code))
    return int(ErrorCode.not_controller) in codes, None


def _describe_quorum_redirect(response: Any) -> tuple[bool, int | None]:
    """DescribeQuorum is answered by the Raft leader only; a follower names the leader it knows."""
    refused = {int(ErrorCode.not_leader_or_follower), int(ErrorCode.not_controller)}
    if int(response.error_code) in refused or not response.topics:
        return True, None
    partition = response.topics[0].partitions[0]
    if int(partition.error_code) in refused:
        leader = int(partition.leader_id)
        return True, leader if leader >= 0 else None
    return False, None


# ------------------------------------------------------------------------------------- the replica


class _ReadOnlyLog:
    """The replica's `Controller` replays; it never writes (writes go to the active controller)."""

    async def append(self, records: Sequence[MetadataRecord]) -> int:
        raise NotControllerError("a broker's metadata replica does not accept writes")


class MetadataFollower(Protocol):
    """The broker's local copy of the committed metadata, wherever it comes from."""

    @property
    def image(self) -> MetadataImage: ...

    @property
    def controller(self) -> Controller:
        """The `Controller` the committed records are replayed into (image subscribers attach here)."""
        ...

    @property
    def leader_id(self) -> int | None: ...

    @property
    def applied_end(self) -> int: ...

    async def wait_applied(self, end: int, timeout: float) -> None: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class VoterFollower:
    """A combined node's broker reads its own voter's state: the voter applies every committed entry (as leader
    or follower), so no observer of its own is needed. Starting and stopping the voter is the node's business."""

    def __init__(self, quorum: QuorumController) -> None:
        self._quorum = quorum

    @property
    def image(self) -> MetadataImage:
        return self._quorum.image

    @property
    def controller(self) -> Controller:
        return self._quorum.controller

    @property
    def leader_id(self) -> int | None:
        return self._quorum.leader_id

    @property
    def applied_end(self) -> int:
        return self._quorum.applied_end

    async def wait_applied(self, end: int, timeout: float) -> None:
        await self._quorum.wait_applied(end, timeout)

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None


class MetadataReplica:
    """The broker's copy of the metadata: a Raft observer replaying committed entries into a `Controller`."""

    def __init__(self, config: ServerConfig, cluster_id: str, voters: Mapping[int, tuple[str, int]]) -> None:
        self.node_id = config.node_id
        self.controller = Controller(config, MetadataImage(cluster_id=cluster_id, controller_id=-1), _ReadOnlyLog())
        self.applied_end = 0  # every committed entry below this offset is applied
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._started = False
        # The observer's log would grow without bound: like the controllers, snapshot the replayed state after
        # this many bytes of entries, and Raft drops the log below the snapshot.
        self._snapshot_after_bytes = int(config.value("metadata.log.max.record.bytes.between.snapshots"))
        self._bytes_since_snapshot = 0
        self._snapshot_pending = False
        self._snapshot_task: asyncio.Task[None] | None = None
        request_ms = int(config.value("controller.quorum.request.timeout.ms"))
        fetch_ms = int(config.value("controller.quorum.fetch.timeout.ms"))
        fetch_wait_ms = min(500, max(1, fetch_ms // 4))
        self.transport = NetworkTransport(self.node_id, voters, request_timeout_s=request_ms / 1000)
        self.driver = RaftDriver(
            self.node_id,
            sorted(voters),
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
        )

    @property
    def image(self) -> MetadataImage:
        return self.controller.image

    @property
    def leader_id(self) -> int | None:
        """The Raft leader this observer follows (None before start or while it looks for one)."""
        return self.driver.leader_id if self._started else None

    async def start(self) -> None:
        await self.driver.start()
        self._started = True

    async def stop(self) -> None:
        await self.driver.stop(resign=False)
        await self.transport.close()

    def _apply(self, entries: Sequence[LogEntry]) -> None:
        for entry in entries:
            records = decode_metadata_records(entry.data, f"metadata log entry {entry.offset}")
            self.controller.replay(records, entry.offset)
            self._bytes_since_snapshot += len(entry.data)
        self._note_leader()
        if self._bytes_since_snapshot >= self._snapshot_after_bytes and not self._snapshot_pending:
            self._snapshot_pending = True
            asyncio.get_running_loop().call_soon(self._snapshot)

    def _snapshot(self) -> None:
        """Captures the state and its applied end together (no await in between), so the snapshot is exact."""
        end = self.applied_end
        data = encode_metadata_records(self.controller.snapshot_records())
        self._bytes_since_snapshot = 0
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


# ----------------------------------------------------------------------------------- stream metadata


class RemoteStreamMetadata:
    """`storage.metadata.api.StreamMetadata` served by the active controller (Fjord's own RPCs).

    A mutation refused with NODE_FENCED while this broker's registration is still current means the controller
    fenced it for a missed session (a pause, a slow heartbeat), not that a newer incarnation exists: such a fence
    lifts at the next heartbeat once the broker has caught up. ``wait_unfenced`` waits for that (bounded) and the
    call is retried, so a broker resuming from a pause uploads and closes what it still owns instead of treating
    the fence as final (the storage engine gives up on a fenced node, leaving the data in its WAL until a restart).
    Nothing unsafe becomes possible: while fenced, every mutation is refused, and streams another broker has
    opened since carry a higher epoch, which the controller checks on every commit.
    """

    _FENCE_RETRIES = 3

    def __init__(
        self,
        channel: ActiveControllerChannel,
        node_id: int,
        node_epoch: Callable[[], int],
        wait_unfenced: Callable[[NodeIdentity], Awaitable[bool]] | None = None,
    ) -> None:
        self._channel = channel
        self._node_id = node_id
        self._node_epoch = node_epoch
        self._wait_unfenced = wait_unfenced

    def _self(self) -> NodeIdentity:
        """The identity read-only calls carry (mutations carry the caller's own NodeIdentity)."""
        return NodeIdentity(self._node_id, self._node_epoch())

    async def _call(self, request: m.StreamRequest, what: str, *, stream_id: int = -1) -> Any:
        attempt = 0
        while True:
            try:
                return await self._channel.stream(request, what, stream_id=stream_id)
            except m.NodeFencedError as exc:
                attempt += 1
                if not request.MUTATES or self._wait_unfenced is None or attempt > self._FENCE_RETRIES:
                    raise
                logger.info("node %d: %s refused while fenced (%s); waiting for the fence to lift",
                            request.node.node_id, what, exc)
                if not await self._wait_unfenced(request.node):
                    raise

    async def create_stream(self, node: NodeIdentity, tags: Sequence[tuple[str, str]] = ()) -> int:
        result: int = await self._call(m.CreateStream(node, tuple(tags)), "create a stream")
        return result

    async def open_stream(self, node: NodeIdentity, stream_id: int, epoch: int) -> OpenStreamResult:
        result: OpenStreamResult = await self._call(
            m.OpenStream(node, stream_id, epoch), f"open stream {stream_id} at epoch {epoch}", stream_id=stream_id
        )
        return result

    async def close_stream(self, node: NodeIdentity, stream_id: int, epoch: int) -> None:
        await self._call(m.CloseStream(node, stream_id, epoch), f"close stream {stream_id}",
                                   stream_id=stream_id)

    async def trim_stream(self, node: NodeIdentity, stream_id: int, epoch: int, new_start_offset: int) -> None:
        await self._call(m.TrimStream(node, stream_id, epoch, new_start_offset),
                                   f"trim stream {stream_id} to {new_start_offset}", stream_id=stream_id)

    async def delete_stream(self, node: NodeIdentity, stream_id: int, epoch: int) -> None:
        await self._call(m.DeleteStream(node, stream_id, epoch), f"delete stream {stream_id}",
                                   stream_id=stream_id)

    async def get_streams(self, stream_ids: Sequence[int]) -> list[StreamMetadataRecord]:
        result = await self._call(m.GetStreams(self._self(), tuple(stream_ids)), "read streams")
        return list(result or ())

    async def get_opening_streams(self, node: NodeIdentity) -> list[OpeningStream]:
        result = await self._call(m.GetOpeningStreams(node), f"list streams opened by node {node.node_id}")
        return list(result or ())

    async def prepare_objects(self, node: NodeIdentity, count: int, ttl_ms: int) -> int:
        result: int = await self._call(m.PrepareObjects(node, count, ttl_ms), f"prepare {count} objects")
        return result

    async def commit_stream_set_object(self, request: CommitStreamSetObjectRequest) -> None:
        await self._call(m.CommitStreamSetObject(request.node, request),
                                   f"commit stream-set object {request.object_id}")

    async def commit_stream_object(self, request: CommitStreamObjectRequest) -> None:
        await self._call(m.CommitStreamObject(request.node, request),
                                   f"commit stream object {request.object_id}")

    async def get_objects(
        self, stream_id: int, start_offset: int, end_offset: int, limit: int
    ) -> list[S3ObjectMetadata]:
        result = await self._call(
            m.GetObjects(self._self(), stream_id, start_offset, end_offset, limit),
            f"find objects of stream {stream_id} [{start_offset}, {end_offset})", stream_id=stream_id,
        )
        return list(result or ())

    async def get_stream_set_objects(self, node_id: int) -> list[S3ObjectMetadata]:
        result = await self._call(m.GetStreamSetObjects(self._self(), node_id),
                                            f"list stream-set objects of node {node_id}")
        return list(result or ())

    async def get_stream_objects(self, stream_id: int) -> list[S3ObjectMetadata]:
        result = await self._call(m.GetStreamObjects(self._self(), stream_id),
                                            f"list stream objects of stream {stream_id}", stream_id=stream_id)
        return list(result or ())

    async def sweep_objects(self, now_ms: int) -> list[int]:
        result = await self._call(m.SweepObjects(self._self(), now_ms), "sweep expired objects")
        return list(result or ())

    async def remove_objects(self, object_ids: Sequence[int]) -> None:
        await self._call(m.RemoveObjects(self._self(), tuple(object_ids)),
                                   f"remove {len(object_ids)} objects")

    async def get_kv(self, key: str) -> bytes | None:
        result: bytes | None = await self._call(m.GetKV(self._self(), key), f"read KV {key}")
        return result

    async def put_kv(self, key: str, value: bytes) -> None:
        await self._call(m.PutKV(self._self(), key, value), f"write KV {key}")

    async def delete_kv(self, key: str) -> None:
        await self._call(m.DeleteKV(self._self(), key), f"delete KV {key}")


# ------------------------------------------------------------------------------------------- the client


class RemoteControllerClient:
    """The broker's `ControllerClient` in a cluster; build it with :meth:`start`, stop it with :meth:`close`."""

    def __init__(self, config: ServerConfig, cluster_id: str, replica: MetadataFollower | None = None) -> None:
        """``replica`` None: a broker-only node, following the metadata log as a Raft observer of its own. A
        combined node passes its voter (:class:`VoterFollower`): the broker reads the voter's applied state and
        sends its writes to the active controller like any broker."""
        self.config = config
        self.node_id = config.node_id
        self.cluster_id = cluster_id
        voters = {v.node_id: (v.host, v.port) for v in config.voters}
        if replica is None and self.node_id in voters:
            raise ConfigError(
                f"node.id {self.node_id} is one of the controller.quorum.voters; a broker-only node needs a node.id "
                "of its own"
            )
        self.replica: MetadataFollower = replica or MetadataReplica(config, cluster_id, voters)
        request_s = int(config.value("controller.quorum.request.timeout.ms")) / 1000
        self.channel = ActiveControllerChannel(
            voters,
            client_id=f"broker-{self.node_id}",
            request_timeout_s=request_s,
            retry_budget_s=max(int(config.value("request.timeout.ms")) / 1000, 2 * request_s),
            leader_hint=lambda: self.replica.leader_id,
        )
        self._stream_metadata = RemoteStreamMetadata(self.channel, self.node_id, lambda: self.node_epoch,
                                                     self.wait_unfenced)
        self.node_epoch = -1
        self.is_fenced = True
        self._heartbeat_interval_s = config.broker_heartbeat_interval_ms / 1000
        self._session_timeout_s = config.broker_session_timeout_ms / 1000
        self._heartbeat_task: asyncio.Task[None] | None = None
        self._incarnation = uuid.uuid4()
        self._heartbeat_error: ErrorCode | None = None  # the last refusal, logged once rather than every beat

    @classmethod
    async def start(
        cls, config: ServerConfig, *, catch_up_timeout_s: float = 60.0, replica: MetadataFollower | None = None
    ) -> RemoteControllerClient:
        """Formats or checks the metadata directory, starts the observer (or takes the combined node's voter as
        ``replica``) and waits until it has caught up with the quorum's committed metadata (bounded: a quorum
        without a leader is a clear error, not a hang)."""
        cluster_id = quorum_cluster_id(config)
        await asyncio.to_thread(ensure_meta_properties, config.metadata_dir, config.node_id, cluster_id)
        client = cls(config, cluster_id, replica)
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
        if self._heartbeat_task is not None:
            self._heartbeat_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeat_task
            self._heartbeat_task = None
            with contextlib.suppress(StorageError, OSError, TimeoutError):
                await self._heartbeat(want_shutdown=True, budget_s=min(5.0, self._session_timeout_s))
        await self.channel.close()
        await self.replica.stop()

    # ---- ControllerClient: reads ---------------------------------------------------------------------------
    @property
    def image(self) -> MetadataImage:
        return self.replica.image

    def subscribe(self, listener: ImageListener) -> None:
        self.replica.controller.subscribe(listener)

    @property
    def stream_metadata(self) -> RemoteStreamMetadata:
        return self._stream_metadata

    async def sync(self, *, timeout: float = 30.0, what: str = "wait for the metadata") -> None:
        """The barrier: reads the active controller's high watermark and waits until the replica has applied
        everything below it, so writes acknowledged before this call are in :attr:`image`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        response = await self.channel.kafka(
            m.DESCRIBE_QUORUM, _DESCRIBE_QUORUM_VERSION, what, budget_s=timeout,
            redirect=_describe_quorum_redirect, idempotent=True, topics=(_describe_quorum_topic(),),
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

    async def forward_to_quorum_leader(self, api_key: int, version: int, request: Any) -> Any:
        """Sends a client's request (DescribeQuorum) unchanged to the Raft leader and returns its answer."""
        fields = {name: getattr(request, name) for name in type(request).__dataclass_fields__}
        return await self.channel.kafka(api_key, version, f"forward api key {api_key} v{version}",
                                        redirect=_describe_quorum_redirect, **fields)

    # ---- brokers -------------------------------------------------------------------------------------------
    async def register_broker(self, node_id: int, listeners: Sequence[Endpoint], rack: str | None) -> int:
        cls = codec.request_class(m.BROKER_REGISTRATION, _BROKER_REGISTRATION_VERSION)
        entries = tuple(
            codec.build_nested(cls, "listeners", name=e.name, host=e.host, port=e.port,
                               security_protocol=_SECURITY_PROTOCOL_IDS.get(e.security_protocol, 0))
            for e in listeners
        )
        response = await self.channel.kafka(
            m.BROKER_REGISTRATION, _BROKER_REGISTRATION_VERSION, f"register broker {node_id}",
            broker_id=node_id, cluster_id=self.cluster_id, incarnation_id=self._incarnation,
            listeners=entries, rack=rack,
        )
        code = ErrorCode(int(response.error_code))
        if code is not ErrorCode.none:
            raise ConfigError(f"broker {node_id}: the controller refused the registration: {code.name}")
        epoch = int(response.broker_epoch)
        self.node_epoch = epoch
        await self.sync(what=f"see broker {node_id}'s registration")
        self.is_fenced = False
        if self._heartbeat_task is None:
            self._heartbeat_task = asyncio.create_task(self._heartbeat_loop(), name=f"broker-{node_id}-heartbeat")
        return epoch

    async def _heartbeat(self, *, want_shutdown: bool = False, budget_s: float) -> None:
        response = await self.channel.kafka(
            m.BROKER_HEARTBEAT, _BROKER_HEARTBEAT_VERSION, f"heartbeat of broker {self.node_id}",
            budget_s=budget_s, idempotent=True, broker_id=self.node_id, broker_epoch=self.node_epoch,
            current_metadata_offset=self.image.offset, want_fence=False, want_shut_down=want_shutdown,
        )
        code = ErrorCode(int(response.error_code))
        if code is not ErrorCode.none:
            if code is not self._heartbeat_error:
                logger.error("broker %d (epoch %d): heartbeat refused with %s; restart the broker to register again",
                             self.node_id, self.node_epoch, code.name)
            self._heartbeat_error = code
            return
        self._heartbeat_error = None
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

    # ---- admin writes --------------------------------------------------------------------------------------
    async def create_topics(self, topics: Sequence[NewTopic], validate_only: bool) -> list[CreateTopicResult]:
        cls = codec.request_class(m.CREATE_TOPICS, _CREATE_TOPICS_VERSION)
        topic_cls = codec.field_entity(cls, "topics")
        entries = tuple(
            codec.build_nested(
                cls, "topics", name=t.name, num_partitions=t.num_partitions, replication_factor=t.replication_factor,
                assignments=tuple(
                    codec.build_nested(topic_cls, "assignments", partition_index=p, broker_ids=tuple(r))
                    for p, r in sorted((t.assignments or {}).items())
                ),
                configs=tuple(codec.build_nested(topic_cls, "configs", name=k, value=v) for k, v in t.configs.items()),
            )
            for t in topics
        )
        names = ", ".join(t.name for t in topics)
        try:
            response = await self.channel.kafka(
                m.CREATE_TOPICS, _CREATE_TOPICS_VERSION, f"create topics {names}",
                topics=entries, timeout=_ADMIN_TIMEOUT_MS, validate_only=validate_only,
            )
        except ControllerUnavailableError as exc:
            return [CreateTopicResult(t.name, None, ErrorCode.not_controller, str(exc)) for t in topics]
        results = [
            CreateTopicResult(
                r.name, r.topic_id if r.error_code == ErrorCode.none else None, ErrorCode(int(r.error_code)),
                r.error_message, int(r.num_partitions), int(r.replication_factor),
                [ConfigEntry(c.name, c.value, ConfigSource(int(c.config_source)), bool(c.read_only),
                             bool(c.is_sensitive)) for c in (r.configs or ())],
            )
            for r in response.topics
        ]
        if not validate_only and any(r.error is ErrorCode.none for r in results):
            await self._sync_after(f"see topics {names}")
        return results

    async def delete_topics(self, names: Sequence[str] = (), ids: Sequence[uuid.UUID] = ()) -> list[DeleteTopicResult]:
        cls = codec.request_class(m.DELETE_TOPICS, _DELETE_TOPICS_VERSION)
        entries = tuple(codec.build_nested(cls, "topics", name=n, topic_id=uuid.UUID(int=0)) for n in names) + tuple(
            codec.build_nested(cls, "topics", name=None, topic_id=i) for i in ids
        )
        try:
            response = await self.channel.kafka(
                m.DELETE_TOPICS, _DELETE_TOPICS_VERSION, "delete topics", topics=entries, timeout=_ADMIN_TIMEOUT_MS
            )
        except ControllerUnavailableError as exc:
            return [DeleteTopicResult(n, None, ErrorCode.not_controller, str(exc)) for n in names] + [
                DeleteTopicResult(None, i, ErrorCode.not_controller, str(exc)) for i in ids
            ]
        results = [
            DeleteTopicResult(r.name, None if r.topic_id == uuid.UUID(int=0) else r.topic_id,
                              ErrorCode(int(r.error_code)), r.error_message)
            for r in response.responses
        ]
        if any(r.error is ErrorCode.none for r in results):
            await self._sync_after("see deleted topics")
        return results

    async def create_partitions(
        self, topic: str, count: int, assignments: Sequence[Sequence[int]] | None, validate_only: bool
    ) -> tuple[ErrorCode, str | None]:
        cls = codec.request_class(m.CREATE_PARTITIONS, _CREATE_PARTITIONS_VERSION)
        topic_cls = codec.field_entity(cls, "topics")
        entry = codec.build_nested(
            cls, "topics", name=topic, count=count,
            assignments=None if assignments is None else tuple(
                codec.build_nested(topic_cls, "assignments", broker_ids=tuple(a)) for a in assignments
            ),
        )
        try:
            response = await self.channel.kafka(
                m.CREATE_PARTITIONS, _CREATE_PARTITIONS_VERSION, f"create partitions of {topic}",
                topics=(entry,), timeout=_ADMIN_TIMEOUT_MS, validate_only=validate_only,
            )
        except ControllerUnavailableError as exc:
            return ErrorCode.not_controller, str(exc)
        result = response.results[0]
        code = ErrorCode(int(result.error_code))
        if code is ErrorCode.none and not validate_only:
            await self._sync_after(f"see the new partitions of {topic}")
        return code, result.error_message

    async def alter_configs(
        self,
        resource: ConfigResource,
        changes: Mapping[str, str | None],
        *,
        incremental_ops: Mapping[str, int] | None,
        validate_only: bool,
    ) -> tuple[ErrorCode, str | None]:
        if incremental_ops is None:
            api_key, version = m.ALTER_CONFIGS, _ALTER_CONFIGS_VERSION
            cls = codec.request_class(api_key, version)
            configs = tuple(
                codec.build_nested(codec.field_entity(cls, "resources"), "configs", name=k, value=v)
                for k, v in changes.items()
            )
        else:
            api_key, version = m.INCREMENTAL_ALTER_CONFIGS, _INCREMENTAL_ALTER_CONFIGS_VERSION
            cls = codec.request_class(api_key, version)
            configs = tuple(
                codec.build_nested(codec.field_entity(cls, "resources"), "configs", name=k,
                                   config_operation=incremental_ops.get(k, 0), value=v)
                for k, v in changes.items()
            )
        entry = codec.build_nested(cls, "resources", resource_type=resource.type, resource_name=resource.name,
                                   configs=configs)
        what = f"alter configs of resource type {resource.type} {resource.name!r}"
        try:
            response = await self.channel.kafka(api_key, version, what, resources=(entry,),
                                                validate_only=validate_only)
        except ControllerUnavailableError as exc:
            return ErrorCode.not_controller, str(exc)
        result = response.responses[0]
        code = ErrorCode(int(result.error_code))
        if code is ErrorCode.none and not validate_only:
            await self._sync_after(what)
        return code, result.error_message

    async def alter_partition_reassignments(
        self, reassignments: Sequence[PartitionReassignment]
    ) -> list[ReassignmentResult]:
        cls = codec.request_class(m.ALTER_PARTITION_REASSIGNMENTS, _ALTER_PARTITION_REASSIGNMENTS_VERSION)
        topic_cls = codec.field_entity(cls, "topics")
        by_topic: dict[str, list[Any]] = {}
        for r in reassignments:
            by_topic.setdefault(r.topic, []).append(
                codec.build_nested(topic_cls, "partitions", partition_index=r.partition, replicas=r.replicas)
            )
        topics = tuple(codec.build_nested(cls, "topics", name=n, partitions=tuple(p)) for n, p in by_topic.items())
        try:
            response = await self.channel.kafka(
                m.ALTER_PARTITION_REASSIGNMENTS, _ALTER_PARTITION_REASSIGNMENTS_VERSION, "reassign partitions",
                topics=topics,
            )
        except ControllerUnavailableError as exc:
            return [ReassignmentResult(r.topic, r.partition, ErrorCode.not_controller, str(exc)) for r in reassignments]
        answered = {
            (t.name, int(p.partition_index)): (ErrorCode(int(p.error_code)), p.error_message)
            for t in response.responses
            for p in t.partitions
        }
        results = [
            ReassignmentResult(r.topic, r.partition,
                               *answered.get((r.topic, r.partition), (ErrorCode.unknown_server_error, "no answer")))
            for r in reassignments
        ]
        if any(r.error is ErrorCode.none for r in results):
            await self._sync_after("see the reassigned partitions")
        return results

    async def elect_leaders(self, partitions: Sequence[tuple[str, int]] | None) -> list[ElectLeaderResult]:
        """The quorum elects leaders itself (on registration and fencing); ElectLeaders is not among the RPCs the
        controller listener serves, so an explicit request reports which partitions still have no leader."""
        image = self.image
        wanted = partitions if partitions is not None else [
            (t.name, p) for t in image.topics_by_name.values() for p in t.partitions
        ]
        results = []
        for topic, index in wanted:
            part = image.partition(topic, index)
            if part is None:
                results.append(ElectLeaderResult(topic, index, ErrorCode.unknown_topic_or_partition,
                                                 f"{topic}-{index} does not exist"))
            elif part.leader >= 0:
                results.append(ElectLeaderResult(topic, index, ErrorCode.election_not_needed, None))
            else:
                results.append(ElectLeaderResult(
                    topic, index, ErrorCode.eligible_leaders_not_available,
                    f"{topic}-{index} has no live broker to lead it; the controller elects one when a broker "
                    "registers",
                ))
        return results

    async def allocate_producer_ids(self, broker_id: int, broker_epoch: int) -> ProducerIdBlock:
        """AllocateProducerIds (api key 67) to the active controller. A retry after a lost answer may cost a block
        (never an overlap: each answer is its own committed record)."""
        response = await self.channel.kafka(
            m.ALLOCATE_PRODUCER_IDS, _ALLOCATE_PRODUCER_IDS_VERSION, f"allocate producer ids for broker {broker_id}",
            broker_id=broker_id, broker_epoch=broker_epoch,
        )
        code = ErrorCode(int(response.error_code))
        if code is not ErrorCode.none:
            raise ControllerError(code, f"broker {broker_id} (epoch {broker_epoch}): the controller refused a "
                                        f"producer id block: {code.name}")
        return ProducerIdBlock(int(response.producer_id_start), int(response.producer_id_len))

    async def complete_wal_failover(self, node: NodeIdentity, failed_node_id: int, failed_node_epoch: int) -> None:
        """Reports this broker's replay of a dead broker's WAL done (``controller.wal_failover``)."""
        await self.channel.stream(m.CompleteWALFailover(node, failed_node_id, failed_node_epoch),
                                  f"complete the WAL failover of broker {failed_node_id}")
        await self._sync_after(f"see the WAL failover of broker {failed_node_id} done")

    async def _sync_after(self, what: str) -> None:
        try:
            await self.sync(what=what)
        except ControllerUnavailableError as exc:
            # The write itself succeeded; only its visibility here is late. Say so rather than fail the request.
            logger.warning("broker %d: %s", self.node_id, exc)


def _describe_quorum_topic() -> Any:
    cls = codec.request_class(m.DESCRIBE_QUORUM, _DESCRIBE_QUORUM_VERSION)
    return codec.build_nested(
        cls, "topics", topic_name=m.METADATA_TOPIC,
        partitions=(codec.build_nested(codec.field_entity(cls, "topics"), "partitions",
                                       partition_index=m.METADATA_PARTITION),),
    )
