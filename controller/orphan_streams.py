"""The streams of deleted topics that their broker could not delete, deleted by the active controller.

A broker deletes a partition's streams and its KV entry when the partition's topic is deleted
(``PartitionLog.delete``), but only if it has the partition open then and gets through: one killed half way, or one
that lost the controller meanwhile, leaves the streams behind (closed at its next start), and no broker opens a
deleted topic's partition again. Nothing compacts away or sweeps the data of a stream that exists, so that data
would stay in object storage for ever. Kafka's brokers delete such stray logs when they find them; here the
controller, which holds both the topics and the streams, finds them: every ``deleted.topic.streams.check.interval.ms``
it lists the closed streams whose tags name a topic that does not exist (``metadata.stream_tags``) and the partition
KV entries of topic ids that do not exist, and deletes those it found in its previous look too. The second look is
the broker's grace: a broker deleting the partitions of a topic deleted a moment ago is not raced. A deleted
stream's objects then go as any deleted stream's do (compaction and the lifecycle sweep).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from metadata.errors import NotControllerError
from metadata.image import MetadataImage
from metadata.kv_keys import partition_of_kv_key
from metadata.stream_tags import Tags, stream_topic
from settings.server import ServerConfig
from storage.metadata.state_machine import StreamMetadataStateMachine
from storage.namespace import namespace_for

logger = logging.getLogger(__name__)

INTERVAL_KEY = "deleted.topic.streams.check.interval.ms"


@dataclass(frozen=True)
class Orphans:
    """Closed streams and partition KV entries of topics that do not exist."""

    streams: frozenset[int] = frozenset()
    kv_keys: frozenset[str] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.streams or self.kv_keys)

    def __and__(self, other: Orphans) -> Orphans:
        return Orphans(self.streams & other.streams, self.kv_keys & other.kv_keys)


def find_orphans(image: MetadataImage, closed_streams: Iterable[tuple[int, Tags]], kv_keys: Iterable[str]) -> Orphans:
    """What of ``closed_streams`` (id, tags) and ``kv_keys`` belongs to a topic ``image`` does not hold: by topic id
    where the tags carry it, else by name (streams created before they did). Streams of no partition, and KV
    entries other than a partition's, are never orphans."""
    streams = set()
    for stream_id, tags in closed_streams:
        topic = stream_topic(tags)
        if topic is None:
            continue
        if topic.topic_id is not None:
            gone = topic.topic_id not in image.topics_by_id
        else:
            gone = topic.name not in image.topics_by_name
        if gone:
            streams.add(stream_id)
    namespace = namespace_for(image.cluster_id)
    keys = set()
    for key in kv_keys:
        partition = partition_of_kv_key(namespace, key)
        if partition is not None and partition[0] not in image.topics_by_id:
            keys.add(key)
    return Orphans(frozenset(streams), frozenset(keys))


class OrphanSweep:
    """Looks every ``deleted.topic.streams.check.interval.ms`` and deletes what two looks in a row found. It runs
    on every controller; only the active one's deletes go through (the others' are refused: NotControllerError)."""

    def __init__(
        self,
        config: ServerConfig,
        streams: Callable[[], StreamMetadataStateMachine],
        image: Callable[[], MetadataImage],
    ) -> None:
        """``streams`` and ``image``: the controller's, as of each look (a snapshot load replaces them)."""
        self._node_id = config.node_id
        self._interval_s = int(config.value(INTERVAL_KEY)) / 1000
        self._streams = streams
        self._image = image
        self._previous = Orphans()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="deleted-topic-streams")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def look(self) -> Orphans:
        """One look; returns what it deleted (found in the previous look too)."""
        streams = self._streams()
        image = self._image()
        found = find_orphans(image, streams.closed_streams(), streams.kv_keys(namespace_for(image.cluster_id) + "/"))
        doomed, self._previous = found & self._previous, found
        if not doomed:
            return Orphans()
        deleted, keys = await streams.delete_orphans(sorted(doomed.streams), sorted(doomed.kv_keys))
        if deleted or keys:
            logger.info("controller %d: deleted %d streams and %d partition entries of deleted topics their brokers "
                        "left behind (streams %s)", self._node_id, len(deleted), len(keys), _ids(deleted))
        return Orphans(frozenset(deleted), frozenset(keys))

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            try:
                await self.look()
            except NotControllerError:
                self._previous = Orphans()
            except Exception as exc:  # a log write failed: the next look tries again
                logger.warning("controller %d: streams of deleted topics not deleted: %s", self._node_id, exc)


def _ids(stream_ids: list[int], shown: int = 20) -> str:
    """The first ``shown`` ids, and how many more."""
    text = ", ".join(map(str, stream_ids[:shown]))
    return text + (f" and {len(stream_ids) - shown} more" if len(stream_ids) > shown else "")
