"""``MeteredStore``: any object store, with each request's latency and failures recorded by operation.

S3 latency and error rates are what explain a slow upload or fetch; timing them in one wrapper covers every backend
(file, memory, S3) the same way instead of instrumenting each. A missing key or a conditional PUT that found the
key is an answer, not a failure, so it is timed but not counted as an error. The counters it is given are label
children chosen once (``storage.metrics.StorageMetrics``), so a request pays two clock reads and one observation.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TypeVar

from prometheus_client import Counter, Histogram

from storage.errors import ObjectExistsError, ObjectNotFoundError
from storage.objectstore.base import ObjectData, ObjectInfo, ObjectStore, StoreStats

T = TypeVar("T")


class MeteredStore:
    """Delegates to ``inner``; ``seconds`` and ``errors`` hold one child per operation name (put, get, ...)."""

    def __init__(self, inner: ObjectStore, seconds: Mapping[str, Histogram], errors: Mapping[str, Counter]) -> None:
        self._inner = inner
        self.stats: StoreStats = inner.stats  # the same counters: the inner store keeps counting into them
        self._seconds = seconds
        self._errors = errors

    @property
    def name(self) -> str:
        return self._inner.name

    @property
    def inner(self) -> ObjectStore:
        return self._inner

    async def _timed(self, operation: str, call: Callable[[], Awaitable[T]]) -> T:
        started = time.perf_counter()
        try:
            return await call()
        except (ObjectNotFoundError, ObjectExistsError):
            raise  # an answer (no such key, key already there), not a failed request
        except Exception:
            self._errors[operation].inc()
            raise
        finally:
            self._seconds[operation].observe(time.perf_counter() - started)

    async def put(self, key: str, data: ObjectData, *, if_none_match: bool = False) -> None:
        await self._timed("put", lambda: self._inner.put(key, data, if_none_match=if_none_match))

    async def get(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        return await self._timed("get", lambda: self._inner.get(key, start, end))

    async def get_tail(self, key: str, length: int) -> tuple[bytes, int]:
        return await self._timed("get_tail", lambda: self._inner.get_tail(key, length))

    async def size(self, key: str) -> int:
        return await self._timed("size", lambda: self._inner.size(key))

    async def delete(self, keys: Sequence[str]) -> None:
        await self._timed("delete", lambda: self._inner.delete(keys))

    async def list(self, prefix: str) -> list[ObjectInfo]:
        return await self._timed("list", lambda: self._inner.list(prefix))

    def copies_from(self, source: ObjectStore) -> bool:
        return self._inner.copies_from(source)

    async def copy(self, source: ObjectStore, source_key: str, key: str) -> None:
        await self._timed("copy", lambda: self._inner.copy(source, source_key, key))

    async def close(self) -> None:
        await self._inner.close()
