"""One node's part of the S3 WAL bucket, as the S3 WAL (storage/wal/s3.py) and a failover reading it in place
(storage/failover_copy.py) request it: every failure becomes a WALError naming the WAL and the key, whose cause is
the object store's error (which the S3 WAL retries while S3 is away, ``S3WAL._retrying``).

Apart from the WAL's ownership, batching and recovery logic so that each stays one idea.
"""

from __future__ import annotations

import builtins
import logging

from storage.errors import CorruptObjectError, ObjectNotFoundError, ObjectStoreError, WALError
from storage.objectstore.base import ObjectData, ObjectInfo, ObjectStore
from storage.wal import s3_format
from storage.wal.s3_format import Reservation, TrimPoint

logger = logging.getLogger(__name__)


class WALBucket:
    """The keys of node ``node_id``'s WAL in ``store``; ``name`` is the WAL's, for errors and logs."""

    def __init__(self, store: ObjectStore, namespace: str, node_id: int, name: str) -> None:
        self.store = store
        self.name = name
        self.prefix = s3_format.node_prefix(namespace, node_id)
        self.reservation_key = s3_format.reservation_key(namespace, node_id)
        self.trim_key = s3_format.trim_key(namespace, node_id)

    async def read_reservation(self) -> Reservation | None:
        try:
            data = await self.store.get(self.reservation_key)
        except ObjectNotFoundError:
            return None
        except ObjectStoreError as exc:
            raise WALError(f"{self.name}: cannot read the reservation {self.reservation_key}: {exc}") from exc
        try:
            return Reservation.decode(data, self.reservation_key)
        except CorruptObjectError as exc:
            raise WALError(f"{self.name}: {exc}") from exc

    async def read_trim(self) -> int | None:
        try:
            data = await self.store.get(self.trim_key)
        except ObjectNotFoundError:
            return None
        except ObjectStoreError as exc:
            raise WALError(f"{self.name}: cannot read the trim point {self.trim_key}: {exc}") from exc
        try:
            return TrimPoint.decode(data, self.trim_key).offset
        except CorruptObjectError as exc:
            # Replaying from the oldest object only re-delivers uploaded records, which recovery tolerates.
            logger.error("%s: %s; replaying from the oldest object", self.name, exc)
            return None

    async def put(self, key: str, data: ObjectData) -> None:
        try:
            await self.store.put(key, data)
        except ObjectStoreError as exc:
            raise WALError(f"{self.name}: cannot write {key}: {exc}") from exc

    async def get(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        try:
            return await self.store.get(key, start, end)
        except ObjectStoreError as exc:
            raise WALError(f"{self.name}: cannot read WAL object {key}: {exc}") from exc

    async def get_tail(self, key: str, length: int) -> tuple[bytes, int]:
        try:
            return await self.store.get_tail(key, length)
        except ObjectStoreError as exc:
            raise WALError(f"{self.name}: cannot read the end of WAL object {key}: {exc}") from exc

    async def list(self) -> builtins.list[ObjectInfo]:
        try:
            return builtins.list(await self.store.list(self.prefix))
        except ObjectStoreError as exc:
            raise WALError(f"{self.name}: cannot list {self.prefix}: {exc}") from exc

    async def delete(self, keys: builtins.list[str]) -> None:
        try:
            await self.store.delete(keys)
        except ObjectStoreError as exc:
            raise WALError(f"{self.name}: cannot delete {len(keys)} WAL object(s): {exc}") from exc
