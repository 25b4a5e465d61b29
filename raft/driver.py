"""Runs a `RaftNode` on asyncio with a real clock, a transport and on-disk storage.

One task owns the node. Each turn it takes every inbound message that has arrived, ticks the node, and executes the
node's effects under the durability contract of `raft.effects`: persistence effects are applied to `RaftStorage` and
made durable (the only blocking part: a few entries in place, since on a busy node the GIL hand-offs of a worker thread
take longer than their write and fsync, ``storage.offload``; a large write in a worker thread) before any message that
follows them is sent, and the log end that became durable is reported back with ``log_flushed``. Everything that piles
up while one fsync runs goes into the next one, so a burst of proposals costs one fsync (group commit). An observer (a
broker replaying the metadata log) writes behind its turns instead, in order, one write after the other: nothing it
sends depends on its log being durable, so its next fetch leaves, and the commit that fetch brings is applied, while it
still writes the entries before (two metadata changes in a row, a closed stream and its partition's new leader, reach
the broker without an fsync between them).

Committed DATA entries are handed to the ``apply`` callback in offset order; a snapshot to load goes to
``load_snapshot``. Both run on the event loop and must not block.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from raft.core import NotLeader, RaftConfig, RaftNode, VoterChange, VoterChangeRefused
from raft.effects import (
    PERSIST_EFFECTS,
    AppendEntries,
    Commit,
    Effect,
    LoadSnapshot,
    PersistEffect,
    PersistQuorumState,
    Role,
    RoleChanged,
    Send,
    TruncateLog,
    VotersChanged,
)
from raft.log import EntryKind, LogEntry, SnapshotId
from raft.messages import DescribeQuorumResponse, RaftMessage, ReplicaState
from raft.storage import RaftStorage, RaftStorageError
from raft.transport import Transport
from raft.voter_set import VoterSet
from storage.offload import INLINE_BYTES, offload

logger = logging.getLogger(__name__)

ApplyCallback = Callable[[Sequence[LogEntry]], None]
LoadSnapshotCallback = Callable[[SnapshotId, bytes], None]


class NotLeaderError(Exception):
    """The proposal cannot be (or was not) committed by this node; ``leader_id`` is where to retry, if known."""

    def __init__(self, node_id: int, leader_id: int | None, epoch: int, detail: str = "") -> None:
        where = f"leader is {leader_id}" if leader_id is not None else "no leader known"
        super().__init__(f"node {node_id} is not the leader of epoch {epoch} ({where}){detail}")
        self.leader_id = leader_id
        self.epoch = epoch


class VoterChangeError(Exception):
    """The leader refused a voter change (KIP-853); ``error_code`` is Kafka's code for the reason."""

    def __init__(self, refusal: VoterChangeRefused) -> None:
        super().__init__(refusal.message)
        self.error_code = int(refusal.error)


class RaftDriver:
    def __init__(
        self,
        node_id: int,
        voters: Sequence[int] | VoterSet,
        directory: Path | str,
        transport: Transport,
        *,
        apply: ApplyCallback,
        load_snapshot: LoadSnapshotCallback | None = None,
        config: RaftConfig | None = None,
        rng: random.Random | None = None,
        segment_bytes: int = 16 << 20,
        on_committed: Callable[[int], None] | None = None,
        on_voters: Callable[[VoterSet], None] | None = None,
    ) -> None:
        """``on_committed(high_watermark)`` runs after the entries below it were handed to ``apply`` (control
        entries included in the count): what a reader waiting for "applied up to" needs. ``on_voters(voters)``
        runs when the voters in effect change (KIP-853), and once at start with those the log holds."""
        self.node_id = node_id
        self.voters = voters if isinstance(voters, VoterSet) else VoterSet.of(voters)
        self._on_voters = on_voters
        self.storage = RaftStorage(directory, segment_bytes=segment_bytes)
        self.transport = transport
        self._apply = apply
        self._load_snapshot = load_snapshot
        self._on_committed = on_committed
        self.config = config or RaftConfig()
        self._rng = rng or random.Random()
        self._origin = time.monotonic()
        self._node: RaftNode | None = None
        self._task: asyncio.Task[None] | None = None
        self._pump_task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._inbound: list[tuple[int, RaftMessage]] = []
        self._waiters: list[tuple[int, int, asyncio.Future[int]]] = []  # (offset, epoch, future)
        self._leader_change = asyncio.Condition()
        self._stopping: str | None = None
        self._inflight_write: asyncio.Future[int] | None = None
        self._write_failure: Exception | None = None  # an observer's write behind its turns failed: it stops
        #: Set, with what happened, when the driver loop fails: the node is no longer a member of the quorum.
        self._failure: Exception | None = None
        self._failed = asyncio.Event()

    # ---- lifecycle -----------------------------------------------------------------------------------------
    def now_ms(self) -> int:
        return int((time.monotonic() - self._origin) * 1000)

    async def start(self) -> None:
        recovered = await asyncio.to_thread(self.storage.recover)
        self._node = RaftNode(
            self.node_id,
            self.voters,
            rng=self._rng,
            now_ms=self.now_ms(),
            config=self.config,
            quorum_state=recovered.quorum_state,
            log=recovered.log,
            snapshot_data=recovered.snapshot_data,
        )
        # The recovered snapshot reaches the state machine before start() returns.
        await self._execute(self._node.drain())
        if self._on_voters is not None:
            self._on_voters(self._node.voter_set)
        self._pump_task = asyncio.create_task(self._pump(), name=f"raft-{self.node_id}-inbound")
        self._task = asyncio.create_task(self._run(), name=f"raft-{self.node_id}")

    async def stop(self, *, resign: bool = True) -> None:
        """Stop after the current turn; a leader first hands over with EndQuorumEpoch unless ``resign`` is False."""
        if self._node is None:
            return  # never started: nothing was opened
        self._stopping = "resign" if resign else "quiet"
        self._wake.set()
        if self._task is not None:
            with contextlib.suppress(Exception):
                await self._task
        await self._cancel_tasks()
        self._fail_waiters(detail="; the node stopped")
        await asyncio.to_thread(self.storage.close if self._failure is None else self.storage.abandon)

    def _stop_on(self, failure: Exception) -> None:
        self._fail_waiters(detail="; the raft driver failed")
        self._failure = failure
        self._failed.set()

    async def failed(self) -> Exception:
        """Returns, with its error, once the driver loop has failed (its log could not be written, or a bug): the
        node neither votes, nor replicates, nor applies from then on, so its process should stop (as Kafka's fault
        handler halts it) for its supervisor to start it again. Never returns for a driver that runs or stopped."""
        await self._failed.wait()
        assert self._failure is not None
        return self._failure

    async def crash(self) -> None:
        """Stop abruptly, as a kill -9 would: nothing more is sent, flushed or handed over (tests and benches).

        Writes already handed to the OS stay there: an in-process crash cannot lose the page cache.
        """
        await self._cancel_tasks()
        self._fail_waiters(detail="; the node crashed")

    async def _cancel_tasks(self) -> None:
        for task in (self._task, self._pump_task):
            if task is not None:
                task.cancel()
                await asyncio.wait([task])
                if not task.cancelled():
                    task.exception()  # a failed loop was logged and kept when it failed (_stop_on)
        self._task = self._pump_task = None
        if self._inflight_write is not None:
            # The storage thread cannot be interrupted; let it finish before anyone reopens the directory.
            await asyncio.wait([self._inflight_write])
            self._inflight_write = None

    # ---- queries -------------------------------------------------------------------------------------------
    @property
    def node(self) -> RaftNode:
        if self._node is None:
            raise RuntimeError(f"raft node {self.node_id} is not started")
        return self._node

    @property
    def role(self) -> Role:
        return self.node.role

    @property
    def leader_id(self) -> int | None:
        return self.node.leader_id

    @property
    def epoch(self) -> int:
        return self.node.epoch

    @property
    def high_watermark(self) -> int:
        return self.node.high_watermark

    def describe(self) -> DescribeQuorumResponse:
        """The core's DescribeQuorum answer with its timestamps on the wall clock.

        The core counts time from this driver's start on a monotonic clock (an NTP step must not move its timers);
        Kafka reports the leader's wall-clock time (ms since the epoch), which ``kafka-metadata-quorum`` shows as
        dates and ages, so each timestamp is moved onto the wall clock here; -1 (never) stays -1.
        """
        now = self.now_ms()
        answer = self.node.describe(now)
        shift = int(time.time() * 1000) - now

        def on_wall_clock(states: tuple[ReplicaState, ...]) -> tuple[ReplicaState, ...]:
            return tuple(
                dataclasses.replace(
                    s,
                    last_fetch_timestamp=s.last_fetch_timestamp + shift if s.last_fetch_timestamp >= 0 else -1,
                    last_caught_up_timestamp=(
                        s.last_caught_up_timestamp + shift if s.last_caught_up_timestamp >= 0 else -1
                    ),
                )
                for s in states
            )

        return dataclasses.replace(
            answer, current_voters=on_wall_clock(answer.current_voters), observers=on_wall_clock(answer.observers)
        )

    async def wait_for_leader(self, timeout: float) -> int:
        """Block until this node knows a leader (possibly itself); returns its id."""
        async with asyncio.timeout(timeout), self._leader_change:
            await self._leader_change.wait_for(lambda: self.node.leader_id is not None and self.node.role in (
                Role.LEADER, Role.FOLLOWER))
            leader = self.node.leader_id
            assert leader is not None
            return leader

    # ---- writes --------------------------------------------------------------------------------------------
    async def propose(self, entries: Sequence[bytes]) -> int:
        """Append ``entries`` and wait until they are committed; returns the offset of the last one.

        Raises `NotLeaderError` at once on a non-leader, or later if leadership moves before the commit (the
        entries may or may not end up committed by the next leader then).
        """
        node = self.node
        result = node.propose(entries, self.now_ms())
        if isinstance(result, NotLeader):
            raise NotLeaderError(self.node_id, result.leader_id, result.epoch)
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._waiters.append((result, node.epoch, future))
        self._wake.set()
        return await future

    async def change_voters(self, change: VoterChange) -> int:
        """Append a voter change (KIP-853) and wait until it is committed; returns its offset. Raises
        `VoterChangeError` with Kafka's error code when the leader refuses it, `NotLeaderError` as `propose`."""
        node = self.node
        result = node.change_voters(change, self.now_ms())
        if isinstance(result, NotLeader):
            raise NotLeaderError(self.node_id, result.leader_id, result.epoch)
        if isinstance(result, VoterChangeRefused):
            raise VoterChangeError(result)
        if result < node.high_watermark:  # nothing appended (an update that changes nothing): committed already
            return result
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._waiters.append((result, node.epoch, future))
        self._wake.set()
        return await future

    def learn_voters(self, voters: VoterSet) -> bool:
        """Tells a member that knows no voter who they are (``RaftNode.learn_voters``); the next turn acts on it."""
        learned = self.node.learn_voters(voters, self.now_ms())
        self._wake.set()
        return learned

    async def take_snapshot(self, end_offset: int, data: bytes) -> SnapshotId | None:
        """Hand the state machine's image at ``end_offset`` (applied) to Raft; the log below it is then deleted."""
        snapshot_id = self.node.snapshot_taken(end_offset, data, self.now_ms())
        self._wake.set()
        return snapshot_id

    # ---- the loop ------------------------------------------------------------------------------------------
    async def _pump(self) -> None:
        while True:
            item = await self.transport.inbound.get()
            self._inbound.append(item)
            self._wake.set()

    async def _run(self) -> None:
        node = self.node
        try:
            while True:
                await self._execute(node.drain())
                if self._stopping is not None:
                    if self._stopping == "resign" and node.role is Role.LEADER:
                        node.resign(self.now_ms())
                        await self._execute(node.drain())
                    return
                now = self.now_ms()
                wait_s = max(0.0, (node.next_deadline_ms(now) - now) / 1000)
                if not self._inbound:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(wait_s):
                            await self._wake.wait()
                self._wake.clear()
                now = self.now_ms()
                inbound, self._inbound = self._inbound, []
                for sender, message in inbound:
                    node.receive(sender, message, now)
                node.tick(now)
        except asyncio.CancelledError:
            raise
        except RaftStorageError as exc:
            # The log or its quorum state could not be written (a full disk): one line naming the directory.
            logger.error("raft node %d: %s; the node stops", self.node_id, exc)
            self._stop_on(exc)
            raise
        except Exception as exc:
            logger.exception("raft node %d: driver loop failed; the node stops", self.node_id)
            self._stop_on(exc)
            raise

    async def _execute(self, effects: list[Effect]) -> None:
        node = self.node
        if self._write_failure is not None:
            raise self._write_failure
        while effects:
            batch: list[PersistEffect] = []
            for effect in effects:
                if isinstance(effect, PERSIST_EFFECTS):
                    batch.append(effect)
                    continue
                if isinstance(effect, Send):
                    # See the module docstring: an observer's sends do not wait for its writes (asked each time: a
                    # VOTERS entry in this batch may have just made this node a voter).
                    if batch and not node.is_observer:
                        await self._persist(batch)
                        batch = []
                    self.transport.send(effect.destination, effect.message)
                elif isinstance(effect, Commit):
                    self._on_commit(effect)
                elif isinstance(effect, LoadSnapshot):
                    if self._load_snapshot is not None:
                        self._load_snapshot(effect.snapshot_id, effect.data)
                elif isinstance(effect, RoleChanged):
                    await self._on_role_changed(effect)
                elif isinstance(effect, VotersChanged) and self._on_voters is not None:
                    self._on_voters(effect.voters)
            if batch:
                if node.is_observer:
                    self._persist_behind(batch)
                else:
                    await self._persist(batch)
            effects = node.drain()

    def _persist_behind(self, batch: list[PersistEffect]) -> None:
        """An observer's write, after the one in flight (the storage sees every write in order, one at a time);
        ``log_flushed`` follows when it is durable. A failed write stops the node at its next turn, as a failed
        write in the turn would."""
        previous = self._inflight_write

        async def chained() -> int:
            if previous is not None:
                await asyncio.wait([previous])
                if previous.cancelled() or previous.exception() is not None:
                    raise RuntimeError("an earlier raft log write failed")
            return await asyncio.to_thread(self._write, batch)

        future = asyncio.ensure_future(chained())
        self._inflight_write = future
        future.add_done_callback(self._written_behind)

    def _written_behind(self, future: asyncio.Future[int]) -> None:
        if future.cancelled():
            return
        exc = future.exception()
        if exc is not None:
            if self._write_failure is None:
                self._write_failure = exc if isinstance(exc, Exception) else RuntimeError(str(exc))
            self._wake.set()
            return
        if self._inflight_write is future:
            self._inflight_write = None
        if self._node is not None:
            self._node.log_flushed(future.result(), self.now_ms())

    def _write(self, batch: list[PersistEffect]) -> int:
        """Applies ``batch`` to the storage and makes it durable (in a worker thread or inline); returns the durable
        log end. A write error becomes a RaftStorageError naming the directory: the driver stops on it."""
        try:
            for effect in batch:
                self.storage.apply(effect)
            return self.storage.flush()
        except OSError as exc:
            raise RaftStorageError(f"{self.storage.directory}: writing the Raft log failed: {exc}") from exc

    async def _persist(self, batch: list[PersistEffect]) -> None:
        self._inflight_write = asyncio.ensure_future(offload(_write_size(batch), self._write, batch))
        durable_end = await asyncio.shield(self._inflight_write)
        self._inflight_write = None
        self.node.log_flushed(durable_end, self.now_ms())

    def _on_commit(self, commit: Commit) -> None:
        data = [e for e in commit.entries if e.kind is EntryKind.DATA]
        if data:
            self._apply(data)
        still_waiting = []
        for offset, epoch, future in self._waiters:
            if offset < commit.high_watermark:
                if not future.done():
                    future.set_result(offset)
            else:
                still_waiting.append((offset, epoch, future))
        self._waiters = still_waiting
        if self._on_committed is not None:
            self._on_committed(commit.high_watermark)

    async def _on_role_changed(self, change: RoleChanged) -> None:
        logger.info("raft node %d: %s in epoch %d (leader %s)", self.node_id, change.role, change.epoch,
                    change.leader_id)
        if change.role is not Role.LEADER:
            self._fail_waiters(detail=f"; leadership moved in epoch {change.epoch}, outcome unknown")
        async with self._leader_change:
            self._leader_change.notify_all()

    def _fail_waiters(self, detail: str) -> None:
        node = self._node
        for _, epoch, future in self._waiters:
            if not future.done():
                leader = node.leader_id if node is not None else None
                future.set_exception(NotLeaderError(self.node_id, leader, epoch, detail))
        self._waiters = []


def _write_size(batch: Sequence[PersistEffect]) -> int:
    """The bytes a write of ``batch`` handles, for ``offload``: appended entries and small records count their
    size; a snapshot, a trim or a reset (which can touch whole files) counts as large."""
    size = 0
    for effect in batch:
        if isinstance(effect, AppendEntries):
            size += sum(len(entry.data) for entry in effect.entries)
        elif not isinstance(effect, PersistQuorumState | TruncateLog):
            return INLINE_BYTES + 1
    return size
