"""Which partitions this broker has open, kept in step with the controller's metadata image.

The manager subscribes to image changes and reconciles in one background task (changes arriving while a round
runs are coalesced into the next round): partitions this node now leads are opened with the image's leader epoch
(each in a task of its own after the first round, so that a partition moved here is not kept waiting by another's
open), partitions it lost (or whose leader epoch moved on) are closed cleanly, and partitions of deleted topics have
their streams and KV entry destroyed. Internal topics (``__consumer_offsets``) are ordinary partitions here.
A second task enforces retention on the open partitions every ``log.retention.check.interval.ms``, and the log
cleaner (broker/partition/cleaner.py) compacts those whose ``cleanup.policy`` contains ``compact``.

Recovery points (DESIGN §4) advance after every upload that covers a partition's log (the storage engine tells the
manager which streams an upload committed, and the manager tells their partitions) and, for partitions written to
between uploads, on a timer bounded by ``log.flush.offset.checkpoint.interval.ms``; the bytes bound is checked by
each append.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from broker.broker_context import BrokerContext
from broker.partition.cleaner import CleanerSettings, LogCleaner
from broker.partition.log_config import LogConfig
from broker.partition.partition_log import PartitionLog
from broker.partition.retention import HeadCache, enforce_retention
from metadata.controller_api import ControllerClient
from metadata.image import MetadataImage, PartitionImage
from metadata.move_leader import next_leader
from settings.describe import effective_topic_configs
from storage.errors import StorageError
from storage.namespace import namespace_for
from storage.stream_api import ObservedStreamClient, StreamClient
from wire.errors import KafkaError

logger = logging.getLogger(__name__)

_OPEN_CONCURRENCY = 8
_RETRY_DELAY = 1.0
#: ``start`` waits this long for the first round of opens, so a restarted broker serves its partitions from
#: the moment it accepts connections (crash recovery included) instead of answering NOT_LEADER meanwhile.
_INITIAL_OPEN_TIMEOUT = 60.0
_STOP_ROUND_TIMEOUT = 30.0


class PartitionManager:
    def __init__(
        self,
        broker: BrokerContext,
        storage: ObservedStreamClient,
        *,
        on_removed: Callable[[str, int], None] = lambda topic, partition: None,
    ) -> None:
        """``storage``: the broker's storage engine, whose streams the partitions are made of. ``on_removed`` is
        told of each partition closed or deleted while the broker runs (its traffic counters,
        ``broker.metrics.TopicTraffic.forget``, are dropped with it)."""
        self._context = broker
        self._storage = storage
        self._on_removed = on_removed
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        self._by_id: dict[tuple[uuid.UUID, int], PartitionLog] = {}
        self._changed = asyncio.Event()
        self._new_image = asyncio.Event()  # set, and replaced, at every image: what wait_for_election waits on
        self._opened = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None
        self._retention_task: asyncio.Task[None] | None = None
        self._checkpoint_task: asyncio.Task[None] | None = None
        #: The open partitions by the id of their log stream, what an upload names.
        self._by_stream: dict[int, PartitionLog] = {}
        self._by_meta_stream: dict[int, PartitionLog] = {}
        #: Partitions moving here whose source still closes them -> the read of their meta stream id, started when
        #: the move was seen so that the open after the election skips that round trip.
        self._incoming: dict[tuple[uuid.UUID, int], asyncio.Task[int | None]] = {}
        self._retention_stop = asyncio.Event()
        self._retention_heads: HeadCache = {}
        self._stopping = False
        self._first_round = asyncio.Event()
        #: Partitions being opened, each in a task of its own (:meth:`_start_open`), at most ``_OPEN_CONCURRENCY``
        #: at a time.
        self._opening: dict[tuple[str, int], asyncio.Task[None]] = {}
        self._open_slots = asyncio.Semaphore(_OPEN_CONCURRENCY)
        # LogConfig per topic id, for the image they were resolved against (every partition of a topic shares one).
        self._configs: tuple[MetadataImage | None, dict[uuid.UUID, LogConfig]] = (None, {})
        config = broker.config
        self._cleaner = LogCleaner(
            CleanerSettings(
                enabled=bool(config.value("log.cleaner.enable")),
                backoff_ms=int(config.value("log.cleaner.backoff.ms")),
                dedupe_buffer_bytes=int(config.value("log.cleaner.dedupe.buffer.size")),
            ),
            self.open_partitions,
        )

    @property
    def streams(self) -> StreamClient:
        client: StreamClient = self._storage
        return client

    @property
    def node_id(self) -> int:
        """This broker's id: with :attr:`controller`, what finding a led partition's log needs
        (``broker.partition.access.leader_log``)."""
        return self._context.node_id

    @property
    def controller(self) -> ControllerClient:
        return self._context.controller

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        self._context.controller.subscribe(self._on_image)
        self._changed.set()
        self._task = asyncio.create_task(self._run(), name="partition-manager")
        self._retention_task = asyncio.create_task(self._retention_loop(), name="partition-retention")
        self._checkpoint_task = asyncio.create_task(self._checkpoint_loop(), name="partition-checkpoints")
        self._storage.add_upload_listener(self._uploaded)
        self._cleaner.start()
        try:
            await asyncio.wait_for(self._first_round.wait(), _INITIAL_OPEN_TIMEOUT)
        except TimeoutError:
            logger.warning("partitions still opening after %.0fs; serving meanwhile", _INITIAL_OPEN_TIMEOUT)

    async def stop(self) -> None:
        """Closes every open partition cleanly (force upload, clean-shutdown flag)."""
        self._stopping = True
        self._changed.set()
        self._retention_stop.set()
        await self._cleaner.stop()
        if self._checkpoint_task is not None:
            self._checkpoint_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._checkpoint_task
        if self._retention_task is not None:
            # A retention round stops between partitions; let a trim in progress finish rather than cut it short.
            try:
                await asyncio.wait_for(asyncio.shield(self._retention_task), _STOP_ROUND_TIMEOUT)
            except TimeoutError:
                logger.warning("retention round still running after %.0fs; cancelling", _STOP_ROUND_TIMEOUT)
                self._retention_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._retention_task
        if self._task is not None:
            # Let a round in progress finish (partitions it opens are closed right away) rather than cancel it
            # half-way through opening streams; cancel only if it hangs.
            try:
                await asyncio.wait_for(asyncio.shield(self._task), _STOP_ROUND_TIMEOUT)
            except TimeoutError:
                logger.warning("partition reconciliation still running after %.0fs; cancelling", _STOP_ROUND_TIMEOUT)
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._task
        for read in self._incoming.values():
            read.cancel()
        # Opens under way finish (a partition opened now is closed at once, :meth:`_open`) rather than stop half way.
        await asyncio.gather(*self._opening.values(), return_exceptions=True)
        logs = list(self._logs.values())
        self._logs.clear()
        self._by_id.clear()
        self._by_stream.clear()
        self._by_meta_stream.clear()
        await self._bounded(*(log.close() for log in logs))
        logger.info("closed %d partitions", len(logs))

    # ------------------------------------------------------------------ lookups
    def get(self, topic: str, partition: int) -> PartitionLog | None:
        log = self._logs.get((topic, partition))
        return log if log is not None and not log.closed else None

    def get_by_id(self, topic_id: uuid.UUID, partition: int) -> PartitionLog | None:
        log = self._by_id.get((topic_id, partition))
        return log if log is not None and not log.closed else None

    def open_partitions(self) -> list[PartitionLog]:
        return [log for log in self._logs.values() if not log.closed]

    async def wait_open(self, topic: str, partition: int, timeout: float) -> PartitionLog | None:
        """The partition once this broker has it open, or None after ``timeout`` seconds."""
        log = self.get(topic, partition)
        if log is not None:
            return log
        # The wait runs in this task (asyncio.timeout, not wait_for): Python 3.11's wait_for runs it in a task of
        # its own, and a caller cancelled twice (a stopping coordinator's load) left that task re-acquiring the
        # condition's lock after the caller had gone, so the lock stayed held and every later open hung on it.
        try:
            async with asyncio.timeout(timeout), self._opened:
                await self._opened.wait_for(lambda: self.get(topic, partition) is not None)
        except TimeoutError:
            return None
        return self.get(topic, partition)

    # ------------------------------------------------------------------ reconciliation
    def _on_image(self, old: MetadataImage, new: MetadataImage) -> None:
        self._changed.set()
        arrived, self._new_image = self._new_image, asyncio.Event()
        arrived.set()

    async def wait_for_election(self, topic: str, partition: int, timeout: float) -> None:
        """Returns once a refusal of a partition being moved can name its next leader: this broker's image names
        the leader, or the target its election will pick (``metadata.move_leader``), or the partition is not moving;
        or after ``timeout`` seconds. An answer naming the leader spares the client a metadata round trip (KIP-951);
        only a move whose targets may not lead leaves the election's choice unknown until it is made."""

        def known(image: MetadataImage, found: PartitionImage | None) -> bool:
            return found is None or found.leader >= 0 or not found.reassigning or next_leader(image, found) is not None

        await self._wait_image(topic, partition, known, timeout)

    async def wait_for_move_here(self, topic: str, partition: int, timeout: float) -> bool:
        """Whether this broker leads the partition, after waiting (up to ``timeout`` seconds) for the election of a
        move whose target it is. The source names the target to its clients as soon as it lets go (KIP-951), so
        their retries arrive here while the hand-over still runs: they wait for it instead of being refused."""

        def elected(image: MetadataImage, found: PartitionImage | None) -> bool:
            upcoming = next_leader(image, found) if found is not None else None
            return upcoming is None or upcoming[0] != self.node_id

        await self._wait_image(topic, partition, elected, timeout)
        found = self._context.controller.image.partition(topic, partition)
        return found is not None and found.leader == self.node_id

    async def _wait_image(
        self, topic: str, partition: int, done: Callable[[MetadataImage, PartitionImage | None], bool],
        timeout: float,
    ) -> None:
        """Waits until ``done`` holds for this broker's image and its entry of the partition, or ``timeout``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            image = self._context.controller.image
            remaining = deadline - loop.time()
            if done(image, image.partition(topic, partition)) or remaining <= 0:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._new_image.wait(), remaining)

    async def _run(self) -> None:
        while True:
            await self._changed.wait()
            self._changed.clear()
            if self._stopping:
                return
            try:
                retry = await self._reconcile(self._context.controller.image)
            except Exception:
                logger.exception("partition reconciliation failed; retrying")
                retry = True
            self._first_round.set()
            if retry and not self._stopping:
                asyncio.get_running_loop().call_later(_RETRY_DELAY, self._changed.set)

    async def _reconcile(self, image: MetadataImage) -> bool:
        """One round; returns True when something failed and should be retried."""
        node_id = self._context.node_id
        wanted: dict[tuple[str, int], PartitionImage] = {}
        for topic, part in image.partitions_led_by(node_id):
            wanted[(topic, part.partition)] = part
        self._read_ahead(image, {(part.topic_id, part.partition) for part in wanted.values()})
        to_close: list[PartitionLog] = []
        to_delete: list[PartitionLog] = []
        for key, log in list(self._logs.items()):
            topic_image = image.topics_by_id.get(log.topic_id)
            led = wanted.get(key)
            if topic_image is None:
                to_delete.append(log)
            elif led is None or led.topic_id != log.topic_id or led.leader_epoch != log.leader_epoch:
                to_close.append(log)
            else:
                log.config = self._log_config(image, log.topic_id)
                continue
            del self._logs[key]
            self._by_id.pop((log.topic_id, log.partition), None)
            self._by_stream.pop(log.log_stream_id, None)
            self._by_meta_stream.pop(log.meta_stream_id, None)
            self._on_removed(log.topic, log.partition)
        failed = False
        for log in to_close:
            logger.info("%s is no longer led by node %d at epoch %d; closing", log.where, node_id, log.leader_epoch)
        results = await self._bounded(self._close_all(to_close), *(self._delete(log) for log in to_delete))
        failed |= any(isinstance(r, BaseException) for r in results)
        failed |= isinstance(results[0], list) and any(isinstance(r, BaseException) for r in results[0])
        to_open = [(key, part) for key, part in wanted.items() if key not in self._logs and key not in self._opening]
        opens = [self._start_open(image, key, part) for key, part in to_open]
        if not self._first_round.is_set():  # start() waits for the first round's opens; later rounds do not
            results = await asyncio.gather(*opens, return_exceptions=True)
            failed |= any(isinstance(r, BaseException) for r in results)
        return failed

    def _start_open(self, image: MetadataImage, key: tuple[str, int], part: PartitionImage) -> asyncio.Task[None]:
        """Opens the partition in a task of its own, so that the next image's opens and closes do not wait for it:
        a moved partition's election arriving while another partition opens here is opened at once."""
        task = asyncio.create_task(self._open_one(image, key, part), name=f"partition-open-{key[0]}-{key[1]}")
        self._opening[key] = task
        return task

    async def _open_one(self, image: MetadataImage, key: tuple[str, int], part: PartitionImage) -> None:
        try:
            async with self._open_slots:
                await self._open(image, key[0], part)
        except Exception:  # logged by _open
            if not self._first_round.is_set():
                raise  # the first round counts it as failed and retries
            if not self._stopping:
                asyncio.get_running_loop().call_later(_RETRY_DELAY, self._changed.set)
            return
        finally:
            self._opening.pop(key, None)
        self._changed.set()  # the image may have moved on while it opened: the next round checks

    # ------------------------------------------------------------------ recovery points
    def _uploaded(self, ends: Mapping[int, int]) -> None:
        """An upload committed these streams up to these offsets: the partitions whose log it covered checkpoint,
        and those whose meta stream it covered may trim it."""
        for stream_id, end in ends.items():
            log = self._by_stream.get(stream_id)
            if log is not None and not log.closed:
                log.uploaded(end)
            meta_of = self._by_meta_stream.get(stream_id)
            if meta_of is not None and not meta_of.closed:
                meta_of.meta_uploaded()

    async def _checkpoint_loop(self) -> None:
        """Checkpoints partitions written to since their last checkpoint once ``log.flush.offset.checkpoint.
        interval.ms`` passed (each partition checks its own bound; this only gives it the chance to without an
        append). Ticks at a quarter of the interval, at most every 5 s, so the bound holds within 25%."""
        interval = int(self._context.config.value("log.flush.offset.checkpoint.interval.ms")) / 1000
        tick = min(max(interval / 4, 0.05), 5.0)
        while True:
            await asyncio.sleep(tick)
            for log in self.open_partitions():
                log.maybe_checkpoint()

    # ------------------------------------------------------------------ retention
    async def _retention_loop(self) -> None:
        """Every ``log.retention.check.interval.ms``, applies retention to each open partition in turn (one at a
        time: a round is background work and must not crowd out produce and fetch). Partitions read their
        ``LogConfig`` as reconciliation last resolved it, so an altered retention.ms takes effect at the next check
        after the new image arrives, without a restart."""
        interval = int(self._context.config.value("log.retention.check.interval.ms")) / 1000
        while not self._retention_stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._retention_stop.wait(), interval)
            logs = self.open_partitions()
            live = {(log.topic_id, log.partition) for log in logs}
            for stale in [key for key in self._retention_heads if key not in live]:
                del self._retention_heads[stale]
            for log in logs:
                if self._retention_stop.is_set():
                    return
                try:
                    await enforce_retention(log, heads=self._retention_heads)
                except KafkaError as exc:  # typically closed under us (leadership moved): nothing to retain
                    logger.debug("retention check of %s skipped: %s", log.where, exc)
                except StorageError as exc:  # S3 away: the next round tries again
                    logger.warning("retention check of %s failed: %s", log.where, exc)
                except Exception:
                    logger.exception("retention check of %s (topic id %s) failed", log.where, log.topic_id)

    def _log_config(self, image: MetadataImage, topic_id: uuid.UUID) -> LogConfig:
        """Resolved once per topic and image: resolving every topic config costs about a third of a millisecond,
        which a round over thousands of partitions would otherwise pay per partition on the event loop."""
        resolved_for, by_topic = self._configs
        if resolved_for is not image:
            by_topic = {}
            self._configs = (image, by_topic)
        config = by_topic.get(topic_id)
        if config is None:
            topic_image = image.topics_by_id.get(topic_id)
            topic_configs: Mapping[str, str] = topic_image.configs if topic_image is not None else {}
            server = self._context.config
            node_dynamic = image.node_configs.get(self._context.node_id, {})
            effective = effective_topic_configs(server, image.broker_configs, topic_configs, node_dynamic)
            config = by_topic[topic_id] = LogConfig.from_effective(
                effective,
                producer_id_expiration_ms=int(server.value("producer.id.expiration.ms")),
                checkpoint_interval_ms=int(server.value("log.flush.offset.checkpoint.interval.ms")),
                checkpoint_interval_bytes=int(server.value("log.flush.offset.checkpoint.interval.bytes")),
            )
        return config

    def _read_ahead(self, image: MetadataImage, led: set[tuple[uuid.UUID, int]]) -> None:
        """Starts reading what opening a partition moving here reads first while its source still closes it (a
        moved partition's producer waits from the source's close to the target's open); forgets the reads of moves
        that ended elsewhere (``led``: the partitions this broker leads in ``image``, whose reads their open
        takes)."""
        node_id = self._context.node_id
        incoming = {
            (part.topic_id, part.partition)
            for topic in image.topics_by_name.values()
            for part in topic.partitions.values()
            if part.reassigning and part.leader < 0 and part.replicas == (node_id,)
        }
        for key in [k for k in self._incoming if k not in incoming and k not in led]:
            self._incoming.pop(key).cancel()
        for topic_id, partition in incoming - self._incoming.keys():
            read = PartitionLog.read_ahead(self._context.controller.stream_metadata,
                                           namespace_for(self._context.cluster_id), topic_id, partition)
            task = self._incoming[(topic_id, partition)] = asyncio.create_task(read, name="partition-read-ahead")
            task.add_done_callback(_retrieve)

    async def _read_meta_id(self, part: PartitionImage) -> int | None:
        """The meta stream id read ahead for ``part`` (None: not read ahead, or the read failed)."""
        task = self._incoming.pop((part.topic_id, part.partition), None)
        if task is None or task.cancelled():
            return None
        try:
            return await task
        except Exception:  # the controller away, say: the open reads the entry itself and reports what fails
            return None

    async def _open(self, image: MetadataImage, topic: str, part: PartitionImage) -> None:
        # With "opened ..." at its end, this line times an open (and, after a move, the wait for the election).
        logger.info("opening %s-%d at leader epoch %d", topic, part.partition, part.leader_epoch)
        try:
            log = await PartitionLog.open(
                streams=self.streams,
                kv=self._context.controller.stream_metadata,
                namespace=namespace_for(self._context.cluster_id),
                topic=topic,
                partition=part.partition,
                topic_id=part.topic_id,
                leader_epoch=part.leader_epoch,
                config=self._log_config(image, part.topic_id),
                meta_id=await self._read_meta_id(part),
            )
        except StorageError as exc:
            # Expected while a previous owner still holds a stream or S3 is away: the next round retries.
            logger.warning("opening %s-%d at leader epoch %d failed (retried): %s", topic, part.partition,
                           part.leader_epoch, exc)
            raise
        except Exception:
            logger.exception("opening %s-%d at leader epoch %d failed", topic, part.partition, part.leader_epoch)
            raise
        if self._stopping:
            await log.close()
            return
        self._logs[(topic, part.partition)] = log
        self._by_id[(part.topic_id, part.partition)] = log
        self._by_stream[log.log_stream_id] = log
        self._by_meta_stream[log.meta_stream_id] = log
        async with self._opened:
            self._opened.notify_all()

    @staticmethod
    async def _close_all(logs: list[PartitionLog]) -> list[BaseException | None]:
        """Closes a round's partitions ``_OPEN_CONCURRENCY`` at a time, each group together: one upload carries
        the group's last records and meta entries (:meth:`PartitionLog.close_together`), where partitions closing
        on their own at once would each wait for an upload of their own."""
        results: list[BaseException | None] = []
        for first in range(0, len(logs), _OPEN_CONCURRENCY):
            results += await PartitionLog.close_together(logs[first:first + _OPEN_CONCURRENCY])
        return results

    async def _delete(self, log: PartitionLog) -> None:
        logger.info("topic of %s (id %s) was deleted; destroying its streams", log.where, log.topic_id)
        await log.delete()

    async def _bounded(self, *coros: Any) -> list[Any]:
        semaphore = asyncio.Semaphore(_OPEN_CONCURRENCY)

        async def run(coro: Any) -> Any:
            async with semaphore:
                return await coro

        return list(await asyncio.gather(*(run(c) for c in coros), return_exceptions=True))


def _retrieve(task: asyncio.Task[int | None]) -> None:
    """A read ahead nobody awaits (the move ended elsewhere) must not log "exception never retrieved"; the open
    reads the entry itself when the read ahead failed."""
    if not task.cancelled():
        task.exception()
