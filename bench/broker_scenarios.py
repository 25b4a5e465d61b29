"""The scenarios' building blocks of ``bench/broker.py``: the sizes of a run, a row of the table, running producers,
consumers, the end-to-end latency pair and the SCRAM connection storm against a broker, and the table and the
round medians and ratios the rows are printed as.
"""

from __future__ import annotations

import asyncio
import dataclasses
import ssl
import statistics
import time
from pathlib import Path
from typing import Any

from bench.broker_clients import (
    CLIENT_TIMEOUT_S,
    MB,
    RECORD,
    ClientResult,
    Job,
    MiB,
    consume_worker,
    percentile,
    produce_worker,
)
from bench.broker_process import Broker
from bench.scram_storm import ScramStorm
from storage.config import read_properties
from testkit.tls_certs import CertificateAuthority

SHIPPED_CONFIG = Path(__file__).resolve().parent.parent / "config" / "server.properties"
_CACHE_KEYS = ("s3.wal.cache.size", "s3.wal.upload.threshold", "s3.block.cache.size")


@dataclasses.dataclass(frozen=True)
class Sizes:
    produce_bytes: int
    catchup_bytes: int
    latency_seconds: float
    latency_rate: int
    #: New SCRAM connections per listener in the security scenario.
    scram_connections: int


FULL = Sizes(produce_bytes=1024 * MiB, catchup_bytes=512 * MiB, latency_seconds=30.0, latency_rate=20 * MB,
             scram_connections=1000)
QUICK = Sizes(produce_bytes=128 * MiB, catchup_bytes=64 * MiB, latency_seconds=5.0, latency_rate=20 * MB,
              scram_connections=200)
SCRAM_MECHANISM = "SCRAM-SHA-512"
SCRAM_USER = "bench"
SCRAM_PASSWORD = "bench-scram-password"
#: New connections in flight at once in the SCRAM storm: a fleet of clients starting together, not one by one.
STORM_CONCURRENCY = 32



@dataclasses.dataclass
class Row:
    scenario: str
    mb_s: float
    records_s: float
    p50_ms: float | None
    p99_ms: float | None
    rss_mib: float
    #: Broker CPU seconds (all threads) per GB of record values: unlike MB/s, barely moved by other load on the box.
    cpu_s_per_gb: float
    #: The same for the client processes together: a client near 1 CPU s per wall second is the bottleneck.
    client_cpu_s_per_gb: float
    #: Object-store PUT / GET requests during the scenario (the broker's fjord_object_store_* counters).
    store: str
    requests: str
    seconds: float
    note: str = ""
    #: e2e-latency only: the producer's own p99 (enqueue to acknowledgement, librdkafka's msg.latency()), so the
    #: e2e figure splits into linger + produce round trip versus what the fetch side adds.
    ack_p99_ms: float | None = None
    #: The broker's event-loop lag p99 (upper bound of its histogram bucket) and its gen-2 GC passes: how much of
    #: a request's wait was the loop being busy or stalled rather than the request's own work.
    lag_p99_ms: float | None = None
    gc2: str = "-"
    #: The broker's own Produce time p99 (decoded request to encoded response: validation, WAL write, fsync).
    produce_p99_ms: float | None = None



def _collect(ctx: Any, procs: list[Any], results: Any) -> list[ClientResult]:
    out: list[ClientResult] = []
    deadline = time.monotonic() + CLIENT_TIMEOUT_S + 30
    while len(out) < len(procs) and time.monotonic() < deadline:
        try:
            out.append(results.get(timeout=1.0))
        except Exception:
            if not any(p.is_alive() for p in procs) and results.empty():
                break
    for p in procs:
        p.join(timeout=10)
        if p.is_alive():
            p.kill()
    if len(out) < len(procs):
        raise RuntimeError(f"{len(procs) - len(out)} client process(es) reported nothing (crashed or hung)")
    return out


def _row(name: str, results: list[ClientResult], observed: dict[str, Any], wall: float) -> Row:
    started = min(r.started for r in results)
    finished = max(r.finished for r in results)
    elapsed = max(finished - started, 1e-9)
    value_bytes = sum(r.value_bytes for r in results)
    records = sum(r.records for r in results)
    latencies = [x for r in results for x in r.latencies_ms]
    errors = [r.error for r in results if r.errors]
    return Row(
        name,
        value_bytes / elapsed / MB,
        records / elapsed,
        percentile(latencies, 0.50),
        percentile(latencies, 0.99),
        observed["rss_mib"],
        observed["cpu_s"] / max(value_bytes, 1) * 1e9,
        sum(r.cpu_s for r in results) / max(value_bytes, 1) * 1e9,
        observed["store"],
        observed["requests"],
        wall,
        note=f"{sum(r.errors for r in results)} errors: {errors[0]}" if errors else "",
        lag_p99_ms=observed.get("lag_p99_ms"),
        produce_p99_ms=observed.get("produce_p99_ms"),
        gc2=observed.get("gc2", "-"),
    )


def run_produce(ctx: Any, broker: Broker, name: str, job: Job, producers: int) -> Row:
    broker.create_topic(job.topic, job.partitions)
    results = ctx.Queue()
    share = dataclasses.replace(job, amount=job.amount // producers)
    procs = [ctx.Process(target=produce_worker, args=(share, results)) for _ in range(producers)]
    wall = time.monotonic()
    with broker.observed() as observed:
        for p in procs:
            p.start()
        got = _collect(ctx, procs, results)
    return _row(name, got, observed, time.monotonic() - wall)


def run_consume(ctx: Any, broker: Broker, name: str, job: Job) -> Row:
    results = ctx.Queue()
    ready = ctx.Event()
    proc = ctx.Process(target=consume_worker, args=(job, ready, results))
    wall = time.monotonic()
    with broker.observed() as observed:
        proc.start()
        got = _collect(ctx, [proc], results)
    return _row(name, got, observed, time.monotonic() - wall)


def run_scram_storm(broker: Broker, protocol: str, listener: str, ca: CertificateAuthority, connections: int) -> Row:
    """``connections`` new connections authenticated with SCRAM on ``listener``, ``STORM_CONCURRENCY`` at a time;
    records/s is authenticated connections per second, p50/p99 the connect-to-verified-server-final time."""
    host, port = broker.endpoint(listener)
    context = ssl.create_default_context(cafile=str(ca.cert_path)) if protocol == "SASL_SSL" else None
    storm = ScramStorm(host, port, SCRAM_MECHANISM, user=SCRAM_USER, password=SCRAM_PASSWORD, tls=context)
    wall = time.monotonic()
    with broker.observed() as observed:
        result = asyncio.run(storm.run(connections, STORM_CONCURRENCY, timeout_s=30.0))
    done = len(result.latencies_ms)
    note = (
        f"{done} of {connections} {SCRAM_MECHANISM} authentications over {protocol} in {result.seconds:.2f} s, "
        f"{STORM_CONCURRENCY} at a time; broker CPU {observed['cpu_s']:.1f} s"
    )
    if result.failures:
        note += f"; {result.failures} errors: {result.last_failure}"
    return Row(
        f"scram-connect {protocol}", 0.0, done / max(result.seconds, 1e-9), percentile(result.latencies_ms, 0.5),
        percentile(result.latencies_ms, 0.99), observed["rss_mib"], 0.0, 0.0, observed["store"], "-",
        time.monotonic() - wall, note=note, lag_p99_ms=observed.get("lag_p99_ms"), gc2=observed.get("gc2", "-"),
    )


def shipped_cache_sizes() -> dict[str, str]:
    """The LogCache size, upload threshold and block cache size ``make run`` serves with."""
    shipped = read_properties(SHIPPED_CONFIG)
    return {key: shipped[key] for key in _CACHE_KEYS if key in shipped}


def run_latency(ctx: Any, broker: Broker, sizes: Sizes) -> Row:
    topic = "bench-latency"
    broker.create_topic(topic, 1)
    total = int(sizes.latency_rate * sizes.latency_seconds) // RECORD * RECORD
    results = ctx.Queue()
    ready = ctx.Event()
    reader = Job(broker.bootstrap, topic, amount=total // RECORD, from_end=True)
    consumer = ctx.Process(target=consume_worker, args=(reader, ready, results))
    producer = ctx.Process(
        target=produce_worker, args=(Job(broker.bootstrap, topic, amount=total, rate=sizes.latency_rate), results)
    )
    wall = time.monotonic()
    with broker.observed() as observed:
        consumer.start()
        if not ready.wait(60):
            raise RuntimeError("latency consumer did not get its assignment within 60 s")
        producer.start()
        got = _collect(ctx, [consumer, producer], results)
    consumed = [r for r in got if r.latencies_ms and r.records == total // RECORD] or got
    reader_result = max(consumed, key=lambda r: len(r.latencies_ms))
    row = _row("e2e-latency", [reader_result], observed, time.monotonic() - wall)
    row.ack_p99_ms = percentile([x for r in got if r is not reader_result for x in r.latencies_ms], 0.99)
    row.note = (row.note + f" fixed rate {sizes.latency_rate / MB:.0f} MB/s").strip()
    return row



def table(rows: list[Row], title: str) -> str:
    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f}"

    header = (
        "scenario", "MB/s", "records/s", "p50 ms", "p99 ms", "ack p99 ms", "broker produce p99 ms", "loop lag p99 ms",
        "gen-2 GCs", "broker RSS MiB", "broker CPU s/GB", "client CPU s/GB", "store PUT / GET", "requests", "seconds",
        "notes",
    )
    align = (
        "---", "---:", "---:", "---:", "---:", "---:", "---:", "---:", "---:", "---:", "---:", "---:", "---:", "---",
        "---:", "---",
    )
    lines = [f"### {title}", "", "| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    for r in rows:
        cells = (
            r.scenario, f"{r.mb_s:.1f}", f"{r.records_s:,.0f}", ms(r.p50_ms), ms(r.p99_ms), ms(r.ack_p99_ms),
            ms(r.produce_p99_ms), ms(r.lag_p99_ms), r.gc2, f"{r.rss_mib:.0f}",
            f"{r.cpu_s_per_gb:.1f}", f"{r.client_cpu_s_per_gb:.1f}", r.store, r.requests, f"{r.seconds:.1f}",
            r.note,
        )
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def median_rows(rounds: list[dict[str, Row]]) -> list[Row]:
    """Per scenario, the row of the round with the median MB/s (every column from that one run), its note listing
    every round's MB/s: a 2-core box moves single runs by half (a consume measured 150 and 390 MB/s back to back)."""
    out: list[Row] = []
    for name in rounds[0]:
        runs = sorted((got[name] for got in rounds), key=lambda r: r.mb_s)
        middle = dataclasses.replace(runs[len(runs) // 2])
        failed = [number for number, got in enumerate(rounds, 1) if "errors" in got[name].note]
        if failed and "errors" not in middle.note:  # a failure in any round shows (and fails the run)
            first = rounds[failed[0] - 1][name].note
            middle.note = f"{middle.note} errors in round(s) {failed}: {first};".strip()
        if len(runs) > 1:
            listed = ", ".join(f"{got[name].mb_s:.0f}" for got in rounds)
            middle.note = (middle.note + f" median of {len(runs)} rounds (MB/s: {listed})").strip()
        out.append(middle)
    return out


def ratio_line(rounds: list[dict[str, Row]], label: str, top: str, bottom: str) -> str:
    """``label``: the ratio of two scenarios' MB/s in each round, and its median (the figure to compare)."""
    each = [got[top].mb_s / got[bottom].mb_s if got[bottom].mb_s else 0.0 for got in rounds]
    listed = ", ".join(f"{x:.2f}" for x in each)
    return f"{label}: median {statistics.median(each):.2f}x over {len(each)} rounds ({listed})"
