"""The broker side of ``bench/broker.py``: one ``fjord server start`` process and what a row reads from it while a
scenario runs (peak RSS, CPU, objects written, and the deltas of its Prometheus counters and histograms).
"""

from __future__ import annotations

import re
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.broker_clients import MiB
from testkit.node_process import BrokerProcess, start_broker

_METRICS_PORT = re.compile(r"metrics served on http://[\d.]+:(\d+)/metrics")
_REQUESTS = re.compile(r'^fjord_broker_requests_total\{api="(\w+)"\} ([\d.e+]+)$', re.MULTILINE)
_STORE = re.compile(r"^fjord_object_store_(puts|gets)_total ([\d.e+]+)$", re.MULTILINE)
_LAG_BUCKET = re.compile(r'^fjord_broker_event_loop_lag_seconds_bucket\{le="([^"]+)"\} ([\d.e+]+)$', re.MULTILINE)
_GC_BUCKET = re.compile(
    r'^fjord_broker_gc_seconds_bucket\{generation="2",le="([^"]+)"\} ([\d.e+]+)$', re.MULTILINE
)
_PRODUCE_BUCKET = re.compile(
    r'^fjord_broker_request_seconds_bucket\{api="Produce",le="([^"]+)"\} ([\d.e+]+)$', re.MULTILINE
)


class Broker:
    """One broker process plus what the table reads from it: peak RSS, objects written, request counts."""

    def __init__(self, data_dir: Path, overrides: dict[str, str], args: tuple[str, ...] = ()) -> None:
        self.data_dir = data_dir
        self.overrides = {"metrics.port": "0", **overrides}
        self.args = args
        self.process: BrokerProcess | None = None
        self.metrics_port = 0

    def start(self) -> None:
        self.process = start_broker(self.data_dir, self.overrides, args=self.args)
        found = _METRICS_PORT.search(self.process.log_text())
        self.metrics_port = int(found.group(1)) if found else 0

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
            self.process = None

    @property
    def bootstrap(self) -> str:
        assert self.process is not None
        return self.process.bootstrap

    def endpoint(self, listener: str) -> tuple[str, int]:
        assert self.process is not None
        return self.process.endpoints[listener]

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.proc.pid

    def objects(self) -> int:
        store = self.data_dir / "objects"
        return sum(1 for p in store.rglob("*") if p.is_file()) if store.exists() else 0

    def requests(self) -> dict[str, float]:
        if not self.metrics_port:
            return {}
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as response:
            text = response.read().decode()
        found = {api: float(value) for api, value in _REQUESTS.findall(text)}
        found.update({f"store {kind}": float(value) for kind, value in _STORE.findall(text)})
        found.update({f"lag le {le}": float(value) for le, value in _LAG_BUCKET.findall(text)})
        found.update({f"gc2 le {le}": float(value) for le, value in _GC_BUCKET.findall(text)})
        found.update({f"produce le {le}": float(value) for le, value in _PRODUCE_BUCKET.findall(text)})
        return found

    def warm_transactions(self) -> None:
        """Has the transaction coordinator create and load ``__transaction_state`` (50 partitions), as a running
        cluster has it: with :meth:`wait_quiet` after it, a transactional row measures transactions, not that
        one-time set-up running next to its first seconds."""
        producer = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": "bench-warm-up"})
        producer.init_transactions(30)

    def wait_quiet(self, timeout_s: float = 30.0) -> None:
        """Until the broker uses under a tenth of a CPU over a quarter second (or ``timeout_s`` passed)."""
        proc = psutil.Process(self.pid)
        deadline = time.monotonic() + timeout_s
        before = sum(proc.cpu_times()[:2])
        while time.monotonic() < deadline:
            time.sleep(0.25)
            now = sum(proc.cpu_times()[:2])
            if now - before < 0.025:
                return
            before = now

    def end_offsets_total(self, topic: str, partitions: int) -> int:
        """The sum of the partitions' log end offsets (records, and transaction markers if any)."""
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "bench-end-offsets"})
        try:
            return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                       for p in range(partitions))
        finally:
            consumer.close()

    def create_topic(self, topic: str, partitions: int) -> None:
        client = AdminClient({"bootstrap.servers": self.bootstrap})
        futures = client.create_topics([NewTopic(topic, partitions, 1)])
        futures[topic].result(timeout=30)

    @contextmanager
    def observed(self) -> Iterator[dict[str, Any]]:
        """Samples the broker's RSS while the block runs; yields a dict filled with the deltas on exit."""
        proc = psutil.Process(self.pid)
        peak = [proc.memory_info().rss]
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(0.05):
                try:
                    peak[0] = max(peak[0], proc.memory_info().rss)
                except psutil.Error:
                    return

        sampler = threading.Thread(target=sample, daemon=True)
        before_objects, before_requests = self.objects(), self.requests()
        before_cpu = proc.cpu_times()
        out: dict[str, Any] = {}
        sampler.start()
        try:
            yield out
        finally:
            stop.set()
            sampler.join()
            after = self.requests()
            cpu = proc.cpu_times()
            out["cpu_s"] = (cpu.user + cpu.system) - (before_cpu.user + before_cpu.system)
            out["rss_mib"] = peak[0] / MiB
            delta = {key: int(after.get(key, 0) - before_requests.get(key, 0)) for key in after}
            out["store"] = f"{delta.get('store puts', 0)} / {delta.get('store gets', 0)}"
            out["objects"] = self.objects() - before_objects
            out["lag_p99_ms"] = _bucket_percentile(delta, "lag le ", 0.99)
            out["produce_p99_ms"] = _bucket_percentile(delta, "produce le ", 0.99)
            gc2 = _bucket_counts(delta, "gc2 le ")
            passes = gc2[-1][1] if gc2 else 0
            worst = next((le for le, n in gc2 if n == passes), None) if passes else None
            out["gc2"] = f"{passes}" + (f" (≤ {worst * 1000:g} ms)" if worst is not None else "")
            out["requests"] = ", ".join(
                f"{api} {int(after.get(api, 0) - before_requests.get(api, 0))}" for api in ("Produce", "Fetch")
            )


def _bucket_counts(delta: dict[str, int], prefix: str) -> list[tuple[float, int]]:
    """Cumulative Prometheus histogram buckets (upper bound, count) found under ``prefix`` in a metrics delta."""
    return sorted((float(key[len(prefix):]), n) for key, n in delta.items() if key.startswith(prefix))


def _bucket_percentile(delta: dict[str, int], prefix: str, q: float) -> float | None:
    """The upper bound (ms) of the bucket holding quantile ``q``: a histogram cannot say more precisely."""
    buckets = _bucket_counts(delta, prefix)
    if not buckets or not buckets[-1][1]:
        return None
    rank = q * buckets[-1][1]
    return next(le * 1000 for le, n in buckets if n >= rank)
