"""Prometheus view of an object store's request counters (``StoreStats``).

S3 bills per request, so PUT/GET counts are what an operator (and the broker benchmark) needs to see next to
throughput. The collector reads the counters at scrape time through a callable, because the store a node uses
exists only once its storage engine has started, which is after the metrics registry is set up.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from storage.objectstore.base import OPERATIONS, StoreStats

#: The error codes of S3 misbehaving that every operation reports from the start, at 0: a rate or an alert over
#: them has a series before the first failure (an absent series reads as "no data", not as "no errors"). Rarer
#: codes of the closed set (storage/objectstore/s3_errors.py ERROR_CODES) appear when they first happen.
PRESET_ERROR_CODES = ("SlowDown", "InternalError", "ServiceUnavailable", "connection", "reset", "timeout")

_COUNTERS: tuple[tuple[str, str, str], ...] = (
    ("puts", "fjord_object_store_puts", "PUT-class requests (PutObject, CreateMultipartUpload, UploadPart, ...)"),
    ("gets", "fjord_object_store_gets", "GET requests (whole or ranged)"),
    ("deletes", "fjord_object_store_deletes", "DELETE requests"),
    ("lists", "fjord_object_store_lists", "LIST requests"),
    ("bytes_put", "fjord_object_store_put_bytes", "Bytes sent to the object store"),
    ("bytes_got", "fjord_object_store_get_bytes", "Bytes received from the object store"),
    ("retries", "fjord_object_store_retries", "Object-store requests repeated after a retryable failure"),
)


class StoreStatsCollector(Collector):
    """Exposes ``StoreStats`` as counters; reports nothing while ``stats()`` returns None (store not open yet)."""

    def __init__(self, stats: Callable[[], StoreStats | None]) -> None:
        self._stats = stats

    def collect(self) -> Iterator[CounterMetricFamily]:
        current = self._stats()
        if current is None:
            return
        for attribute, name, documentation in _COUNTERS:
            yield CounterMetricFamily(name, documentation, value=getattr(current, attribute))
        errors = CounterMetricFamily(
            "fjord_object_store_errors",
            "Failed object-store attempts by operation and error code (SlowDown, InternalError, connection, reset, "
            "timeout, ...), each retried or reported",
            labels=["operation", "code"],
        )
        counted = {(operation, code): 0 for operation in OPERATIONS for code in PRESET_ERROR_CODES}
        counted.update(dict(current.errors))
        for (operation, code), count in sorted(counted.items()):
            errors.add_metric([operation, code], count)
        yield errors
