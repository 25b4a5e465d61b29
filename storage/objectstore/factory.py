"""Opens the object store a bucket URL names (``s3.data.buckets``, ``s3.wal.path``).

``mem://NAME`` stores live in a process-wide registry, so two engine instances in one test process that are
configured with the same URL share one bucket, exactly as two brokers share an S3 bucket.
"""

from __future__ import annotations

import threading

from storage.config import BucketURL, ConfigError, StorageConfig
from storage.objectstore.base import ObjectStore
from storage.objectstore.local import LocalObjectStore
from storage.objectstore.memory import MemoryObjectStore

_memory_stores: dict[str, MemoryObjectStore] = {}
_memory_lock = threading.Lock()


def open_object_store(url: BucketURL, config: StorageConfig, key: str = "s3.data.buckets") -> ObjectStore:
    """A store for ``url``: ``file://`` (relative paths resolve against the working directory), ``s3://`` or
    ``mem://``. The caller closes it; closing a shared ``mem://`` store leaves its objects in place. ``key``: the
    setting that named ``url``, which a directory that cannot be made or used is reported under."""
    if url.scheme == "file":
        try:
            return LocalObjectStore(url.path)
        except OSError as exc:
            raise ConfigError(f"{key}: cannot use the directory {url.path}: {exc.strerror or exc}") from None
    if url.scheme == "s3":
        # Imported on demand: aiobotocore and aiohttp take most of a second to import, which every
        # command-line call and every file-only process would otherwise pay.
        from storage.objectstore.s3 import S3ObjectStore  # noqa: PLC0415 - see above

        return S3ObjectStore.from_url(url, config)
    if url.scheme == "mem":
        return memory_store(url.bucket)
    raise ConfigError(f"unsupported object storage URL scheme {url.scheme!r} for {url.describe()}")


def memory_store(name: str) -> MemoryObjectStore:
    """The process-wide in-memory bucket called ``name`` (created on first use)."""
    with _memory_lock:
        store = _memory_stores.get(name)
        if store is None:
            store = _memory_stores[name] = MemoryObjectStore(name)
        return store


def drop_memory_store(name: str) -> None:
    """Forgets the in-memory bucket ``name`` so the next ``open_object_store`` starts empty (test isolation)."""
    with _memory_lock:
        _memory_stores.pop(name, None)
