"""Fixtures of the partition tests: ``storage``, the real storage engine (file WAL + local objects under the test's
``tmp_path``, in-memory stream metadata) one incarnation at a time, for the transaction tests of a ``PartitionLog``;
``second_engine``, another broker's engine beside ``engine`` (tests/broker/conftest.py), for hand-overs."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from storage.config import BucketURL, StorageConfig
from storage.engine import StorageEngine
from storage.metadata.state_machine import StreamMetadataStateMachine


def _storage_config(tmp_path: Path, node_epoch: int) -> StorageConfig:
    return StorageConfig(
        data_buckets=(BucketURL(0, "file", str(tmp_path / "objects")),),
        wal_url=BucketURL(0, "file", str(tmp_path / "wal")),
        cluster_id="test",
        node_id=1,
        node_epoch=node_epoch,
    )


@pytest.fixture
async def storage(tmp_path: Path) -> AsyncIterator[dict[str, Any]]:
    """One engine incarnation at a time over the same disk and metadata; ``crash`` halts it as a crash leaves it
    and starts the next incarnation."""
    metadata = StreamMetadataStateMachine()
    state: dict[str, Any] = {"metadata": metadata}
    state["engine"] = StorageEngine(_storage_config(tmp_path, 0), metadata)
    await state["engine"].start()

    async def crash() -> None:
        await state["engine"].halt()
        engine = StorageEngine(_storage_config(tmp_path, state["engine"].node.node_epoch + 1), metadata)
        await engine.start()
        state["engine"] = engine

    state["crash"] = crash
    try:
        yield state
    finally:
        await state["engine"].shutdown()


@pytest.fixture
async def second_engine(
    engine: tuple[StorageEngine, StreamMetadataStateMachine], tmp_path: Path
) -> AsyncIterator[StorageEngine]:
    """A started engine of node 2 over the same object storage and stream metadata as ``engine`` (node 1), its own
    WAL: a partition's next owner."""
    _, metadata = engine
    other = StorageEngine(
        StorageConfig(
            data_buckets=(BucketURL(0, "file", str(tmp_path / "objects")),),
            wal_url=BucketURL(0, "file", str(tmp_path / "wal-2")),
            cluster_id="test",
            node_id=2,
        ),
        metadata,
    )
    await other.start()
    try:
        yield other
    finally:
        await other.shutdown()
