"""The object store's request counters as Prometheus metrics: what an operator scrapes to see S3 request costs."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from storage.objectstore.base import OPERATIONS, StoreStats
from storage.objectstore.local import LocalObjectStore
from storage.objectstore.metrics import PRESET_ERROR_CODES, StoreStatsCollector
from storage.objectstore.s3_errors import ERROR_CODES


def _scrape(registry: CollectorRegistry) -> dict[str, float]:
    values: dict[str, float] = {}
    for line in generate_latest(registry).decode().splitlines():
        if line.startswith("fjord_object_store_") and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values


async def test_scrape_reports_the_store_requests_and_bytes(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path / "bucket")
    registry = CollectorRegistry()
    registry.register(StoreStatsCollector(lambda: store.stats))
    await store.put("a/1", b"x" * 1000)
    await store.put("a/2", b"y" * 24)
    assert await store.get("a/1", 10, 20) == b"x" * 10
    await store.delete(["a/2"])
    scraped = _scrape(registry)
    assert scraped["fjord_object_store_puts_total"] == 2
    assert scraped["fjord_object_store_put_bytes_total"] == 1024
    assert scraped["fjord_object_store_gets_total"] == 1
    assert scraped["fjord_object_store_get_bytes_total"] == 10
    assert scraped["fjord_object_store_deletes_total"] == 1


def test_nothing_is_reported_before_the_store_exists() -> None:
    current: list[StoreStats] = []
    registry = CollectorRegistry()
    registry.register(StoreStatsCollector(lambda: current[0] if current else None))
    assert _scrape(registry) == {}
    current.append(StoreStats(puts=3))
    assert _scrape(registry)["fjord_object_store_puts_total"] == 3


def test_s3_error_series_exist_at_zero_before_the_first_failure() -> None:
    """A rate or alert over SlowDown, resets, ... has a series from the start; a failure adds to its own."""
    stats = StoreStats()
    registry = CollectorRegistry()
    registry.register(StoreStatsCollector(lambda: stats))
    assert set(PRESET_ERROR_CODES) <= set(ERROR_CODES)
    scraped = _scrape(registry)
    errors = {name: v for name, v in scraped.items() if name.startswith("fjord_object_store_errors_total")}
    assert len(errors) == len(OPERATIONS) * len(PRESET_ERROR_CODES)
    assert set(errors.values()) == {0}
    stats.errors["upload_part", "SlowDown"] = 3
    stats.errors["get", "OperationAborted"] = 1
    scraped = _scrape(registry)
    assert scraped['fjord_object_store_errors_total{code="SlowDown",operation="upload_part"}'] == 3
    assert scraped['fjord_object_store_errors_total{code="OperationAborted",operation="get"}'] == 1
    assert scraped['fjord_object_store_errors_total{code="SlowDown",operation="put"}'] == 0
