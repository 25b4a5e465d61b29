"""Building storage engines for tests: small thresholds so uploads happen with kilobytes, the real local object
store and the real file WAL on disk under the test's tmp_path."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from storage.config import BucketURL, StorageConfig
from storage.engine import StorageEngine
from storage.metadata.state_machine import StreamMetadataStateMachine
from storage.objectstore.base import ObjectStore
from storage.objectstore.local import LocalObjectStore
from storage.wal.base import WriteAheadLog
from storage.wal.file import FileWAL


def small_config(tmp_path: Path, **overrides: Any) -> StorageConfig:
    base = StorageConfig(
        data_buckets=(BucketURL(0, "file", str(tmp_path / "objects")),),
        wal_url=BucketURL(0, "file", str(tmp_path / "wal")),
        cluster_id="test",
        node_id=1,
        wal_segment_size=256 * 1024,
        wal_capacity=16 * 1024 * 1024,
        wal_cache_size=64 * 1024,
        wal_upload_threshold=16 * 1024,
        wal_upload_interval_ms=60_000,
        stream_object_split_size=8 * 1024,
        object_block_size=2 * 1024,
        block_cache_size=64 * 1024,
        readahead_max=16 * 1024,
    )
    return dataclasses.replace(base, **overrides)


def make_engine(
    config: StorageConfig,
    metadata: StreamMetadataStateMachine | None = None,
    *,
    store: ObjectStore | None = None,
    wal: WriteAheadLog | None = None,
) -> StorageEngine:
    if store is None:
        store = LocalObjectStore(config.data_buckets[0].path)
    if wal is None:
        wal = FileWAL(
            config.wal_url.path, segment_size=config.wal_segment_size, capacity=config.wal_capacity, preallocate=False
        )
    return StorageEngine(config, metadata or StreamMetadataStateMachine(), store=store, wal=wal)


def payload(stream_id: int, index: int, size: int = 1000) -> bytes:
    """Recognisable bytes: which stream and which append they came from."""
    head = f"s{stream_id}-a{index}-".encode()
    return (head * (size // len(head) + 1))[:size]
