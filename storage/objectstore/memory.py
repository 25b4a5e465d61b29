"""An in-memory bucket for unit tests: same semantics as the others, no I/O."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from storage.errors import ObjectExistsError, ObjectNotFoundError, ObjectStoreError
from storage.objectstore.base import ObjectData, ObjectInfo, ObjectStore, StoreStats, innermost, join_data


class MemoryObjectStore:
    def __init__(self, name: str = "default") -> None:
        self._name = name
        self._objects: dict[str, bytes] = {}
        self.stats = StoreStats()

    @property
    def name(self) -> str:
        return f"mem://{self._name}"

    def keys(self) -> list[str]:
        return sorted(self._objects)

    async def put(self, key: str, data: ObjectData, *, if_none_match: bool = False) -> None:
        # Joining parts is one copy of the whole object: off the event loop, as a real store sends it from there.
        stored = data if isinstance(data, bytes) else await asyncio.to_thread(join_data, data)
        await asyncio.sleep(0)
        if if_none_match and key in self._objects:
            raise ObjectExistsError(key, self.name)
        self.stats.puts += 1
        self.stats.bytes_put += len(stored)
        self._objects[key] = stored

    async def get(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        await asyncio.sleep(0)
        try:
            data = self._objects[key]
        except KeyError:
            raise ObjectNotFoundError(key, self.name) from None
        self.stats.gets += 1
        chunk = data[start:end]
        self.stats.bytes_got += len(chunk)
        return chunk

    async def get_tail(self, key: str, length: int) -> tuple[bytes, int]:
        size = await self.size(key)
        return await self.get(key, max(0, size - length)), size

    async def size(self, key: str) -> int:
        try:
            return len(self._objects[key])
        except KeyError:
            raise ObjectNotFoundError(key, self.name) from None

    async def delete(self, keys: Sequence[str]) -> None:
        await asyncio.sleep(0)
        self.stats.deletes += 1
        for key in keys:
            self._objects.pop(key, None)

    async def list(self, prefix: str) -> list[ObjectInfo]:
        await asyncio.sleep(0)
        self.stats.lists += 1
        return [ObjectInfo(k, len(v)) for k, v in sorted(self._objects.items()) if k.startswith(prefix)]

    def copies_from(self, source: ObjectStore) -> bool:
        return isinstance(innermost(source), MemoryObjectStore)

    async def copy(self, source: ObjectStore, source_key: str, key: str) -> None:
        origin = innermost(source)
        if not isinstance(origin, MemoryObjectStore):
            raise ObjectStoreError(f"{self.name}: cannot copy {source_key} from {source.name} inside the store")
        await asyncio.sleep(0)
        try:
            data = origin._objects[source_key]
        except KeyError:
            raise ObjectNotFoundError(source_key, source.name) from None
        self.stats.copies += 1
        self._objects[key] = data

    async def close(self) -> None:
        return None
