"""The object lifecycle: physically deleting objects nothing can read any more (DESIGN.md §6.4, §10).

Metadata decides *which* objects are dead: ``sweep_objects(now)`` marks prepared-but-never-committed objects
past their deadline and committed objects no longer referenced (replaced by compaction, or holding only trimmed
or deleted streams) as MARK_DESTROYED, and returns those marked at least ``object_delete_retention_ms`` ago (the
grace period that lets a reader that looked an object up just before it was replaced finish its GETs). This
module then deletes their keys from the object store in batches and only afterwards ``remove_objects`` them from
metadata, so a crash between the two steps just repeats the (idempotent) delete on the next sweep.

It knows nothing about nodes or streams, so the controller can run the same sweep for a whole cluster.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from storage.errors import StorageError
from storage.metadata.api import StreamMetadata
from storage.objects.format import object_key
from storage.objectstore.base import ObjectStore

logger = logging.getLogger(__name__)

DEFAULT_DELETE_BATCH = 1000
"""Keys per delete request: S3's DeleteObjects accepts at most 1000."""


@dataclass(slots=True)
class SweepResult:
    deleted: list[int] = field(default_factory=list)  # object ids deleted from the store and from metadata
    failures: list[str] = field(default_factory=list)


class ObjectSweeper:
    """Deletes the objects ``metadata`` says are dead from ``store`` (keys in ``namespace``).

    ``on_deleted`` is told each deleted id (the engine's object reader forgets its cached index).
    """

    def __init__(
        self,
        metadata: StreamMetadata,
        store: ObjectStore,
        namespace: str,
        *,
        clock: Callable[[], int],
        batch_size: int = DEFAULT_DELETE_BATCH,
        on_deleted: Callable[[int], None] | None = None,
    ) -> None:
        if batch_size <= 0:
            raise ValueError(f"delete batch size must be positive, got {batch_size}")
        self._metadata = metadata
        self._store = store
        self._namespace = namespace
        self._clock = clock
        self._batch = batch_size
        self._on_deleted = on_deleted

    async def run_once(self, now_ms: int | None = None) -> SweepResult:
        """One sweep. A failed delete stops it; those objects stay marked and the next sweep tries them again."""
        result = SweepResult()
        now = self._clock() if now_ms is None else now_ms
        ids = await self._metadata.sweep_objects(now)
        for i in range(0, len(ids), self._batch):
            chunk = ids[i : i + self._batch]
            keys = [object_key(object_id, self._namespace) for object_id in chunk]
            try:
                await self._store.delete(keys)
                for object_id in chunk:
                    if self._on_deleted is not None:
                        self._on_deleted(object_id)
                await self._metadata.remove_objects(chunk)
            except asyncio.CancelledError:
                raise
            except StorageError as exc:
                message = (
                    f"deleting objects {_ids_text(chunk)} from {self._store.name} failed: {exc}; "
                    f"retried on the next sweep"
                )
                logger.warning("%s", message)
                result.failures.append(message)
                break
            result.deleted += chunk
            logger.info("deleted %d dead objects from %s: %s", len(chunk), self._store.name, _ids_text(chunk))
        return result


def _ids_text(ids: list[int]) -> str:
    if len(ids) <= 10:
        return ",".join(map(str, ids))
    return ",".join(map(str, ids[:10])) + f",... ({len(ids)} objects)"
