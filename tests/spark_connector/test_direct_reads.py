"""The ``fjord`` source's direct path: uploaded data read by Spark straight from the bucket, the WAL-only tail
through the broker, and exactly the records a plain confluent-kafka consumer reads.

The cluster is one controller and two brokers (real processes; the direct path asks the controller quorum where the
data is; the embedded single node, which serves it on its own CONTROLLER listener, is test_embedded_direct_reads')
over a bucket on the session's moto S3 server, so executors read through the s3:// object store. The broker uploads
as soon as its LogCache holds 64 KiB (never on a timer during a test), so a topic produced in two rounds has an
uploaded head and a tail that is only in the WAL; the tests check that planning found both parts before reading.
Proving a read direct: the broker's Fetch counter (Prometheus ``/metrics``) stays put while Spark reads a range that
is all uploaded. The same holds for a read_committed read (aborted transactions dropped from the bucket's data) and
a compacted topic (its cleaned stream read from the bucket). The streaming test moves a partition and restarts a
broker, so it comes after the other tests of the cluster.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
from kafka import TopicPartition as KafkaTopicPartition
from kafka.admin import KafkaAdminClient
from pyspark.sql import SparkSession

from node.local_cluster import LocalCluster, plan_cluster, wait_ready
from spark_connector.direct_plan import DirectRange, PartitionStreams, committed_view, cover
from spark_connector.direct_reader import Columns
from spark_connector.offset_lookup import OffsetLookup
from spark_connector.offsets import OffsetRange
from spark_connector.options import OptionError, parse_options
from spark_connector.storage_lookup import ClusterFacts, locate_ranges
from storage.metadata.api import ObjectStreamRange, ObjectType, S3ObjectMetadata
from testkit.s3_fault_proxy import S3FaultProxy
from testkit.waiting import eventually
from tests.cluster.cluster_support import FAST, leaders
from tests.conftest import S3Server
from tests.metrics_scrape import metrics_url, scrape
from tests.spark_connector.test_fjord_source import consume, new_topic, read, rows, without_headers
from wire.aborted_txns import AbortedTxn, AbortedTxnEntry
from wire.control_records import encode_marker_key, encode_marker_value
from wire.record_batch import Record, build_batch

UPLOAD_THRESHOLD = 64 * 1024
READY_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Cluster:
    """The running cluster as the tests use it: its broker's address, the bucket URL, the processes."""

    bootstrap: str
    port: int
    store: str
    cluster: LocalCluster

    @property
    def broker_logs(self) -> list[Path]:
        """The log of each broker's latest start (it names the broker's metrics port)."""
        return [broker.logs[-1] for broker in self.cluster.brokers]


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory, s3_server: S3Server) -> Iterator[Cluster]:
    store = s3_server.bucket_url_text(s3_server.create_bucket("direct"))
    extra = {
        **FAST,
        "s3.wal.upload.threshold": str(UPLOAD_THRESHOLD),
        "s3.wal.upload.interval.ms": "3600000",
        "metrics.port": "0",
        # Compacted topics get a cleaner round soon after their first records (min.cleanable.dirty.ratio per topic).
        "log.cleaner.backoff.ms": "100",
    }
    cluster = LocalCluster(
        plan_cluster(
            tmp_path_factory.mktemp("direct-cluster"), controllers=1, brokers=2, object_store=store, extra=extra
        )
    )
    cluster.start_all()
    try:
        asyncio.run(wait_ready(cluster, READY_TIMEOUT_S))
        broker = cluster.brokers[0]
        yield Cluster(broker.spec.address, broker.spec.port, store, cluster)
    finally:
        codes = cluster.stop_all(timeout=30)
        assert all(code == 0 for code in codes.values()), f"unclean stop {codes}:\n{cluster.logs()}"


def object_store(kafka: Cluster) -> str:
    return kafka.store


def plan(kafka: Cluster, topic: str, partitions: int, committed: bool = False) -> list[OffsetRange | DirectRange]:
    """What the driver plans for the whole topic: one task per partition, located in the bucket where it can be
    (``committed``: a read_committed read, up to the LSO)."""
    isolation = {"kafka.isolation.level": "read_committed"} if committed else {}
    options = parse_options(
        {"kafka.bootstrap.servers": kafka.bootstrap, "subscribe": topic, **isolation}, streaming=False
    )
    lookup = OffsetLookup(options)
    tps = [(topic, p) for p in range(partitions)]
    earliest, latest = lookup.earliest(tps), lookup.latest(tps)
    facts = ClusterFacts([("127.0.0.1", kafka.port)], lookup.cluster_id(), lookup.topic_ids([topic]))
    ranges = [OffsetRange(topic, p, earliest[(topic, p)], latest[(topic, p)]) for p in range(partitions)]
    return locate_ranges(facts, object_store(kafka), ranges, read_committed=committed)


def located(kafka: Cluster, topic: str, partitions: int, committed: bool = False) -> list[DirectRange] | None:
    """The plan when every partition has an uploaded head, else None."""
    planned = plan(kafka, topic, partitions, committed)
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
    null_keys: bool = True,
) -> None:
    """Records whose values compress only about twice (so a few thousand of them fill several uploads); every
    seventh has no key, unless ``null_keys`` is off (a compacted topic refuses a batch holding one). Every record
    must be delivered: a refused batch fails the caller here, not later as records that never arrived."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "all", "compression.type": codec})
    refused: list[str] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            refused.append(str(err))

    for i in range(start, start + count):
        key = None if null_keys and i % 7 == 0 else f"k{i}".encode()
        value = f"value-{i}-".encode() + os.urandom(40).hex().encode()
        extra: dict[str, Any] = {}
        if headers is not None and i % 2 == 0:
            extra["headers"] = [*headers, ("n", str(i).encode())]
        producer.produce(topic, value=value, key=key, partition=i % partitions, on_delivery=delivered, **extra)
    assert producer.flush(30) == 0
    assert not refused, f"{topic}: {len(refused)} of {count} records refused, e.g. {refused[0]}"


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


def fetched_bytes(kafka: Cluster, topic: str) -> float:
    """Record bytes the brokers returned in Fetch responses for ``topic`` (``fjord_topic_bytes_out``), all brokers
    together. Per topic, so another client's fetches of other topics (a consumer an earlier test left polling) do
    not move it: only a read of this topic through the broker does."""
    pattern = re.compile(rf'^fjord_topic_bytes_out_total\{{node="[^"]*",topic="{re.escape(topic)}"\}} (\S+)$', re.M)
    total = 0.0
    for path in kafka.broker_logs:
        text = scrape(metrics_url(path.read_text(errors="replace")))
        total += sum(float(value) for value in pattern.findall(text))
    return total


def settled_fetched_bytes(kafka: Cluster, topic: str) -> float:
    """:func:`fetched_bytes` once no earlier consumer's long-poll (up to librdkafka's 500 ms fetch.wait.max.ms) is
    still being answered: two readings a second apart agree."""
    seen: list[float] = []

    def settled() -> tuple[float] | None:  # a tuple: a count of 0 is an answer too
        seen.append(fetched_bytes(kafka, topic))
        return (seen[-1],) if len(seen) > 1 and seen[-1] == seen[-2] else None

    return eventually(settled, timeout=20, interval=1.0, what=f"the bytes fetched from {topic} to settle")[0]


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
    before = settled_fetched_bytes(kafka, topic)
    got = direct_read(spark, kafka, topic, endingOffsets=f'{{"{topic}": {{{ending}}}}}')
    assert fetched_bytes(kafka, topic) == before
    expected = without_headers(consume(kafka.bootstrap, topic, partitions=2, end=ends))
    assert got == expected
    assert len(got) == sum(ends.values())
    # The same read forced through the broker does fetch: the counter is the one that would have moved.
    forced = rows(
        read(spark, kafka.bootstrap, topic, endingOffsets=f'{{"{topic}": {{{ending}}}}}', **{"fjord.read": "broker"})
    )
    assert forced == expected
    assert fetched_bytes(kafka, topic) > before


def test_a_direct_read_through_a_slow_down_storm_returns_exactly_the_records(
    spark: SparkSession, kafka: Cluster, s3_server: S3Server
) -> None:
    """Half of S3's answers are 503 SlowDown while Spark reads an uploaded range straight from the bucket (the
    source's S3 client goes through testkit's fault proxy; the brokers do not): each GET is retried with backoff,
    and the read returns exactly a consumer's records, none missing, none twice."""
    topic = new_topic(kafka.bootstrap, 2)
    produce_mixed(kafka.bootstrap, topic, 3000, partitions=2, codec="zstd")
    ends = {t.offsets.partition: t.direct_end for t in uploaded_head(kafka, topic, 2)}
    ending = ", ".join(f'"{p}": {end}' for p, end in ends.items())
    expected = without_headers(consume(kafka.bootstrap, topic, partitions=2, end=ends))
    with S3FaultProxy(s3_server.endpoint, seed=24) as proxy:
        proxy.faults.slow_down = 0.5
        through_proxy = kafka.store.replace(f"endpoint={s3_server.endpoint}", f"endpoint={proxy.endpoint}")
        assert through_proxy != kafka.store
        got = rows(
            read(
                spark,
                kafka.bootstrap,
                topic,
                minPartitions="4",
                endingOffsets=f'{{"{topic}": {{{ending}}}}}',
                **{"fjord.object.store": through_proxy, "fjord.read": "direct"},
            )
        )
        stats = proxy.stats
    print(f"direct read through 50% SlowDown: {stats.gets} GETs, {stats.slow_downs} SlowDown answers")
    assert stats.slow_downs > 0 and stats.forwarded > 0, stats
    assert got == expected
    assert len(got) == sum(ends.values())


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


def test_read_committed_reads_directly_without_aborted_records(spark: SparkSession, kafka: Cluster) -> None:
    """Committed and aborted transactions interleaved with plain records, uploaded, then a transaction left open:
    the read stops at the LSO, drops the aborted records (the plain ones produced inside an aborted transaction
    stay), and the uploaded range costs the broker no Fetch."""
    topic = new_topic(kafka.bootstrap, 2)
    # A timeout longer than the test: the last transaction stays open while Spark reads.
    txn = Producer(
        {
            "bootstrap.servers": kafka.bootstrap,
            "transactional.id": f"tx-{topic}",
            "linger.ms": 5,
            "transaction.timeout.ms": 600_000,
        }
    )
    txn.init_transactions(30)
    for round_ in range(6):
        txn.begin_transaction()
        for i in range(150):
            txn.produce(topic, value=f"txn-{round_}-{i}".encode(), key=f"t{i}".encode(), partition=i % 2)
        txn.flush(30)
        produce_mixed(kafka.bootstrap, topic, 100, partitions=2, start=100 * round_)
        if round_ % 2:
            txn.abort_transaction(30)
        else:
            txn.commit_transaction(30)
    produce_mixed(kafka.bootstrap, topic, 3000, partitions=2, start=600)
    txn.begin_transaction()
    for i in range(10):
        txn.produce(topic, value=f"open-{i}".encode(), partition=i % 2)
    txn.flush(30)

    def planned_with_aborts() -> list[DirectRange] | None:
        found = located(kafka, topic, 2, committed=True)
        ok = found is not None and all(t.committed is not None and len(t.committed.aborted) == 3 for t in found)
        return found if ok else None

    planned = eventually(planned_with_aborts, timeout=30, what=f"{topic}'s aborted transactions to be uploaded")
    ends = {t.offsets.partition: t.direct_end for t in planned}
    assert all(t.direct_end <= t.offsets.end for t in planned)  # planned up to the LSO
    ending = ", ".join(f'"{p}": {end}' for p, end in ends.items())
    committed = {"kafka.isolation.level": "read_committed"}
    before = settled_fetched_bytes(kafka, topic)
    got = direct_read(spark, kafka, topic, endingOffsets=f'{{"{topic}": {{{ending}}}}}', **committed)
    assert fetched_bytes(kafka, topic) == before
    assert got == without_headers(consume(kafka.bootstrap, topic, partitions=2, end=ends, isolation="read_committed"))
    values = [bytes(r[4]).decode() for r in got]
    assert sum(v.startswith("txn-") for v in values) == 3 * 150
    assert not any(v.startswith(("txn-1-", "txn-3-", "txn-5-")) for v in values)
    assert sum(v.startswith("value-") for v in values) == sum(ends.values()) - 6 * 150 - 6 * 2  # no markers
    whole = direct_read(spark, kafka, topic, **committed)
    assert whole == without_headers(consume(kafka.bootstrap, topic, partitions=2, isolation="read_committed"))
    assert not any(bytes(r[4]).startswith(b"open-") for r in whole)
    txn.abort_transaction(30)


def test_compacted_topic_reads_the_cleaned_stream_directly(spark: SparkSession, kafka: Cluster) -> None:
    """After a cleaner round, the cleaned prefix (fewer records, offsets unchanged) and the log stream after it are
    read from the bucket: the records a consumer reads, and no Fetch."""
    topic = new_topic(kafka.bootstrap, 1, {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"})
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 5, "acks": "all"})
    for i in range(3000):  # in ten rounds, so ten batches: the cleaner leaves the newest batch alone
        producer.produce(topic, key=f"key-{i % 300}".encode(), value=f"v{i}-".encode() + os.urandom(40).hex().encode())
        if i % 300 == 299:
            assert producer.flush(30) == 0
    eventually(
        lambda: len(consume(kafka.bootstrap, topic, partitions=1)) < 3000, timeout=30, what=f"{topic} to be compacted"
    )
    # No further round (new records are never old enough), so the plan and the consumer see one cleaned state.
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    lag = ConfigEntry("min.compaction.lag.ms", "86400000", incremental_operation=AlterConfigOpType.SET)
    for future in admin.incremental_alter_configs(
        [ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[lag])]
    ).values():
        future.result(timeout=15)

    def cleaned_and_uploaded() -> list[DirectRange] | None:
        # The switch to the cleaned stream is uploaded once later records fill the LogCache (keyed: the topic is
        # compacted, and a batch with a keyless record would be refused).
        produce_mixed(kafka.bootstrap, topic, 500, partitions=1, start=3000, null_keys=False)
        found = located(kafka, topic, 1)
        return found if found is not None and len({s.stream_id for s in found[0].slices}) == 2 else None

    planned = eventually(cleaned_and_uploaded, timeout=120, what=f"{topic}'s cleaned stream to be uploaded")
    ends = {0: planned[0].direct_end}
    expected = without_headers(consume(kafka.bootstrap, topic, partitions=1, end=ends))
    assert len(expected) < ends[0] - 500  # the cleaned part has gaps
    before = settled_fetched_bytes(kafka, topic)
    got = direct_read(spark, kafka, topic, endingOffsets=f'{{"{topic}": {{"0": {ends[0]}}}}}')
    assert fetched_bytes(kafka, topic) == before
    assert got == expected


def test_streaming_direct_reads_follow_new_data_a_moved_partition_and_a_broker_restart(
    spark: SparkSession, kafka: Cluster
) -> None:
    """A streaming query on the direct path: records that arrive while it runs, a partition reassigned to the other
    broker, and that broker restarted between batches: every record ends up in the sink exactly once (no gap, no
    duplicate)."""
    topic = new_topic(kafka.bootstrap, 2)
    produce_mixed(kafka.bootstrap, topic, 3000, partitions=2, codec="lz4")
    uploaded_head(kafka, topic, 2)
    name = f"direct_{topic.replace('-', '_')}"
    query = (
        spark.readStream.format("fjord")
        .option("kafka.bootstrap.servers", kafka.bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("fjord.object.store", object_store(kafka))
        .option("fjord.read", "direct")
        .load()
        .writeStream.format("memory")
        .queryName(name)
        .trigger(processingTime="1 second")
        .start()
    )
    admin = KafkaAdminClient(bootstrap_servers=kafka.bootstrap, request_timeout_ms=30000)
    try:
        query.processAllAvailable()
        produce_mixed(kafka.bootstrap, topic, 1000, partitions=2, start=3000)
        query.processAllAvailable()
        source = leaders(kafka.bootstrap, topic, 2)[0]
        target = next(b.spec.node_id for b in kafka.cluster.brokers if b.spec.node_id != source)
        moved = admin.alter_partition_reassignments({KafkaTopicPartition(topic, 0): [target]})
        assert moved == {KafkaTopicPartition(topic, 0): None}, moved
        eventually(lambda: leaders(kafka.bootstrap, topic).get(0) == target, timeout=30, what=f"{topic}-0 on {target}")
        produce_mixed(kafka.bootstrap, topic, 200, partitions=2, start=4000)
        query.processAllAvailable()
        broker = kafka.cluster.node(target)
        assert broker.stop(timeout=30) == 0, broker.log_text()
        broker.start()
        asyncio.run(wait_ready(kafka.cluster, READY_TIMEOUT_S))
        produce_mixed(kafka.bootstrap, topic, 200, partitions=2, start=4200)
        query.processAllAvailable()
    finally:
        admin.close()
        query.stop()
    got = rows(spark.sql(f"SELECT * FROM {name}"))
    assert got == without_headers(consume(kafka.bootstrap, topic, partitions=2))
    assert len(got) == 4400


def test_committed_view_pieces_and_the_read_committed_walk() -> None:
    """The pure parts: which aborted transactions a range needs and up to where they decide it, which stream holds
    which offsets of a compacted partition, and the walk that drops aborted batches and stops at the first
    transactional batch whose outcome is not known."""
    entries = [AbortedTxnEntry(7, 2, 5, 6), AbortedTxnEntry(8, 10, 20, 12), AbortedTxnEntry(7, 30, 40, 41)]
    view = committed_view(OffsetRange("t", 0, 6, 35), entries)
    assert view.aborted == (AbortedTxn(8, 10), AbortedTxn(7, 30)) and view.known_below == 41
    assert committed_view(OffsetRange("t", 0, 6, 35), []).known_below == 6

    compacted = PartitionStreams(log=1, cleaned=2, txn=-1, cleaner_offset=100)
    assert compacted.pieces(OffsetRange("t", 0, 40, 150)) == [(2, 40, 100), (1, 100, 150)]
    assert compacted.pieces(OffsetRange("t", 0, 120, 150)) == [(1, 120, 150)]
    assert compacted.pieces(OffsetRange("t", 0, 10, 60)) == [(2, 10, 60)]
    assert PartitionStreams(1, -1, -1).pieces(OffsetRange("t", 0, 0, 9)) == [(1, 0, 9)]

    def data(offset: int, pid: int, value: bytes, txn: bool = True) -> bytes:
        return build_batch(
            [Record(None, value)], base_offset=offset, producer_id=pid, producer_epoch=0, is_transactional=txn
        )

    def marker(offset: int, pid: int, commit: bool) -> bytes:
        record = Record(encode_marker_key(commit), encode_marker_value(0))
        return build_batch(
            [record], base_offset=offset, producer_id=pid, producer_epoch=0, is_control=True, is_transactional=True
        )

    log = b"".join(
        [
            data(0, 7, b"aborted-7"),
            data(1, 8, b"committed-8"),
            data(2, -1, b"plain", txn=False),
            marker(3, 7, commit=False),
            marker(4, 8, commit=True),
            data(5, 7, b"committed-7"),
            marker(6, 7, commit=True),
            data(7, -1, b"plain-after", txn=False),
            data(8, 9, b"unknown-9"),
            data(9, -1, b"never-reached", txn=False),
        ]
    )
    columns = Columns("t", 0, False, committed_view(OffsetRange("t", 0, 0, 10), [AbortedTxnEntry(7, 0, 3, 8)]))
    columns.add(log, 0, 10)
    assert columns.flush().column("value").to_pylist() == [b"committed-8", b"plain", b"committed-7", b"plain-after"]
    assert columns.stopped_at == 8
    uncommitted = Columns("t", 0, False)
    uncommitted.add(log, 1, 10)
    assert len(uncommitted) == 6 and uncommitted.stopped_at is None  # every data record from offset 1 on
