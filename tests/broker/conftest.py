"""Fixtures of the broker tests: the node process fixtures of ``broker_fixtures.py`` (``broker``, ``broker_factory``,
``shared_broker``, ``wire``), the in-process node of ``inprocess_groups.py`` (``node_factory``), and ``engine``, a
storage engine in this process for tests of the partition layer."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from storage.config import BucketURL, StorageConfig
from storage.engine import StorageEngine
from storage.metadata.state_machine import StreamMetadataStateMachine
from tests.broker.broker_fixtures import broker, broker_factory, shared_broker, wire
from tests.broker.inprocess_groups import node_factory

__all__ = ["broker", "broker_factory", "engine", "node_factory", "shared_broker", "wire"]


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[tuple[StorageEngine, StreamMetadataStateMachine]]:
    """A started storage engine (file WAL, local objects under ``tmp_path``) and its in-process metadata, for
    tests of the partition layer over real storage without a broker process; shut down at teardown."""
    config = StorageConfig(
        data_buckets=(BucketURL(0, "file", str(tmp_path / "objects")),),
        wal_url=BucketURL(0, "file", str(tmp_path / "wal")),
        cluster_id="test",
        node_id=1,
    )
    metadata = StreamMetadataStateMachine()
    eng = StorageEngine(config, metadata)
    await eng.start()
    try:
        yield eng, metadata
    finally:
        await eng.shutdown()
