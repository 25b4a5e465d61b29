"""The ``fjord`` source's direct path: uploaded data read by Spark straight from the bucket, the WAL-only tail
through the broker, and exactly the records a plain confluent-kafka consumer reads.

The cluster is one controller and one broker (real processes; the direct path asks the controller quorum where the
data is, which the embedded single node does not serve over the network) over a bucket on the session's moto S3
server, so executors read through the s3:// object store. The broker uploads as soon as its LogCache holds 64 KiB
(never on a timer during a test), so a topic produced in two rounds has an uploaded head and a tail that is only in
the WAL; the tests check that planning found both parts before reading. Proving a read direct: the broker's Fetch
counter (Prometheus ``/metrics``) stays put while Spark reads a range that is all uploaded.
"""

from __future__ import annotations

import asyncio
import os
import re
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from pyspark.sql import SparkSession

from node.local_cluster import LocalCluster, plan_cluster, wait_ready
from spark_connector.direct_plan import DirectRange, cover
from spark_connector.offset_lookup import OffsetLookup
from spark_connector.offsets import OffsetRange
from spark_connector.options import OptionError, parse_options
from spark_connector.storage_lookup import ClusterFacts, locate_ranges
from storage.metadata.api import ObjectStreamRange, ObjectType, S3ObjectMetadata
from tests.cluster.cluster_support import FAST
from tests.conftest import S3Server
from tests.spark_connector.test_fjord_source import consume, new_topic, read, rows, without_headers
from tests.waiting import eventually

UPLOAD_THRESHOLD = 64 * 1024
READY_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Cluster:
    """The running cluster as the tests use it: its broker's address, the bucket URL, the broker's log."""

    bootstrap: str
    port: int
    store: str
    broker_log: Path


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory, s3_server: S3Server) -> Iterator[Cluster]:
    store = s3_server.bucket_url_text(s3_server.create_bucket("direct"))
    extra = {
        **FAST,
        "s3.wal.upload.threshold": str(UPLOAD_THRESHOLD),
        "s3.wal.upload.interval.ms": "3600000",
        "metrics.port": "0",
    }
    cluster = LocalCluster(
        plan_cluster(
            tmp_path_factory.mktemp("direct-cluster"), controllers=1, brokers=1, object_store=store, extra=extra
        )
    )
    cluster.start_all()
    try:
        asyncio.run(wait_ready(cluster, READY_TIMEOUT_S))
        broker = cluster.brokers[0]
        yield Cluster(broker.spec.address, broker.spec.port, store, broker.logs[-1])
    finally:
        codes = cluster.stop_all(timeout=30)
        assert all(code == 0 for code in codes.values()), f"unclean stop {codes}:\n{cluster.logs()}"


def object_store(kafka: Cluster) -> str:
    return kafka.store


def plan(kafka: Cluster, topic: str, partitions: int) -> list[OffsetRange | DirectRange]:
    """What the driver plans for the whole topic: one task per partition, located in the bucket where it can be."""
    options = parse_options({"kafka.bootstrap.servers": kafka.bootstrap, "subscribe": topic}, streaming=False)
    lookup = OffsetLookup(options)
    tps = [(topic, p) for p in range(partitions)]
    earliest, latest = lookup.earliest(tps), lookup.latest(tps)
    facts = ClusterFacts([("127.0.0.1", kafka.port)], lookup.cluster_id(), lookup.topic_ids([topic]))
    ranges = [OffsetRange(topic, p, earliest[(topic, p)], latest[(topic, p)]) for p in range(partitions)]
    return locate_ranges(facts, object_store(kafka), ranges)


def located(kafka: Cluster, topic: str, partitions: int) -> list[DirectRange] | None:
    """The plan when every partition has an uploaded head, else None."""
    planned = plan(kafka, topic, partitions)
    direct = [t for t in planned if isinstance(t, DirectRange) and t.direct_end > t.offsets.start]
    return direct if len(direct) == partitions else None


def produce_mixed(
    bootstrap: str,
    topic: str,
    count: int,
    *,
    partitions: int,
    start: int = 0,
    codec: str = "none",
    headers: list[tuple[str, bytes | None]] | None = None,
) -> None:
    """Records whose values compress only about twice (so a few thousand of them fill several uploads)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "all", "compression.type": codec})
    for i in range(start, start + count):
        key = None if i % 7 == 0 else f"k{i}".encode()
        value = f"value-{i}-".encode() + os.urandom(40).hex().encode()
        extra: dict[str, Any] = {}
        if headers is not None and i % 2 == 0:
            extra["headers"] = [*headers, ("n", str(i).encode())]
        producer.produce(topic, value=value, key=key, partition=i % partitions, **extra)
    assert producer.flush(30) == 0


def uploaded_head(kafka: Cluster, topic: str, partitions: int) -> list[DirectRange]:
    """Waits until every partition has an uploaded head (uploads run after the produce returns)."""
    return eventually(
        lambda: located(kafka, topic, partitions), timeout=30, what=f"every partition of {topic} to have uploaded data"
    )


def add_wal_tail(kafka: Cluster, topic: str, partitions: int, start: int, codec: str) -> int:
    """Produces a few records at a time until the plan shows a tail that is not uploaded (a round can itself fill
    the LogCache to the upload threshold); returns how many it produced."""
    for round_ in range(10):
        produce_mixed(kafka.bootstrap, topic, 20, partitions=partitions, start=start + 20 * round_, codec=codec)
        planned = located(kafka, topic, partitions)
        if planned is not None and any(t.direct_end < t.offsets.end for t in planned):
            return 20 * (round_ + 1)
    raise AssertionError(f"{topic}: every round of records was uploaded at once")


def fetch_count(kafka: Cluster) -> float:
    log = kafka.broker_log.read_text(errors="replace")
    match = re.search(r"metrics served on http://[0-9.]+:(\d+)/metrics", log)
    assert match, log
    with urllib.request.urlopen(f"http://127.0.0.1:{match.group(1)}/metrics", timeout=5) as http:
        text = http.read().decode()
    found = re.search(r'fjord_broker_requests_total\{api="Fetch"\} ([0-9.e+]+)', text)
    return float(found.group(1)) if found else 0.0


def settled_fetch_count(kafka: Cluster) -> float:
    """The Fetch count once no earlier consumer's long-poll (up to librdkafka's 500 ms fetch.wait.max.ms) is
    still being answered: two readings a second apart agree."""
    seen: list[float] = []

    def settled() -> float | None:
        seen.append(fetch_count(kafka))
        return seen[-1] if len(seen) > 1 and seen[-1] == seen[-2] else None

    return eventually(settled, timeout=20, interval=1.0, what="the broker's Fetch count to settle")


def direct_read(spark: SparkSession, kafka: Cluster, topic: str, **options: str) -> list[tuple[object, ...]]:
    return rows(
        read(
            spark,
            kafka.bootstrap,
            topic,
            **{"fjord.object.store": object_store(kafka), "fjord.read": "direct", **options},
        )
    )


@pytest.mark.parametrize("codec", ["zstd", "gzip"])
def test_direct_reads_equal_a_consumers_records(spark: SparkSession, kafka: Cluster, codec: str) -> None:
    topic = new_topic(kafka.bootstrap, 2)
    produce_mixed(kafka.bootstrap, topic, 3000, partitions=2, codec=codec)
    uploaded_head(kafka, topic, 2)
    total = 3000 + add_wal_tail(kafka, topic, 2, 3000, codec)
    expected = without_headers(consume(kafka.bootstrap, topic, partitions=2))
    assert len(expected) == total
    assert direct_read(spark, kafka, topic, minPartitions="5") == expected
    assert rows(read(spark, kafka.bootstrap, topic, **{"fjord.read": "broker"})) == expected


def test_headers_and_offsets_through_the_direct_path(spark: SparkSession, kafka: Cluster) -> None:
    topic = new_topic(kafka.bootstrap, 1)
    produce_mixed(kafka.bootstrap, topic, 3000, partitions=1, codec="snappy", headers=[("h1", b"one"), ("e", None)])
    planned = uploaded_head(kafka, topic, 1)
    middle = planned[0].direct_end // 2
    expected = consume(kafka.bootstrap, topic, partitions=1, start={0: middle})
    starting = f'{{"{topic}": {{"0": {middle}}}}}'
    frame = read(
        spark,
        kafka.bootstrap,
        topic,
        includeHeaders="true",
        startingOffsets=starting,
        **{"fjord.object.store": object_store(kafka), "fjord.read": "direct"},
    )
    assert rows(frame, headers=True) == expected


def test_uploaded_range_is_read_without_fetching_from_the_broker(spark: SparkSession, kafka: Cluster) -> None:
    topic = new_topic(kafka.bootstrap, 2)
    produce_mixed(kafka.bootstrap, topic, 3000, partitions=2, codec="lz4")
    planned = uploaded_head(kafka, topic, 2)
    ends = {t.offsets.partition: t.direct_end for t in planned}
    ending = ", ".join(f'"{p}": {end}' for p, end in ends.items())
    before = settled_fetch_count(kafka)
    got = direct_read(spark, kafka, topic, endingOffsets=f'{{"{topic}": {{{ending}}}}}')
    assert fetch_count(kafka) == before
    expected = without_headers(consume(kafka.bootstrap, topic, partitions=2, end=ends))
    assert got == expected
    assert len(got) == sum(ends.values())
    # The same read forced through the broker does fetch: the counter is the one that would have moved.
    forced = rows(
        read(spark, kafka.bootstrap, topic, endingOffsets=f'{{"{topic}": {{{ending}}}}}', **{"fjord.read": "broker"})
    )
    assert forced == expected
    assert fetch_count(kafka) > before


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_trimmed_head(spark: SparkSession, kafka: Cluster, fail_on_data_loss: str) -> None:
    topic = new_topic(kafka.bootstrap, 1)
    produce_mixed(kafka.bootstrap, topic, 3000, partitions=1)
    planned = uploaded_head(kafka, topic, 1)
    cut = planned[0].direct_end // 2
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    deleted = admin.delete_records([TopicPartition(topic, 0, cut)], operation_timeout=10)
    assert next(iter(deleted.values())).result(timeout=15).low_watermark == cut
    start = f'{{"{topic}": {{"0": 10}}}}'
    if fail_on_data_loss == "true":
        with pytest.raises(Exception, match="failOnDataLoss"):
            direct_read(spark, kafka, topic, startingOffsets=start)
    else:
        skipped = direct_read(spark, kafka, topic, startingOffsets=start, failOnDataLoss="false")
        expected = without_headers(consume(kafka.bootstrap, topic, partitions=1))
        assert [r[2] for r in skipped] == list(range(cut, 3000))
        assert skipped == expected
    assert direct_read(spark, kafka, topic) == without_headers(consume(kafka.bootstrap, topic, partitions=1))


def test_read_path_options() -> None:
    base = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "t"}
    assert parse_options(base, streaming=False).read_path == "auto"
    store = {**base, "fjord.object.store": "0@s3://bucket?region=eu-west-1", "fjord.read": "DIRECT"}
    parsed = parse_options(store, streaming=False)
    assert (parsed.read_path, parsed.object_store) == ("direct", "0@s3://bucket?region=eu-west-1")
    with pytest.raises(OptionError, match=re.escape("'fjord.read=direct' needs 'fjord.object.store'")):
        parse_options({**base, "fjord.read": "direct"}, streaming=False)
    with pytest.raises(OptionError, match=re.escape("'fjord.read' must be 'auto', 'direct' or 'broker'")):
        parse_options({**base, "fjord.read": "fast"}, streaming=False)
    with pytest.raises(OptionError, match=re.escape("'fjord.object.store' must be a file:// or s3:// URL")):
        parse_options({**base, "fjord.object.store": "mem://x"}, streaming=False)


def test_cover_stops_at_the_first_gap() -> None:
    def obj(object_id: int, *ranges: tuple[int, int, int]) -> S3ObjectMetadata:
        return S3ObjectMetadata(
            object_id, 100, ObjectType.STREAM_SET, tuple(ObjectStreamRange(s, a, b) for s, a, b in ranges)
        )

    offsets = OffsetRange("t", 0, 15, 70)
    planned = cover(offsets, 7, "_fjord_c", [obj(2, (7, 30, 50), (8, 0, 99)), obj(1, (7, 0, 30)), obj(3, (7, 60, 80))])
    assert [(s.object_id, s.start, s.end) for s in planned.slices] == [(1, 15, 30), (2, 30, 50)]
    assert planned.direct_end == 50
    assert cover(offsets, 7, "_fjord_c", [obj(3, (7, 20, 80))]).direct_end == 15
    assert cover(OffsetRange("t", 0, 15, 40), 7, "_fjord_c", [obj(1, (7, 0, 90))]).slices[0].end == 40
