"""``SharePartitions``: every share partition this broker leads, loaded on first use, timed out, dropped with
their partition.

In Fjord a share partition's state lives with its topic partition (the partition's share stream), so the broker
that leads the partition serves its share groups: :meth:`SharePartitions.get` finds the open partition, replays its
share stream once (:class:`~broker.share.store.ShareStore`) and hands out one :class:`SharePartition` per group,
initializing a group's state the first time (``share.auto.offset.reset``) with a snapshot. When the partition closes
(leadership moved, reassignment, shutdown, deletion) everything loaded for it is dropped: the next leader replays
the stream. One timer task per broker expires acquisition locks, and :meth:`wait_for_change` lets ShareFetch
long-polls wake on appends to a share-fetched partition, on releases and on time-outs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from kio.schema.errors import ErrorCode

from broker.partition.access import OPEN_WAIT_SECONDS
from broker.partition.partition_log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, PartitionLog
from broker.share.config import NoMetrics, ShareMetricsSink, limits_of
from broker.share.partition_state import PartitionShareState
from broker.share.share_partition import SharePartition
from broker.share.store import ShareStore
from metadata.controller_api import ControllerClient
from settings.group_configs import by_duration_ms
from settings.share_groups import ShareGroupConfig
from wire.errors import KafkaError
from wire.log_text import untrusted

logger = logging.getLogger(__name__)

#: The lock timer's longest sleep: it also notices partitions this broker no longer leads.
_MAX_TICK_S = 0.25
_MIN_TICK_S = 0.01
_APPEND_WAIT_S = 5.0
#: How many waiters :meth:`SharePartitions.wait_for_change` keeps before dropping those already done or cancelled.
_PRUNE_WAITERS_AT = 256


def _duration_ms(reset: str) -> int | None:
    """The duration of ``by_duration:<ISO-8601>``; None (and a warning: the group then starts at the latest
    offset, Kafka's default) for one the config validation should have refused."""
    try:
        return by_duration_ms(reset)
    except ValueError as exc:
        logger.warning("share.auto.offset.reset %r: %s; using latest", reset, exc)
        return None


def _wall_ms() -> int:
    return int(time.time() * 1000)


class LedPartitions(Protocol):
    """What the registry reads of the partition manager (``broker.partition.manager.PartitionManager``)."""

    @property
    def node_id(self) -> int: ...

    @property
    def controller(self) -> ControllerClient: ...

    def get_by_id(self, topic_id: uuid.UUID, partition: int) -> PartitionLog | None: ...

    def open_partitions(self) -> list[PartitionLog]: ...

    async def wait_open(self, topic: str, partition: int, timeout: float) -> PartitionLog | None: ...


@dataclass(slots=True)
class _Loaded:
    """What is loaded of one open partition: its store and the share partitions of its groups."""

    log: PartitionLog
    store: ShareStore
    groups: dict[str, SharePartition] = field(default_factory=dict)
    watcher: asyncio.Task[None] | None = None


class SharePartitions:
    """The share partitions of the topic partitions this broker leads (``share_partitions`` on the broker)."""

    def __init__(
        self,
        partitions: LedPartitions,
        config_for: Callable[[str], ShareGroupConfig],
        *,
        metrics: ShareMetricsSink | None = None,
        clock_ms: Callable[[], int] = _wall_ms,
    ) -> None:
        """``config_for(group_id)``: the group's effective settings, read at every operation (they can change).
        ``clock_ms``: wall-clock milliseconds (lock deadlines, by_duration resets); tests inject one."""
        self._partitions = partitions
        self._config_for = config_for
        self._metrics: ShareMetricsSink = metrics if metrics is not None else NoMetrics()
        self._clock_ms = clock_ms
        self._loaded: dict[tuple[uuid.UUID, int], _Loaded] = {}
        self._locks: dict[tuple[uuid.UUID, int], asyncio.Lock] = {}
        self._waiters: list[asyncio.Future[None]] = []
        self._prune_at = _PRUNE_WAITERS_AT
        self._timer: asyncio.Task[None] | None = None
        self._kick = asyncio.Event()
        self._stopping = False

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        self._timer = asyncio.create_task(self._lock_timer(), name="share-lock-timer")

    async def stop(self) -> None:
        self._stopping = True
        if self._timer is not None:
            self._timer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._timer
        for key in list(self._loaded):
            self._drop(key)
        self._notify()

    # ------------------------------------------------------------------ the plan's API
    async def get(self, group_id: str, topic_id: uuid.UUID, partition: int) -> SharePartition:
        """The group's share partition of ``topic_id``-``partition``, loaded or initialized on first use. Raises
        KafkaError: UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER."""
        loaded = await self._load(topic_id, partition)
        found = loaded.groups.get(group_id)
        if found is not None:
            return found
        async with self._lock(topic_id, partition):
            found = loaded.groups.get(group_id)
            if found is not None:
                return found
            replayed = loaded.store.replayed.groups.get(group_id)
            if replayed is not None:
                state = replayed.state
            else:
                state = PartitionShareState(await self._initial_offset(loaded.log, group_id))
                state.leader_epoch = loaded.log.leader_epoch
                await loaded.store.write_snapshot(group_id, state)
                logger.info(
                    "%s: share group %s starts at offset %d",
                    loaded.log.where, untrusted(group_id), state.start_offset,
                )
            state.leader_epoch = loaded.log.leader_epoch
            state.limits = limits_of(self._config_for(group_id))
            share = SharePartition(
                group_id, loaded.log, loaded.store, state,
                config_for=self._config_for, metrics=self._metrics, changed=self._notify,
            )
            loaded.groups[group_id] = share
            self._kick.set()
            return share

    def is_loaded(self, group_id: str, topic_id: uuid.UUID, partition: int) -> bool:
        """The group's share partition is in memory: :meth:`get` answers without reading storage."""
        loaded = self._loaded.get((topic_id, partition))
        return loaded is not None and not loaded.log.closed and group_id in loaded.groups

    def wait_for_change(self) -> asyncio.Future[None]:
        """Resolves at the next append to a share-fetched partition, release, lock time-out or partition drop."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if len(self._waiters) >= self._prune_at:
            # Long-polls that ended without a change cancel their future; without this, an idle cluster's polls
            # would pile up here until the next change. The bound doubles with the live waiters, so pruning stays
            # amortized constant per call however many long-polls are waiting.
            self._waiters = [w for w in self._waiters if not w.done()]
            self._prune_at = max(_PRUNE_WAITERS_AT, 2 * len(self._waiters))
        self._waiters.append(future)
        return future

    async def summary(self, group_id: str, topic_id: uuid.UUID, partition: int) -> tuple[int, int, int, int] | None:
        """(start offset, state epoch, leader epoch, records past the start acknowledged or archived) of the
        group's state here, None when it has none."""
        loaded = await self._load(topic_id, partition)
        share = loaded.groups.get(group_id)
        state = share.state if share is not None else None
        if state is None:
            replayed = loaded.store.replayed.groups.get(group_id)
            state = replayed.state if replayed is not None else None
        if state is None:
            return None
        return state.start_offset, state.state_epoch, loaded.log.leader_epoch, state.delivery_complete_count

    async def reset(self, group_id: str, topic_id: uuid.UUID, partition: int, start_offset: int) -> None:
        """AlterShareGroupOffsets (the caller checked the group is empty): a new start, nothing in flight."""
        loaded = await self._load(topic_id, partition)
        async with self._lock(topic_id, partition):
            share = loaded.groups.get(group_id)
            replayed = loaded.store.replayed.groups.get(group_id)
            if share is not None:
                state = share.state
            elif replayed is not None:
                state = replayed.state
            else:
                state = PartitionShareState(start_offset)
                state.state_epoch = -1
            state.reset(start_offset)
            state.leader_epoch = loaded.log.leader_epoch
            await loaded.store.write_snapshot(group_id, state)
        self._notify()

    async def delete(self, group_id: str, topic_id: uuid.UUID, partition: int) -> None:
        """DeleteShareGroupOffsets: the group's state here is gone (the next fetch initializes it again)."""
        loaded = await self._load(topic_id, partition)
        async with self._lock(topic_id, partition):
            loaded.groups.pop(group_id, None)
            await loaded.store.write_tombstone(group_id)

    async def delete_group_state(self, group_id: str) -> None:
        """DeleteGroups: the group's state on every partition this broker leads."""
        for log in self._partitions.open_partitions():
            if log.share_stream is None:
                continue
            try:
                await self.delete(group_id, log.topic_id, log.partition)
            except KafkaError as exc:  # the partition moved meanwhile: its new leader still has the state
                logger.warning("deleting share group %s's state on %s failed: %s", untrusted(group_id), log.where, exc)

    def groups_on(self, topic_id: uuid.UUID, partition: int) -> list[str]:
        """The share groups with state loaded for the partition (it is loaded by its first share fetch or
        summary)."""
        loaded = self._loaded.get((topic_id, partition))
        if loaded is None:
            return []
        return sorted(set(loaded.groups) | set(loaded.store.groups()))

    def forget(self, topic: str, partition: int) -> None:
        """The partition closed here (the partition manager's ``on_removed``): drop what was loaded for it."""
        for key, loaded in list(self._loaded.items()):
            if loaded.log.topic == topic and loaded.log.partition == partition:
                self._drop(key)
        self._notify()

    # ------------------------------------------------------------------ loading
    def _lock(self, topic_id: uuid.UUID, partition: int) -> asyncio.Lock:
        return self._locks.setdefault((topic_id, partition), asyncio.Lock())

    async def _leader_log(self, topic_id: uuid.UUID, partition: int) -> PartitionLog:
        log = self._partitions.get_by_id(topic_id, partition)
        if log is not None:
            return log
        image = self._partitions.controller.image
        topic = image.topics_by_id.get(topic_id)
        if topic is None:
            raise KafkaError(ErrorCode.unknown_topic_id, f"topic id {topic_id} does not exist")
        part = image.partition(topic.name, partition)
        if part is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"{topic.name}-{partition} does not exist")
        if part.leader != self._partitions.node_id:
            raise KafkaError(ErrorCode.not_leader_or_follower, f"{topic.name}-{partition} is led by node {part.leader}")
        opened = await self._partitions.wait_open(topic.name, partition, OPEN_WAIT_SECONDS)
        if opened is None:
            raise KafkaError(ErrorCode.not_leader_or_follower, f"{topic.name}-{partition} is not open here yet")
        return opened

    async def _load(self, topic_id: uuid.UUID, partition: int) -> _Loaded:
        key = (topic_id, partition)
        log = await self._leader_log(topic_id, partition)
        loaded = self._loaded.get(key)
        if loaded is not None and loaded.log is log and not log.closed:
            return loaded
        async with self._lock(topic_id, partition):
            loaded = self._loaded.get(key)
            if loaded is not None and loaded.log is log and not log.closed:
                return loaded
            if loaded is not None:
                self._drop(key)
            store = await ShareStore.load(log)
            if log.closed:
                raise KafkaError(ErrorCode.not_leader_or_follower, f"{log.where} is no longer led by this broker")
            loaded = _Loaded(log, store)
            loaded.watcher = asyncio.create_task(self._watch_appends(log), name=f"share-appends-{log.where}")
            self._loaded[key] = loaded
            return loaded

    def _drop(self, key: tuple[uuid.UUID, int]) -> None:
        loaded = self._loaded.pop(key, None)
        if loaded is not None and loaded.watcher is not None:
            loaded.watcher.cancel()

    async def _initial_offset(self, log: PartitionLog, group_id: str) -> int:
        """Where a group starts on a partition it never read: ``share.auto.offset.reset``."""
        config = self._config_for(group_id)
        read_committed = config.isolation_level == 1
        reset = config.auto_offset_reset.strip().lower()
        if reset == "earliest":
            found = await log.offset_for_timestamp(EARLIEST_TIMESTAMP, read_committed=read_committed)
        elif reset.startswith("by_duration:") and (duration := _duration_ms(config.auto_offset_reset)) is not None:
            since = self._clock_ms() - duration
            found = await log.offset_for_timestamp(max(since, 0), read_committed=read_committed)
            if found is None:  # nothing that recent: the end
                found = await log.offset_for_timestamp(LATEST_TIMESTAMP, read_committed=read_committed)
        else:
            found = await log.offset_for_timestamp(LATEST_TIMESTAMP, read_committed=read_committed)
        return found.offset if found is not None else log.log_start_offset

    # ------------------------------------------------------------------ waking and timing out
    def _notify(self) -> None:
        waiters, self._waiters = self._waiters, []
        for future in waiters:
            if not future.done():
                future.set_result(None)

    async def _watch_appends(self, log: PartitionLog) -> None:
        """Wakes long-polls when the partition's high watermark moves (new records to acquire)."""
        loop = asyncio.get_running_loop()
        while not log.closed:
            seen = log.high_watermark
            began = loop.time()
            if await log.wait_for_data(seen, _APPEND_WAIT_S):
                if log.high_watermark > seen:
                    self._notify()
            elif loop.time() - began < _APPEND_WAIT_S / 2:
                return  # the log stream is no longer open (fenced, storage halted): nothing will be appended

    async def _lock_timer(self) -> None:
        """Sleeps until the earliest lock deadline (at most :data:`_MAX_TICK_S`), then times out what is due and
        drops what is loaded for partitions that closed."""
        while not self._stopping:
            try:
                for key, loaded in list(self._loaded.items()):
                    if loaded.log.closed:
                        self._drop(key)
                        self._notify()
                for write in self.tick():
                    await write  # _persist: an error code, never an exception
            except Exception:
                logger.exception("share lock timer round failed; continuing")
            deadlines = [
                due
                for loaded in self._loaded.values()
                for share in loaded.groups.values()
                if (due := share.state.next_deadline()) is not None
            ]
            wait_s = _MAX_TICK_S
            if deadlines:
                wait_s = min(max((min(deadlines) - self._clock_ms()) / 1000, _MIN_TICK_S), _MAX_TICK_S)
            self._kick.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._kick.wait(), wait_s)

    def tick(self, now_ms: int | None = None) -> list[Awaitable[int]]:
        """One pass of the lock timer (tests drive it with their own clock): the durable writes it issued."""
        now = self._clock_ms() if now_ms is None else now_ms
        writes: list[Awaitable[int]] = []
        for loaded in list(self._loaded.values()):
            for share in list(loaded.groups.values()):
                write = share.expire_locks(now)
                if write is not None:
                    writes.append(write)
        return writes
