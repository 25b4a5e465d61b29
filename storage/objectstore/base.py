"""The object-store interface every backend implements."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeAlias, runtime_checkable

MULTIPART_THRESHOLD = 32 * 1024 * 1024
"""Objects larger than this are uploaded in parts (DESIGN.md §5)."""


OPERATIONS = (
    "put",
    "get",
    "get_tail",
    "head",
    "list",
    "delete",
    "create_multipart_upload",
    "upload_part",
    "complete_multipart_upload",
    "abort_multipart_upload",
    "copy",
)
"""Every S3 operation an error is counted under (``StoreStats.errors``, a metric label's closed set; the S3 store's
``_operation`` names them). Here rather than in storage/objectstore/s3.py so that the metrics every node exports do
not import aiobotocore and aiohttp (most of a second) on a node whose buckets are not on S3."""


ObjectData: TypeAlias = bytes | Sequence[bytes]
"""What ``put`` stores: one buffer, or *parts* stored back to back as one object (what ``ObjectBuilder`` produces,
so an object is never copied into one buffer unless a backend needs it to be)."""


def data_size(data: ObjectData) -> int:
    """The object's size in bytes."""
    if isinstance(data, bytes | bytearray | memoryview):
        return len(data)
    return sum(len(part) for part in data)


def join_data(data: ObjectData) -> bytes:
    """The object as one ``bytes``: the parts joined, in one copy made without the GIL for 1 MiB and more (call it
    off the event loop for anything large)."""
    if isinstance(data, bytes):
        return data
    if isinstance(data, bytearray | memoryview):
        return bytes(data)
    return b"".join(data)


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    key: str
    size: int


@dataclass(slots=True)
class StoreStats:
    """Request counters, so benchmarks and tests can see what the engine costs in S3 requests."""

    puts: int = 0
    gets: int = 0
    deletes: int = 0
    lists: int = 0
    bytes_put: int = 0
    bytes_got: int = 0
    copies: int = 0  # server-side copies (``copy``): bytes that never passed through this process
    retries: int = 0  # attempts repeated after a retryable failure
    #: Failed attempts by (operation, error code), both from closed sets (see storage/objectstore/s3.py).
    errors: dict[tuple[str, str], int] = field(default_factory=dict)


@runtime_checkable
class ObjectStore(Protocol):
    """An S3-like bucket. Keys are ``/``-separated strings; every method is safe to call concurrently."""

    stats: StoreStats

    @property
    def name(self) -> str:
        """A URL-like description for logs and errors (never includes credentials)."""
        ...

    async def put(self, key: str, data: ObjectData, *, if_none_match: bool = False) -> None:
        """Stores ``data`` (one buffer, or parts stored back to back) atomically; readers see all of it or none
        of it. Above ``MULTIPART_THRESHOLD`` backends that can upload in parts do. With ``if_none_match`` an
        existing key raises ObjectExistsError."""
        ...

    async def get(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        """Bytes ``[start, end)`` of the object (``end=None``: to the end). Missing key: ObjectNotFoundError."""
        ...

    async def get_tail(self, key: str, length: int) -> tuple[bytes, int]:
        """The last ``length`` bytes (fewer if the object is smaller) and the object's total size."""
        ...

    async def size(self, key: str) -> int:
        """The object's size. Missing key: ObjectNotFoundError."""
        ...

    async def delete(self, keys: Sequence[str]) -> None:
        """Deletes the keys; missing keys are not an error."""
        ...

    async def list(self, prefix: str) -> list[ObjectInfo]:
        """Every object whose key starts with ``prefix``, sorted by key."""
        ...

    def copies_from(self, source: ObjectStore) -> bool:
        """Whether ``copy`` can copy ``source``'s objects inside the storage itself (an S3 endpoint copying between
        its buckets, one file system): the bytes never pass through this process."""
        ...

    async def copy(self, source: ObjectStore, source_key: str, key: str) -> None:
        """Stores at ``key`` a copy of ``source``'s object ``source_key``, inside the storage (``copies_from``
        must hold, or ObjectStoreError). Missing source key: ObjectNotFoundError."""
        ...

    async def close(self) -> None: ...


def innermost(store: ObjectStore) -> ObjectStore:
    """The backend under any wrappers (metered, faulty): what ``copies_from`` compares."""
    while isinstance(store, Wrapper):
        store = store.inner
    return store


@runtime_checkable
class Wrapper(Protocol):
    """An object store delegating to another (``MeteredStore``, ``FaultyObjectStore``)."""

    @property
    def inner(self) -> ObjectStore: ...
