"""The partitions of an internal topic that this broker leads, for the coordinator whose state lives in them.

The group coordinator keeps its state in ``__consumer_offsets`` and the transaction coordinator in
``__transaction_state``, and both serve a key (a group id, a transactional id) from the leader of the key's partition
(Kafka's hash of the key). Everything about *owning* those partitions is the same for both, so it lives here once:
following the metadata image (load a partition when this broker becomes its leader, drop what it held when it stops
being the leader at that epoch), replaying a partition's log from its start to the high watermark before serving
it (COORDINATOR_LOAD_IN_PROGRESS meanwhile, NOT_COORDINATOR once it moved), creating the topic on first use,
FindCoordinator, the tasks in flight that stop waits for, and the translation of a failed append into the error
codes coordinator clients understand.

What a partition *holds* is the coordinator's business: it reads a log (``read``, with :func:`replay`), installs
what it read (``install``) and drops a partition's state when it goes (``unload``).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from kio.schema.errors import ErrorCode

from broker.broker_context import BrokerContext
from broker.partition.manager import PartitionManager
from broker.partition.partition_log import PartitionLog
from metadata.controller_api import NewTopic
from metadata.errors import error_code_logged
from metadata.image import MetadataImage
from settings.server import ServerConfig
from storage.errors import StorageError
from wire.record_batch import BatchHeader, Record, decode_records, iter_batches
from wire.stored_schema import partition_for

logger = logging.getLogger(__name__)

_LOAD_READ_BYTES = 1 << 20
_WAIT_OPEN_SECONDS = 5.0
# How long FindCoordinator waits for a freshly created or reassigned partition to load before it answers;
# clients retry on COORDINATOR_NOT_AVAILABLE anyway, this only saves them a round of backoff.
_FIND_WAIT_SECONDS = 3.0
_STOP_DRAIN_SECONDS = 5.0
_LOAD_RETRY_SECONDS = 1.0

ReplayedT = TypeVar("ReplayedT")


@dataclass(frozen=True)
class InternalTopic:
    """One internal topic: its name, the configs it is created from, and the words its logs use."""

    name: str
    #: Who serves the topic's partitions, as log lines say it ("group coordinator").
    role: str
    #: What one of its partitions holds, as log lines count it ("groups").
    items: str
    #: The config key of its partition count (used to create it, and until it exists).
    partitions_key: str
    replication_key: str
    #: Its topic configs, from the broker's.
    configs: Callable[[ServerConfig], Mapping[str, str]]

    def new_topic(self, cfg: ServerConfig) -> NewTopic:
        """The topic as it is created, by its coordinator on first use or by a Metadata request naming it (Kafka's
        AutoTopicCreationManager gives these names the coordinator's definition): with the default one, a compacted
        topic would be created with cleanup.policy=delete, and its state deleted by retention."""
        return NewTopic(
            name=self.name,
            num_partitions=int(cfg.value(self.partitions_key)),
            replication_factor=int(cfg.value(self.replication_key)),
            configs=self.configs(cfg),
        )


class Load(enum.Enum):
    LOADING = "loading"
    ACTIVE = "active"


@dataclass
class OwnedPartition:
    """A partition of an internal topic this broker leads, at one leader epoch (the transaction coordinator's
    *coordinator epoch*). A new epoch is a new object: whatever holds one can tell it was replaced."""

    topic: str
    partition: int
    leader_epoch: int
    state: Load = Load.LOADING
    loaded: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None

    @property
    def where(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True)
class Loaded:
    """What installing a replayed partition found, for the log line; ``then`` runs once the partition serves."""

    count: int
    records: int
    then: Callable[[], None] | None = None


async def replay(log: PartitionLog, where: str) -> AsyncIterator[tuple[BatchHeader, Record]]:
    """Every record from the log start to the high watermark (as it was when the replay began), in offset order,
    with the header of its batch (control batches included: transaction markers end pending transactional
    writes). A read that returns nothing before the end stops the replay with a warning naming ``where``."""
    position = log.log_start_offset
    end = log.high_watermark
    while position < end:
        result = await log.read(position, _LOAD_READ_BYTES)
        if not result.records:
            logger.warning("%s: read at offset %d returned nothing before the end %d", where, position, end)
            break
        for header, batch in iter_batches(result.records):
            if header.next_offset <= position:
                continue
            for record in decode_records(batch):
                if record.offset >= position:
                    yield header, record
            position = header.next_offset


class InternalTopicPartitions(Generic[ReplayedT]):
    """The partitions of ``topic`` this broker leads, loaded with ``read`` + ``install`` and dropped with
    ``unload`` (which returns how many items it dropped), as the metadata image moves them."""

    def __init__(
        self,
        broker: BrokerContext,
        partitions: PartitionManager,
        topic: InternalTopic,
        *,
        read: Callable[[PartitionLog, str], Awaitable[ReplayedT]],
        install: Callable[[OwnedPartition, ReplayedT], Loaded],
        unload: Callable[[int], int],
    ) -> None:
        self._context = broker
        self._partitions = partitions
        self._topic = topic
        self._read = read
        self._install = install
        self._unload_items = unload
        self._owned: dict[int, OwnedPartition] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._create_lock = asyncio.Lock()
        self._running = False

    @property
    def owned(self) -> Mapping[int, OwnedPartition]:
        return self._owned

    # ------------------------------------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self._running = True
        self._context.controller.subscribe(self._on_image)
        self._reconcile(self._context.controller.image)

    async def stop(self, *others: asyncio.Task[None] | None, cancel_unfinished: bool) -> None:
        """Stops following the metadata, cancels the loads and ``others`` (the coordinator's timers), and lets the
        spawned tasks (writes whose requests wait for an answer) finish for a bounded time; ``cancel_unfinished``
        cancels those still running then. The partitions stay owned until :meth:`unload_all`, so that the caller
        can count what it unloads."""
        self._running = False
        for task in others:
            if task is not None:
                task.cancel()
        for owned in self._owned.values():
            if owned.task is not None:
                owned.task.cancel()
        pending = [t for t in self._tasks if not t.done()]
        if pending:
            await asyncio.wait(pending, timeout=_STOP_DRAIN_SECONDS)
        unfinished = list(self._tasks) if cancel_unfinished else []
        for task in (*others, *(o.task for o in self._owned.values()), *unfinished):
            if task is not None:
                if not task.done():
                    task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    def unload_all(self) -> None:
        for partition in list(self._owned):
            self._unload(partition)

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> None:
        """Runs ``coro`` as a task that :meth:`stop` waits for."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ------------------------------------------------------------------------------------------------ ownership

    @property
    def num_partitions(self) -> int:
        """Partitions of the topic: the existing topic's count wins over the config (as in Kafka)."""
        topic = self._context.controller.image.topics_by_name.get(self._topic.name)
        if topic is not None and topic.partitions:
            return len(topic.partitions)
        return int(self._context.config.value(self._topic.partitions_key))

    def partition_for(self, key: str) -> int:
        return partition_for(key, self.num_partitions)

    def coordinator_error(self, key: str) -> ErrorCode:
        """NONE when this broker serves ``key`` right now; else the error the client should act on."""
        if not self._running:
            return ErrorCode.coordinator_not_available
        owned = self._owned.get(self.partition_for(key))
        if owned is None:
            return ErrorCode.not_coordinator
        if owned.state is Load.LOADING:
            return ErrorCode.coordinator_load_in_progress
        return ErrorCode.none

    def listing_error(self) -> ErrorCode:
        """For listing everything served here: COORDINATOR_NOT_AVAILABLE once stopped, COORDINATOR_LOAD_IN_PROGRESS
        while any partition loads (the list is incomplete), else NONE."""
        if not self._running:
            return ErrorCode.coordinator_not_available
        if any(o.state is Load.LOADING for o in self._owned.values()):
            return ErrorCode.coordinator_load_in_progress
        return ErrorCode.none

    def serves(self, owned: OwnedPartition) -> bool:
        """Whether ``owned`` is still this broker's loaded partition at its epoch (not unloaded or replaced)."""
        return self._running and self._owned.get(owned.partition) is owned and owned.state is Load.ACTIVE

    def _on_image(self, old: MetadataImage, new: MetadataImage) -> None:
        if self._running:
            self._reconcile(new)

    def _reconcile(self, image: MetadataImage) -> None:
        topic = image.topics_by_name.get(self._topic.name)
        led: dict[int, int] = {}
        if topic is not None:
            led = {p.partition: p.leader_epoch for p in topic.partitions.values() if p.leader == self._context.node_id}
        for partition, owned in list(self._owned.items()):
            if led.get(partition) != owned.leader_epoch:
                self._unload(partition)
        for partition, epoch in led.items():
            if partition not in self._owned:
                owned = OwnedPartition(self._topic.name, partition, epoch)
                self._owned[partition] = owned
                owned.task = asyncio.get_running_loop().create_task(self._load(owned), name=f"load {owned.where}")

    def _unload(self, partition: int) -> None:
        owned = self._owned.pop(partition, None)
        if owned is None:
            return
        if owned.task is not None and not owned.task.done():
            owned.task.cancel()
        dropped = self._unload_items(partition)
        logger.log(
            logging.INFO if dropped or self._running else logging.DEBUG,
            "no longer %s for %s (epoch %d): unloaded %d %s",
            self._topic.role,
            owned.where,
            owned.leader_epoch,
            dropped,
            self._topic.items,
        )

    async def _load(self, owned: OwnedPartition) -> None:
        where = owned.where
        started = time.monotonic()
        try:
            log = None
            while log is None:
                log = await self._partitions.wait_open(self._topic.name, owned.partition, _WAIT_OPEN_SECONDS)
                if self._owned.get(owned.partition) is not owned:
                    return
                if log is not None and log.leader_epoch != owned.leader_epoch:
                    # Still the previous incarnation, about to be closed and reopened at our epoch.
                    log = None
                    await asyncio.sleep(0.05)
                elif log is None:
                    logger.info("waiting for %s to open before loading its %s", where, self._topic.items)
            replayed = await self._read(log, where)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if isinstance(exc, StorageError):  # S3 away or the partition moving: expected, and retried
                logger.warning("loading %s from %s failed; retrying: %s", self._topic.items, where, exc)
            else:
                logger.exception("loading %s from %s failed; retrying", self._topic.items, where)
            await asyncio.sleep(_LOAD_RETRY_SECONDS)
            if self._owned.get(owned.partition) is owned:
                owned.task = asyncio.get_running_loop().create_task(self._load(owned), name=f"load {where}")
            return
        if self._owned.get(owned.partition) is not owned:
            return
        loaded = self._install(owned, replayed)
        owned.state = Load.ACTIVE
        owned.loaded.set()
        logger.log(
            logging.INFO if loaded.count or loaded.records else logging.DEBUG,
            "%s: loaded %d %s from %s (%d records, epoch %d) in %.0f ms",
            self._topic.role,
            loaded.count,
            self._topic.items,
            where,
            loaded.records,
            owned.leader_epoch,
            (time.monotonic() - started) * 1000,
        )
        if loaded.then is not None:
            loaded.then()

    # ------------------------------------------------------------------------------------------------ find

    async def ensure_topic(self) -> tuple[ErrorCode, str | None]:
        """Creates the topic unless it exists: (error, message for the client)."""
        controller = self._context.controller
        name = self._topic.name
        if name in controller.image.topics_by_name:
            return ErrorCode.none, None
        async with self._create_lock:
            if name in controller.image.topics_by_name:
                return ErrorCode.none, None
            [result] = await controller.create_topics([self._topic.new_topic(self._context.config)],
                                                      validate_only=False)
            if result.error not in (ErrorCode.none, ErrorCode.topic_already_exists):
                logger.error("creating %s failed: %s %s", name, result.error.name, result.message or "")
                return ErrorCode.coordinator_not_available, f"cannot create {name}: {result.message}"
            logger.info("created %s with %d partitions", name, result.num_partitions)
            return ErrorCode.none, None

    def coordinator_node(self, key: str) -> int:
        """The broker leading ``key``'s partition per the metadata (-1: none)."""
        part = self._context.controller.image.partition(self._topic.name, self.partition_for(key))
        return part.leader if part is not None else -1

    async def find_coordinator(self, key: str) -> tuple[ErrorCode, int, str | None]:
        """(error, node id of the coordinator, message); creates the topic on first use. When the coordinator is
        this broker, waits (bounded) for the key's partition to load, so the client's first request is served."""
        error, message = await self.ensure_topic()
        if error is not ErrorCode.none:
            return error, -1, message
        partition = self.partition_for(key)
        node_id = self.coordinator_node(key)
        if node_id < 0:
            return ErrorCode.coordinator_not_available, -1, f"{self._topic.name}-{partition} has no leader"
        if node_id == self._context.node_id:
            await self._wait_loaded(partition, _FIND_WAIT_SECONDS)
        return ErrorCode.none, node_id, None

    async def _wait_loaded(self, partition: int, timeout: float) -> None:
        """Waits (bounded) until this broker has taken over and loaded ``partition``; the image listener that
        starts the load may run after the controller call that created or moved the partition returned."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline:
            owned = self._owned.get(partition)
            if owned is not None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(owned.loaded.wait(), max(0.0, deadline - loop.time()))
                return
            await asyncio.sleep(0.02)

    # ------------------------------------------------------------------------------------------------ writes

    def store_error(
        self, exc: BaseException, key: str, *, too_large: ErrorCode = ErrorCode.unknown_server_error
    ) -> ErrorCode:
        """Kafka's translation of a failed append for ``key`` into what coordinator clients understand: a retriable
        COORDINATOR_NOT_AVAILABLE or NOT_COORDINATOR (look the coordinator up again), ``too_large`` for a batch
        over the size limits (INVALID_COMMIT_OFFSET_SIZE for offset commits), else the append's own code."""
        code = error_code_logged(
            exc, logger, "appending to %s-%d for %r failed", self._topic.name, self.partition_for(key), key
        )
        if code in (
            ErrorCode.unknown_topic_or_partition,
            ErrorCode.not_enough_replicas,
            ErrorCode.not_enough_replicas_after_append,
            ErrorCode.request_timed_out,
        ):
            return ErrorCode.coordinator_not_available
        if code in (ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error):
            return ErrorCode.not_coordinator
        if code in (ErrorCode.message_too_large, ErrorCode.record_list_too_large, ErrorCode.invalid_fetch_size):
            return too_large
        return code
