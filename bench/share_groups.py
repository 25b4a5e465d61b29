"""Share group benchmark (KIP-932, issue 22): the three figures of the issue's Performance section, with
confluent-kafka's ``ShareConsumer`` against ``fjord server start`` processes. Prints one Markdown table.

    .venv/bin/python bench/share_groups.py [--only slow,cache,restart] [--records 2000] [--work-ms 5]
                                           [--consumers 1,4,16] [--cache-records 100000] [--cache-rounds 3]
                                           [--restart-partitions 100] [--locks 10000] [--restarts 3]

``slow``: one partition, ``--records`` 1 KiB records; each consumer takes ``--work-ms`` per record (``time.sleep``
in its own thread: the sleep and librdkafka's poll both release the GIL, so the threads do not serialize). Each
run subscribes its consumers, waits until the group is settled (ShareGroupDescribe: every member assigned the
partition at the group epoch; a classic consumer: assigned), then produces the records and times from the first
produce to the last record processed. ``max.poll.records`` is 10, so a consumer holds at most 10 records' locks
at a time and the others find the rest available (librdkafka's default, 500, would give one consumer 2.5 s of
work while the others wait). The classic row is one ``Consumer`` doing the same work.

``cache``: ``--cache-records`` 1 KiB records in one partition, all in the broker's WAL cache (the cache is sized
to hold them), read ``--cache-rounds`` times by a classic ``Consumer`` (assigned from offset 0) and by one
``ShareConsumer`` per ``max.poll.records`` of :data:`POLL_RECORDS` (implicit acknowledgement: each poll accepts
what the previous one returned, piggy-backed on the next ShareFetch), doing no work; records/s of each from its
first record to its last, medians. The share consumer acquires, acknowledges (a durable share-state write per
acknowledgement) and is bounded by the window of in-flight records (``group.share.partition.max.record.locks``,
2,000 by default). librdkafka 2.16 sends ShareFetch v1, which is batch-optimized: each round trip acquires whole
record batches (the producer's are about 970 records here), so at 500 per poll a round trip still carries a whole
batch, and at 2,000 whole batches up to the one holding the 2,000th record (three: ~2,900 records), as Kafka 4.2
acquires.

What bounds the share figure is the client's loop, not a broker setting. librdkafka's share consumer (read in its
source of July 2026, the 2.15 line; the 2.16 this bench runs behaves so on the wire) sends ShareFetch v1 with
MaxWaitMs ``fetch.wait.max.ms``, MinBytes ``fetch.min.bytes`` (1: the broker answers as soon as it holds records),
MaxBytes ``fetch.max.bytes`` and MaxRecords = BatchSize = ``max.poll.records``; it has no setting to fetch ahead or
to fetch more per request. It asks for more records only once the application's queue is empty (one fetch in flight,
no prefetch), and the acknowledgements ride on that ShareFetch (a ShareAcknowledge goes only when there is nothing
to fetch; this bench's reads send none until the final commit). So each ~970 / ~2,900 records cost one serial round
trip: the application's polls, librdkafka's hops between its threads, the parse, and the broker's part, which must
wait for the acknowledgements' durable write (a response never reports an acknowledgement a crash could undo). The
response's layout costs the client nothing to spare: only the batches holding acquired records, and AcquiredRecords
ranges cut at batch boundaries every BatchSize records (one range per fetch here). On 2026-11-29, per round trip of
967 records at a load of about 3, the broker's part was 0.8-0.9 ms from request to response handed to the socket:
0.25 ms to take the request and apply its acknowledgements (which issues their write), 0.11 ms to acquire and read,
0.35-0.4 ms more waiting for the write (its whole path, loop -> WAL thread -> fdatasync -> loop, is 0.5 ms;
fdatasync alone 0.17 ms here), 0.05 ms to build the response; the socket write of the ~1 MB response after it is as
long as a classic fetch's. That is after the acquired batches stopped being copied on their way from the WAL cache
to the socket (two copies of every record per round trip: ~1 ms of the event loop per 3 MB) and the share state
stopped tracking changed records one offset at a time (applying and writing a 2,900-record acknowledgement took 0.8
ms, now 0.1); broker CPU per 100,000 records at 2,000 per poll went from 0.14-0.15 s to 0.10-0.115 s (medians of 8
drains each, interleaved), close to the classic read's; a raw client's ShareFetch round trips (acknowledging the
last fetch's records, send to response read, six runs each alternating with the code before at a load of 10-11) took
a median p50 of 5.7 ms against 8.6 at 500 records per fetch and 9.4 against 22.3 ms at 2,000 (that client, in
Python, reads slower than librdkafka). The ratio barely moved: most of a round trip is the client's. Other benches
kept the two shared cores at a load of 8-13 most of that evening (classic reads of the same data ranged
58,000-800,000 records/s, ratios 12-450% in both versions alike); in a lull at a load of 2-3, this bench alternating
with the code before gave 55% / 70% and 41% / 57% (500 / 2,000 per poll) against 46% / 59%, 39% / 45% and 42% / 57%,
with classic at 400,000-860,000 records/s; its share rounds gave medians of 309,000 against 300,000 records/s at 500
per poll and 420,000 against 397,000 at 2,000: one round trip per ~970 records still takes ~3 ms, of which the
broker's part is under 1 ms and the socket write. The last quiet-machine figures (load 0.3-2, before these changes)
were 37% at 500 per poll and 46-49% at 2,000, with classic at 920,000-1,000,000 records/s. On 2026-11-30 (timestamps
per ShareFetch in the broker against the client's next request, load about 2) a 500-per-poll round trip of ~967
records took 5.8 ms, 3.3 the broker's and 2.3 the client's; at 2,000, 4.0 and 6.0 of 10. Every response held all
the request allowed (whole batches up to MaxRecords, no wait on MaxWaitMs, one response). The broker's part was
serial: decoding and applying the acknowledgements (0.8), the acquisition (0.4) while their write waited for the
WAL's writer thread to get the GIL, the write (0.8), the hop back (0.3), building and encoding (0.4), the socket
write (0.4). The write now runs during the acquisition and the encoding (``WriteAheadLog.writes_begun``): over 15
interleaved runs at a load of 3-9 the broker's median per request went from 4.3 to 3.5 ms (500) and 6.0 to 5.3 ms
(2,000), the client's part unchanged; the ratios moved a few points at most (28-46% at 500 when classic read
300,000-500,000 records/s), the client's serial round trips and the broker's remaining ~3 ms bounding them.

``restart``: ``--restart-partitions`` partitions of ``--locks`` 16-byte records each; one raw share member
(ShareGroupHeartbeat and ShareFetch on its own connection, :class:`RawMember`) acquires every record and
acknowledges none (``group.share.partition.max.record.locks`` = ``--locks``, a lock of one hour). The broker is then
killed (-9) and started again on the same directories and ports, ``--restarts`` times; the member reconnects as the
same member and opens a new share session over its partitions. Figures from the new process's start: its first
500-record ShareFetch answered (librdkafka's ``max.poll.records``: serving again), the last of the partitions' share
state loaded (the broker log's ``share state of ... replayed`` lines), and a ShareFetch re-acquiring every record at
once answered (tens of MB, mostly its encoding and the bench's decoding). The broker runs as installed, its bytecode
compiled once (``kill_acks.as_installed``); about 0.8 s of each restart is still the Python process starting, and
the WAL recovery and partition opens come before the listener serves. Acquisitions are not persisted (as in Kafka),
so after the restart every record is available again; the member re-acquires them all before the next kill.
"""

from __future__ import annotations

import argparse
import base64
import datetime
import re
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]  # the repository's packages before this directory (bench/storage.py shadows ``storage``)

from confluent_kafka import Consumer, Producer, ShareConsumer, TopicPartition  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from kill_acks import as_installed  # noqa: E402  (this directory is on the path: the script's own)

from testkit.node_process import BrokerProcess, WireClient, start_broker  # noqa: E402
from testkit.waiting import eventually  # noqa: E402
from wire import codec, schema  # noqa: E402
from wire.ports import free_ports  # noqa: E402

FIND_COORDINATOR, SHARE_HEARTBEAT, SHARE_DESCRIBE, SHARE_FETCH = 10, 76, 77, 78
#: The share consumer's max.poll.records in the cached read: librdkafka's default, and the broker's default lock
#: window (group.share.partition.max.record.locks), which bounds what one fetch can acquire anyway.
POLL_RECORDS = (500, 2000)
RECORD = 1024
#: COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR: the group coordinator is still loading.
_COORDINATOR_LOADING = (14, 15, 16)
#: UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH: join again.
_FENCED = (25, 110)
TIMEOUT_S = 300.0
SHARE_OVERRIDES = {
    "group.share.heartbeat.interval.ms": "500",
    "group.share.min.heartbeat.interval.ms": "500",
    "group.consumer.heartbeat.interval.ms": "500",
    "group.consumer.min.heartbeat.interval.ms": "500",
    "group.initial.rebalance.delay.ms": "0",
}


@dataclass
class Row:
    what: str
    figure: str


# ---------------------------------------------------------------------------------------------- helpers


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"log_level": 3, "bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(timeout=60)


def share_group(bootstrap: str) -> str:
    """A new share group reading from the earliest offset (the default is latest)."""
    group = f"bench-share-{uuid.uuid4().hex[:8]}"
    entry = ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)
    admin = AdminClient({"log_level": 3, "bootstrap.servers": bootstrap})
    (future,) = admin.incremental_alter_configs(
        [ConfigResource(ResourceType.GROUP, group, incremental_configs=[entry])]
    ).values()
    future.result(timeout=30)
    return group


def produce(bootstrap: str, topic: str, count: int, size: int, partitions: int = 1) -> None:
    producer = Producer({"log_level": 3, "bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1_000_000,
                         "queue.buffering.max.kbytes": 1_048_576, "acks": "all"})
    errors: list[str] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    for i in range(count):
        value = i.to_bytes(8, "big") + b"x" * (size - 8)
        while True:
            try:
                producer.produce(topic, value=value, partition=i % partitions, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(TIMEOUT_S) or errors:
        raise SystemExit(f"produce failed: {errors[:3]}")


def share_settled(port: int, group: str, members: int) -> bool:
    """ShareGroupDescribe: ``members`` members, each assigned something at the group's epoch."""
    with WireClient(port) as client:
        request = schema.build(codec.request_class(SHARE_DESCRIBE, 1), group_ids=(group,),
                               include_authorized_operations=False)
        (described,) = client.request(request).groups
    return bool(
        described.error_code == 0
        and len(described.members) == members
        and described.group_epoch == described.assignment_epoch
        and all(m.member_epoch == described.group_epoch and m.assignment.topic_partitions
                for m in described.members)
    )


def broker(tmp: Path, overrides: dict[str, str]) -> BrokerProcess:
    return start_broker(tmp, {**SHARE_OVERRIDES, **overrides})


# ---------------------------------------------------------------------------------------------- slow consumers


class Work:
    """Records processed so far (by value), shared by the consumer threads of one run."""

    def __init__(self, records: int, work_s: float) -> None:
        self.records = records
        self.work_s = work_s
        self.lock = threading.Lock()
        self.seen: set[int] = set()
        self.done = threading.Event()
        self.stop = threading.Event()
        self.finished_at = 0.0

    def process(self, value: bytes) -> None:
        time.sleep(self.work_s)
        with self.lock:
            self.seen.add(int.from_bytes(value[:8], "big"))
            if len(self.seen) == self.records and not self.done.is_set():
                self.finished_at = time.monotonic()
                self.done.set()


def _share_worker(consumer: ShareConsumer, work: Work) -> None:
    while not work.stop.is_set():
        for message in consumer.poll(0.1):
            if message.error() is None:
                work.process(message.value() or b"")


def _classic_worker(consumer: Consumer, work: Work) -> None:
    while not work.stop.is_set():
        message = consumer.poll(0.1)
        if message is not None and message.error() is None:
            work.process(message.value() or b"")


def slow_run(b: BrokerProcess, consumers: int, args: argparse.Namespace, *, classic: bool) -> float:
    """Records/s of ``consumers`` consumers each taking ``--work-ms`` per record."""
    topic = f"bench-slow-{uuid.uuid4().hex[:8]}"
    create_topic(b.bootstrap, topic, 1)
    work = Work(args.records, args.work_ms / 1000)
    clients: list[Any] = []
    workers: Callable[[Any, Work], None]
    if classic:
        group = f"bench-classic-{uuid.uuid4().hex[:8]}"
        consumer = Consumer({"log_level": 3, "bootstrap.servers": b.bootstrap, "group.id": group,
                             "auto.offset.reset": "earliest", "enable.auto.commit": True})
        consumer.subscribe([topic])
        clients.append(consumer)
        eventually(lambda: bool(consumer.poll(0.05) is None and consumer.assignment()), timeout=60,
                   interval=0.01, what="the classic consumer's assignment")
        workers = _classic_worker
    else:
        group = share_group(b.bootstrap)
        for _ in range(consumers):
            share = ShareConsumer({"log_level": 3, "bootstrap.servers": b.bootstrap, "group.id": group,
                                   "max.poll.records": 10})
            share.subscribe([topic])
            clients.append(share)
        workers = _share_worker
    threads = [threading.Thread(target=workers, args=(c, work), daemon=True) for c in clients]
    for thread in threads:
        thread.start()
    try:
        if not classic:
            eventually(lambda: share_settled(b.port, group, consumers), timeout=60, interval=0.05,
                       what=f"{consumers} share consumers settled")
        started = time.monotonic()
        produce(b.bootstrap, topic, args.records, RECORD)
        if not work.done.wait(TIMEOUT_S):
            raise SystemExit(f"only {len(work.seen)} of {args.records} records processed")
        return float(args.records / (work.finished_at - started))
    finally:
        work.stop.set()
        for thread in threads:
            thread.join(timeout=30)
        for client in clients:
            client.close()


def bench_slow(args: argparse.Namespace) -> list[Row]:
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="fjord-share-bench-") as tmp:
        b = broker(Path(tmp), {})
        try:
            classic = slow_run(b, 1, args, classic=True)
            print(f"classic consumer: {classic:,.0f} records/s", flush=True)
            rows.append(Row(f"slow consumers ({args.work_ms} ms/record, {args.records} x 1 KiB, one partition): "
                            "one classic consumer", f"{classic:,.0f} records/s"))
            for n in args.consumers:
                rate = slow_run(b, n, args, classic=False)
                print(f"{n} share consumers: {rate:,.0f} records/s ({rate / classic:.1f}x)", flush=True)
                rows.append(Row(f"slow consumers: {n} share consumers", f"{rate:,.0f} records/s "
                                f"({rate / classic:.1f}x classic)"))
        finally:
            b.stop()
    return rows


# ---------------------------------------------------------------------------------------------- cached data


def _drain_classic(bootstrap: str, topic: str, records: int) -> float:
    consumer = Consumer({"log_level": 3, "bootstrap.servers": bootstrap,
                         "group.id": f"bench-read-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        got = 0
        started = 0.0
        deadline = time.monotonic() + TIMEOUT_S
        while got < records and time.monotonic() < deadline:
            for message in consumer.consume(1000, 0.5):
                if message.error() is None:
                    if not got:
                        started = time.monotonic()
                    got += 1
        if got < records:
            raise SystemExit(f"classic read {got} of {records}")
        return (records - 1) / (time.monotonic() - started)
    finally:
        consumer.close()


def _drain_share(bootstrap: str, topic: str, records: int, poll_records: int) -> float:
    group = share_group(bootstrap)
    consumer = ShareConsumer({"log_level": 3, "bootstrap.servers": bootstrap, "group.id": group,
                              "max.poll.records": poll_records})
    consumer.subscribe([topic])
    try:
        seen: set[int] = set()
        started = 0.0
        deadline = time.monotonic() + TIMEOUT_S
        while len(seen) < records and time.monotonic() < deadline:
            for message in consumer.poll(0.5):
                if message.error() is None:
                    if not seen:
                        started = time.monotonic()
                    seen.add(message.offset() or 0)
        if len(seen) < records:
            raise SystemExit(f"share read {len(seen)} of {records}")
        elapsed = time.monotonic() - started
        consumer.poll(0.1)  # acknowledges the last poll's records
        consumer.commit_sync(10)
        return (records - 1) / elapsed
    finally:
        consumer.close()


def bench_cache(args: argparse.Namespace) -> list[Row]:
    size_mb = args.cache_records * RECORD // (1 << 20) + 64
    with tempfile.TemporaryDirectory(prefix="fjord-share-bench-") as tmp:
        b = broker(Path(tmp), {"s3.wal.cache.size": f"{size_mb * 2}MiB", "s3.wal.upload.threshold": f"{size_mb}MiB"})
        try:
            topic = "bench-cache"
            create_topic(b.bootstrap, topic, 1)
            produce(b.bootstrap, topic, args.cache_records, RECORD)
            classic: list[float] = []
            share: dict[int, list[float]] = {n: [] for n in POLL_RECORDS}
            for _ in range(args.cache_rounds):
                classic.append(_drain_classic(b.bootstrap, topic, args.cache_records))
                for n in POLL_RECORDS:
                    share[n].append(_drain_share(b.bootstrap, topic, args.cache_records, n))
                print(f"cached read: classic {classic[-1]:,.0f}, share "
                      f"{', '.join(f'{v[-1]:,.0f} ({n} per poll)' for n, v in share.items())} records/s", flush=True)
        finally:
            b.stop()
    c = statistics.median(classic)
    rows = [Row(f"cached read, {args.cache_records:,} x 1 KiB, one partition, median of {args.cache_rounds}: classic "
                "fetch", f"{c:,.0f} records/s")]
    for n, rates in share.items():
        s = statistics.median(rates)
        rows.append(Row(f"cached read: share fetch + acknowledge, max.poll.records {n}", f"{s:,.0f} records/s "
                        f"({s / c:.0%} of classic)"))
    return rows


# ---------------------------------------------------------------------------------------------- restart


def _restart_overrides(port: int, controller_port: int, locks: int) -> dict[str, str]:
    return {
        "controller.quorum.voters": f"0@127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "group.share.partition.max.record.locks": str(locks),
        "group.share.record.lock.duration.ms": "3600000",
        "group.share.max.record.lock.duration.ms": "3600000",
    }


class RawMember:
    """A share group member on a raw connection (ShareGroupHeartbeat, ShareFetch v1) that acquires records and
    never acknowledges them: the in-flight locks the restart figure is about. (confluent-kafka's ShareConsumer
    cannot: in explicit mode it refuses to poll again before the last poll's records are acknowledged, and it
    acknowledges what it polled when it closes.) Across a broker restart it reconnects and carries on as the same
    member, as a client does."""

    def __init__(self, port: int, group: str, topic: str) -> None:
        self.port, self.group, self.topic = port, group, topic
        self.client: WireClient | None = None
        self.member = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        self.epoch = 0
        self.session_epoch = 0
        self.assignment: dict[uuid.UUID, tuple[int, ...]] = {}
        #: When the last ShareFetch was sent, and the record bytes its answer carried.
        self.sent = 0.0
        self.answered_bytes = 0

    def _wire(self) -> WireClient:
        assert self.client is not None
        return self.client

    def connect(self) -> None:
        """Connects (retrying while the broker starts) and waits for the group's coordinator."""
        if self.client is not None:
            self.client.close()
        self.client = None

        def found() -> bool:  # the coordinator creates and loads its topic on the first FindCoordinator
            if self.client is None:
                self.client = WireClient(self.port, timeout=120)
            request = schema.build(codec.request_class(FIND_COORDINATOR, 4), key_type=0,
                                   coordinator_keys=(self.group,))
            (coordinator,) = self.client.request(request).coordinators
            return bool(coordinator.error_code == 0)

        eventually(found, timeout=TIMEOUT_S, interval=0.01, retry_on=(OSError,),
                   what=f"a coordinator for {self.group}")
        self.session_epoch = 0

    def heartbeat(self) -> bool:
        """One heartbeat; False while the coordinator loads (or after a fence, which rejoins at epoch 0)."""
        response = self._wire().request(schema.build(
            codec.request_class(SHARE_HEARTBEAT, 1), group_id=self.group, member_id=self.member,
            member_epoch=self.epoch, rack_id=None, subscribed_topic_names=(self.topic,),
        ))
        if response.error_code in _FENCED:
            self.epoch = 0
            return False
        if response.error_code in _COORDINATOR_LOADING:
            return False
        if response.error_code:
            raise SystemExit(f"ShareGroupHeartbeat failed: {response.error_code}")
        self.epoch = response.member_epoch
        if response.assignment is not None:
            self.assignment = {tp.topic_id: tuple(tp.partitions) for tp in response.assignment.topic_partitions}
        return True

    def join(self, partitions: int) -> None:
        eventually(lambda: self.heartbeat() and sum(len(p) for p in self.assignment.values()) == partitions,
                   timeout=60, interval=0.05, what="the raw member's assignment")

    def fetch_until(self, done: Callable[[dict[int, int]], bool], max_records: int = 1 << 30,
                    counts: dict[int, int] | None = None) -> dict[int, int]:
        """ShareFetches (a new share session, its partitions the assignment) until ``done(records acquired per
        partition)``; returns those counts."""
        ((topic_id, assigned),) = self.assignment.items()
        cls = codec.request_class(SHARE_FETCH, 1)
        topic_cls = schema.field_entity(cls, "topics")
        part_cls = schema.field_entity(topic_cls, "partitions")
        topics = (schema.build(topic_cls, topic_id=topic_id, partitions=tuple(
            schema.build(part_cls, partition_index=p, acknowledgement_batches=()) for p in assigned)),)
        counts = {} if counts is None else counts
        deadline = time.monotonic() + TIMEOUT_S
        while not done(counts):
            if time.monotonic() > deadline:
                raise SystemExit(f"acquired only {sum(counts.values())} records of {len(counts)} partitions")
            self.sent = time.monotonic()
            response = self._wire().request(schema.build(
                cls, group_id=self.group, member_id=self.member, share_session_epoch=self.session_epoch,
                max_wait=100, min_bytes=1, max_bytes=64 << 20, max_records=max_records,
                batch_size=min(max_records, 10_000),
                topics=topics if self.session_epoch == 0 else (), forgotten_topics_data=(),
            ))
            if response.error_code:
                raise SystemExit(f"ShareFetch failed: {response.error_code}")
            self.session_epoch += 1
            self.answered_bytes = 0
            for topic in response.responses:
                for part in topic.partitions:
                    self.answered_bytes += len(part.records or b"")
                    got = sum(r.last_offset - r.first_offset + 1 for r in part.acquired_records)
                    if got:
                        counts[part.partition_index] = counts.get(part.partition_index, 0) + got
        return counts


_LOADED = re.compile(r"^(\S+ \S+) INFO +broker\.share\.store: \S+: share state of", re.MULTILINE)


def _wall(stamp: str) -> float:
    """A node log line's timestamp (local time, milliseconds) as seconds since the epoch."""
    return datetime.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S.%f").timestamp()


def bench_restart(args: argparse.Namespace) -> list[Row]:
    parts, locks = args.restart_partitions, args.locks
    topic = "bench-restart"
    times: list[float] = []
    asked: list[float] = []
    first: list[float] = []
    last_loaded: list[float] = []

    def held(counts: dict[int, int]) -> bool:
        return len(counts) == parts and min(counts.values()) >= locks

    with tempfile.TemporaryDirectory(prefix="fjord-share-bench-") as tmp:
        as_installed(Path(tmp) / "bytecode")  # 3.18 s against 1.93 s to serving again on 2026-12-01
        port, controller_port = free_ports(2)
        overrides = _restart_overrides(port, controller_port, locks)
        b = broker(Path(tmp), overrides)
        try:
            create_topic(b.bootstrap, topic, parts)
            started = time.monotonic()
            produce(b.bootstrap, topic, parts * locks, 16, partitions=parts)
            print(f"produced {parts * locks:,} records in {time.monotonic() - started:.1f} s", flush=True)
            group = share_group(b.bootstrap)
            started = time.monotonic()
            member = RawMember(port, group, topic)
            member.connect()
            member.join(parts)
            counts = member.fetch_until(held)
            print(f"acquired {sum(counts.values()):,} records over {len(counts)} partitions in "
                  f"{time.monotonic() - started:.1f} s", flush=True)
            for restart in range(args.restarts):
                b.kill()
                began, began_wall = time.monotonic(), time.time()
                b = broker(Path(tmp), overrides)
                answered = time.monotonic() - began
                member.connect()
                eventually(member.heartbeat, timeout=60, interval=0.01, what="the member's heartbeat")
                served: list[float] = []

                def done(counts: dict[int, int], served: list[float] = served, began: float = began) -> bool:
                    if not served and len(counts) == parts:
                        served += [time.monotonic() - began, member.sent - began, member.answered_bytes / 1e6]
                    return held(counts)  # every lock held again for the next restart

                counts = member.fetch_until(bool, max_records=500)  # a consumer's fetch (librdkafka asks 500)
                first.append(time.monotonic() - began)
                member.fetch_until(done, counts=counts)
                loaded = [_wall(m) - began_wall for m in _LOADED.findall(b.log_text())]
                last_loaded.append(max(loaded))
                times.append(served[0])
                asked.append(served[1])
                print(f"restart {restart}: ApiVersions after {answered:.2f} s, first 500 records after "
                      f"{first[-1]:.2f} s, every share partition loaded after {last_loaded[-1]:.2f} s", flush=True)
                print(f"restart {restart}: the ShareFetch answering records of "
                      f"all {parts} partitions sent after {served[1]:.2f} s, answered after {served[0]:.2f} s "
                      f"({served[2]:.0f} MB of records)", flush=True)
        finally:
            b.stop()
    def spread(values: list[float]) -> str:
        return f"{statistics.median(values):.2f} s ({', '.join(f'{t:.2f}' for t in values)})"

    what = f"restart with {parts} share partitions x {locks:,} in-flight locks (kill -9), median of {len(times)}:"
    return [
        Row(f"{what} process start to a 500-record ShareFetch answered", spread(first)),
        Row(f"{what} process start to every share partition loaded (broker log)", spread(last_loaded)),
        Row(f"{what} process start to one ShareFetch re-acquiring all {parts * locks:,} records answered (sent "
            f"after {statistics.median(asked):.2f} s)", spread(times)),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="slow,cache,restart")
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--work-ms", type=float, default=5.0)
    parser.add_argument("--consumers", type=lambda s: [int(x) for x in s.split(",")], default=[1, 4, 16])
    parser.add_argument("--cache-records", type=int, default=100_000)
    parser.add_argument("--cache-rounds", type=int, default=3)
    parser.add_argument("--restart-partitions", type=int, default=100)
    parser.add_argument("--locks", type=int, default=10_000)
    parser.add_argument("--restarts", type=int, default=3)
    args = parser.parse_args()
    only = set(args.only.split(","))
    rows: list[Row] = []
    if "slow" in only:
        rows += bench_slow(args)
    if "cache" in only:
        rows += bench_cache(args)
    if "restart" in only:
        rows += bench_restart(args)
    print()
    print("| what | figure |")
    print("|---|---|")
    for row in rows:
        print(f"| {row.what} | {row.figure} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
