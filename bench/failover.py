"""S3 WAL failover benchmark (issue 25): a broker killed -9 with ~500 MiB only in its S3 WAL, until its partitions
serve on another broker.

A cluster of one controller and two brokers (``node.local_cluster``, ``s3.wal.path`` on a bucket of a moto S3
server run in its own process, as the tests' ``s3_server``) with ``s3.wal.upload.threshold`` raised to
``--upload-threshold-mb`` and no upload timer, so everything the victim acknowledged before the kill lives only in
its S3 WAL. Each run fills the victim's partitions with ``--wal-mb`` MiB of 1 KiB records, kills it (-9), and
measures from the node logs' wall-clock timestamps and a probe producer:

- ``fenced``: death -> the controller fences the victim (its session timeout, ``broker.session.timeout.ms``, set to
  ``--session-ms``, plus up to a heartbeat check);
- ``replay``: on the taking-over broker, its "replays the WAL of broker" line -> its "WAL failover of broker ... done"
  line (the replay proper: read the dead WAL, make the records servable, report the failover done);
- ``serves``: death -> every partition the victim led accepts a produce (``acks=all``) on its new leader;
- ``WAL MB``: what the victim's WAL held at the kill (the replay's "batches" line gives the count);
- ``objects copied in place``: the WAL objects the replay copied inside S3 and committed as they are
  (``storage.failover_copy``); 0 when it replayed record by record (WAL objects of an older Fjord);
- Fjord's part against the S3 server's, from the replaying broker's "replay read" (``storage.wal.s3``, record by
  record only) and "replay timing" (``storage.failover_replay``) lines: its CPU over the replay (every thread; ms per
  MiB), how long the replay waited for GETs and for uploads (in place: commits waiting for copies), and, right after
  the run, moto alone: boto3 PUTs, GETs, then CopyObjects of 8 x 8 MiB, 4 in flight, as MB/s, and the seconds those
  rates need for the WAL: copy it once (in place), or serve it once and store it once (record by record; moto is one
  process, GETs and PUTs share it, so the sum is its floor).

    .venv/bin/python bench/failover.py [--wal-mb 500] [--runs 3] [--partitions 4] [--session-ms 4000]
                                      [--upload-threshold-mb 1024] [--keep-logs DIR]

Figures (2026-11-29, the 2-core machine shared with other helpers' work at a load average of 10-25, which moves
every figure by 2-3x between runs; 500 MiB, 4 partitions, session 4 s), three runs each:

| code | death -> fenced | replay (start -> end) | death -> produce on new leader |
|---|---|---|---|
| before, first set (load 8-14) | 3.71 / 3.64 / 3.20 s | 63.25 / 60.61 / 140.75 s | 78.67 / 73.95 / 159.14 s |
| before, second set (load 10-16) | 3.43 / 3.85 / 3.46 s | 25.70 / 27.45 / 56.33 s | 33.00 / 37.63 / 66.25 s |
| after (load 10-17) | 3.38 / 3.63 / 3.45 s | 47.96 / 20.25 / 14.61 s | 54.00 / 25.75 / 19.64 s |

Before, the replay read the whole WAL into one block (the upload threshold's size) and only then uploaded it, and
decoded on the event loop without a break: in two runs of the first set the replaying broker missed its heartbeats
for 4 s, was fenced itself, and the failover was reassigned and replayed twice. After, 64 MiB blocks upload while
the next ones are read and the loop runs between records; no replaying broker lost its session in 6 runs (100 and
500 MiB).

With the phases logged (same day, later; load 10-12, two runs each; CPU is the replaying broker's, all threads):

| code | replay 500 MiB | broker CPU (ms/MiB) | waited GETs, uploads | moto alone GET, PUT MB/s: floor |
|---|---|---|---|---|
| before | 15.55 / 17.35 s | 3.39 / 3.62 s (6.8 / 7.2) | 2.8, 0 / 4.0, 0 s | 183, 29: 21.2 s / 255, 60: 10.8 s |
| after | 21.81 / 19.76 s | 3.27 / 3.37 s (6.5 / 6.7) | 3.3, 0.2 / 1.6, 1.5 s | 92, 25: 26.8 s / 173, 29: 21.1 s |

(before: 64 MiB blocks whose PUTs ran one block at a time, 4 GETs ahead, botocore's CRC32 on every PUT and full GET;
after: 32 MiB blocks PUT side by side, 8 GETs ahead, a CRC32C computed in hardware.)

The unchanged code, before the phases were logged, replayed 500 MiB in 6.13 / 24.85 s (load 2-9), and 100 MiB in
1.05 / 1.37 s at a load of 0.1 (moto and the broker not starved of CPU). So: the
replay takes about what moto alone needs for the same bytes, and the broker's own CPU is ~3.3 s per 500 MiB, which
on this machine (2 cores, load ~11: a process gets ~1/5 of a core) stretches to most of the wall time anyway. Of
those ~6.5 ms/MiB: decoding the WAL 0.35 ms/MiB, building objects (in threads) and the rest the HTTP client on the
event loop (measured alone: GET bodies ~2 ms/MiB, aiohttp reading and joining; PUTs ~3 ms/MiB, most of it the SHA-256
of the payload that botocore signs over plain HTTP, moto's endpoint: over HTTPS S3 takes an unsigned payload with the
checksum instead). The CRC32 botocore computed on the loop for every PUT and full GET (~0.5 ms/MiB each way) is gone.

What bounds the replay here is moto, run in one process on the same two cores: at a load of 25 it stores about
8 MB/s and serves about 10 MB/s (32 MiB PUT and GET, boto3 and the broker's aiobotocore client alike), so the
upload of 500 MiB before the streams can be closed takes tens of seconds whatever the broker does, and even a
replay that served from the LogCache before uploading would need as long to read the WAL. ``serving`` adds to
fence + replay the new leaders' own open (their partition-log recovery reads what followed their last checkpoint
back from S3, 13 MB per partition) and the probe client finding them: 1.6-15 s here.

In place (issue 25, 2026-11-30): S3 WAL objects are now written in Fjord's object format (v2,
``storage/wal/s3_format.py``), so the replay reads each object's index (one tail GET), copies the object inside S3
(CopyObject) to a data key and commits it: no WAL byte passes through the replaying broker. Interleaved runs, one at
a time, 500 MiB (1176 batches in 135 WAL objects), 4 partitions, session 4 s, the 2-core machine at a load of 8-10:

| code | replay (start -> end) | death -> produce on new leader | broker CPU (ms/MiB) | moto alone (floor) |
|---|---|---|---|---|
| before (record by record) | 17.84 / 17.03 s | 24.55 / 23.46 s | 6.21 / 6.08 s (12.4 / 12.2) | GET+PUT 13.0 / 14.5 s |
| after (in place) | 10.73 / 9.62 s | 17.99 / 17.14 s | 3.00 / 3.44 s (6.0 / 6.9) | copy 6.3 / 5.2 s |

Where the in-place replay's ~10 s go (its timing line): opening the WAL (reservation, listing) ~1 s; reading the
135 indexes 2.7 s (moto reads a whole object for any ranged GET, so even a tail GET costs it the object); the copies,
which commits waited for ~1 s in all (moto copies 40-100 MB/s in one process, whatever the concurrency: CopyObject of
64 x 8 MiB took 7.2 s with 1 in flight, 10.5 s with 4, 10.7 s with 8, at a load of 6-10); and 135 commits, one after
another since each must start at the end the previous one committed, ~35-40 ms each at the controller here (4.7-5.5
s). The bytes are no longer what bounds it: the commits and moto's per-request cost are. The issue's 1 s would need
fewer metadata commits (several WAL objects committed in one) and the index reads overlapped with the commits; on S3
itself a CopyObject of 8 MiB is server-side, and many run in parallel (``COPIES_IN_FLIGHT``).

Batched commits and overlap (2026-11-30, later): the copied objects are committed many per controller call
(``commit_stream_set_objects``, one metadata append), each object planned and copied as soon as its index and its
predecessors' are read; the failover's WAL borrows the broker's own WAL store (no new S3 client). Interleaved runs,
one at a time, 500 MiB in 135 WAL objects, load 6-11 (moto's own copy rate after each run: 44-314 MB/s):

| code | replay (start -> end) | WAL opened | commits (calls, summed s) |
|---|---|---|---|
| before | 6.13 / 15.64 / 25.33 / 17.45 / 17.24 s | 0.59-2.86 s | 135, 2.6-5.7 s |
| batched + overlapped, own S3 client | 12.74 / 8.18 / 13.17 s | 0.68-1.19 s | 56-61, 2.3-5.0 s |
| same, indexes all read before planning | 11.84 s | 1.50 s | 49, 2.3 s |
| batched + overlapped, WAL store borrowed | 6.85 / 6.89 / 6.91 s | 0.18-0.39 s | 36-47, 1.2-3.3 s |

The commits no longer bound the replay: the committer waits for copies (2.4-8.9 s of its time) and its calls run
while the copies do. What is left is moto's: the index reads (each a whole-object read in moto) and the copies, both
in one process, ~1 GB of work for 500 MiB; overlapping them cannot beat that here. On S3 a tail GET and a CopyObject
cost a request each, in parallel.

On merged ``main`` at a load of 1.5-2.3 (one run, 500 MiB, 135 objects): fenced 3.57 s after the death, replay
3.60 s (commits 0.80 s summed, 2.46 s waiting for copies), produce on the new leader 8.89 s after the death; moto
alone would need 1.90 s to copy this WAL at the rate it showed after the run.

Again on ``main`` (2026-12-01, load 0.9-1.4, one run, 500 MiB in 135 objects): fenced 3.68 s after the death, replay
2.25 s (57 commit calls, 0.28 s summed; 1.78 s waiting for copies; moto alone: 1.44 s to copy this WAL), produce on
the new leader 7.35 s after the death. The 1.42 s between the replay's end and that produce, from the new leader's
"opened ..." line: its streams opened 0.03 s after the replay closed them (the open retries every 100 ms while
another node holds them), the meta stream's replay 0.23 s and the partition-log recovery 0.62 s (13 MB per partition
since the last checkpoint, read back from moto, which reads a whole object for any ranged GET), the open's meta
entries 0.26 s (the S3 WAL's 250 ms batch), then the probe producer finding the new leader 0.26 s.

Again on ``main`` (2026-12-02, a faster machine, load 0.5-1.6, three runs, 500 MiB in 135 objects): fenced 3.53-3.99 s
after the death, replay 1.65 / 1.73 / 1.79 s (1.28-1.41 s of it waiting for copies; commits 0.22-0.25 s summed; the
broker's CPU 0.64-0.67 s, 1.3 ms/MiB), produce on the new leader 6.46-6.68 s after the death; moto alone needed
1.50-1.57 s to copy this WAL at the rates it showed after each run. The replay is moto's copy time plus about 0.2 s.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]  # the repository's packages before this directory (bench/storage.py shadows ``storage``)

import boto3  # noqa: E402
from confluent_kafka import KafkaError, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402
from confluent_kafka.cimpl import NewTopic  # noqa: E402

from node.local_cluster import LocalCluster, NodeProcess, plan_cluster, wait_ready  # noqa: E402
from wire.ports import free_ports  # noqa: E402

TOPIC = "failover-bench"
RECORD = 1024
TIMEOUT_S = 180.0
_STAMP = r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+)"
_FENCED = re.compile(_STAMP + r".*broker (\d+) \(epoch \d+\) fenced;", re.MULTILINE)
_REPLAY_START = re.compile(_STAMP + r".*broker (\d+) replays the WAL of broker (\d+)", re.MULTILINE)
_REPLAY_END = re.compile(_STAMP + r".*WAL failover of broker (\d+) done by broker (\d+): (\d+) batches", re.MULTILINE)
_READ = re.compile(_STAMP + r".*failover of node (\d+), .*replay read \d+ object\(s\), ([\d.]+) MiB in ([\d.]+) s: "
                   r"GETs ([\d.]+) s summed .*?([\d.]+) s waiting for them, decoding ([\d.]+) s CPU", re.MULTILINE)
_TIMING = re.compile(_STAMP + r".*replay timing of node (\d+) .*? (\d+) (WAL objects copied in place|blocks), .*"
                     r"waiting for uploads ([\d.]+) s; .*PUT ([\d.]+) s \(([\d.]+) MiB\), commit ([\d.]+) s; "
                     r"CPU ([\d.]+) s process, ([\d.]+) s event loop", re.MULTILINE)
MOTO_PROBE_OBJECT = 8 * 1024 * 1024
MOTO_PROBE_OBJECTS = 8
MOTO_PROBE_IN_FLIGHT = 4


@dataclass
class Run:
    run: int
    wal_mb: float
    fenced_s: float
    replay_s: float
    serves_s: float
    batches: int
    get_wait_s: float  # the replay waiting for WAL GETs (moto's part of reading)
    upload_wait_s: float  # the replay waiting for uploads (moto's part of storing)
    cpu_s: float  # the replaying broker's CPU over the replay (every thread)
    decode_cpu_s: float
    moto_get_mbs: float  # moto alone, boto3 GETs right after the run
    moto_put_mbs: float
    moto_copy_mbs: float  # moto alone, boto3 CopyObjects right after the run
    copied: int  # WAL objects copied in place (0: replayed record by record, read and uploaded)

    @property
    def cpu_ms_per_mib(self) -> float:
        return 1000 * self.cpu_s / max(self.wal_mb, 1e-9)

    @property
    def moto_s(self) -> float:
        """What moto alone needs for this WAL at the rates it showed boto3: copy it once (in place), or serve it
        once and store it once (record by record)."""
        mb = self.wal_mb * 1.048576
        if self.copied:
            return mb / self.moto_copy_mbs
        return mb / self.moto_get_mbs + mb / self.moto_put_mbs


class MotoServer:
    """moto's S3 server in its own process (the broker processes and this driver do not share its GIL)."""

    def __init__(self) -> None:
        (self.port,) = free_ports(1)
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(self.endpoint, timeout=1).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def bucket_url(self) -> str:
        name = f"failover-bench-{int(time.time() * 1000)}"
        boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1", aws_access_key_id="testing",
                     aws_secret_access_key="testing").create_bucket(Bucket=name)
        return (f"0@s3://{name}?region=us-east-1&endpoint={self.endpoint}&pathStyle=true"
                "&accessKey=testing&secretKey=testing")

    def raw_rates(self) -> tuple[float, float, float]:
        """moto's own speed, no broker involved: MB/s of boto3 PUTs, GETs, then CopyObjects of
        ``MOTO_PROBE_OBJECTS`` objects of 8 MiB (the WAL's object size) with ``MOTO_PROBE_IN_FLIGHT`` in flight, as
        the replay reads or copies them."""
        client = boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1", aws_access_key_id="testing",
                              aws_secret_access_key="testing")
        bucket = f"failover-bench-probe-{int(time.time() * 1000)}"
        client.create_bucket(Bucket=bucket)
        body = b"x" * MOTO_PROBE_OBJECT
        keys = [f"probe/{i}" for i in range(MOTO_PROBE_OBJECTS)]
        mb = MOTO_PROBE_OBJECT * MOTO_PROBE_OBJECTS / 1e6
        with ThreadPoolExecutor(MOTO_PROBE_IN_FLIGHT) as pool:
            started = time.perf_counter()
            list(pool.map(lambda k: client.put_object(Bucket=bucket, Key=k, Body=body), keys))
            put = mb / (time.perf_counter() - started)
            started = time.perf_counter()
            list(pool.map(lambda k: client.get_object(Bucket=bucket, Key=k)["Body"].read(), keys))
            get = mb / (time.perf_counter() - started)
            started = time.perf_counter()
            list(pool.map(lambda k: client.copy_object(Bucket=bucket, Key=f"copy/{k}",
                                                       CopySource={"Bucket": bucket, "Key": k}), keys))
            copy = mb / (time.perf_counter() - started)
        doomed = [*keys, *(f"copy/{k}" for k in keys)]
        client.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in doomed]})
        return get, put, copy

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def _producer(bootstrap: str, **extra: Any) -> Producer:
    return Producer({
        "bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20, "batch.size": 1_000_000,
        "queue.buffering.max.kbytes": 262144, "message.timeout.ms": int(TIMEOUT_S * 1000),
        "reconnect.backoff.ms": 10, "reconnect.backoff.max.ms": 50, "retry.backoff.ms": 20,
        "retry.backoff.max.ms": 50, "topic.metadata.refresh.interval.ms": 200, **extra,
    })


def _leaders(bootstrap: str, partitions: int) -> dict[int, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + 60
    while True:
        found = admin.list_topics(topic=TOPIC, timeout=10).topics.get(TOPIC)
        got = {} if found is None or found.error is not None else {p.id: p.leader for p in found.partitions.values()}
        if len(got) == partitions and min(got.values()) >= 0:
            return got
        if time.monotonic() > deadline:
            raise SystemExit(f"{TOPIC} has no leaders: {got}")
        time.sleep(0.2)


def _fill(bootstrap: str, partitions: list[int], mib: int) -> None:
    producer = _producer(bootstrap, **{"enable.idempotence": True})
    payload = b"x" * RECORD
    errors: list[str] = []

    def delivered(err: KafkaError | None, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    for i in range(mib * 1024 * 1024 // RECORD):
        while True:
            try:
                producer.produce(TOPIC, value=payload, partition=partitions[i % len(partitions)],
                                 on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    remaining = producer.flush(300)
    if remaining or errors:
        raise SystemExit(f"{remaining + len(errors)} records not acknowledged, e.g. {errors[:3]}")


def _probe(bootstrap: str, partitions: list[int], killed_at: float) -> float:
    """Seconds from ``killed_at`` until one record on each of ``partitions`` is acknowledged (by its new leader)."""
    producer = _producer(bootstrap)
    acked: list[int] = []
    failed: list[str] = []

    def delivered(err: KafkaError | None, msg: Any) -> None:
        (failed.append(str(err)) if err is not None else acked.append(msg.partition()))

    for p in partitions:
        producer.produce(TOPIC, value=b"probe", partition=p, on_delivery=delivered)
    if producer.flush(TIMEOUT_S) or failed:
        raise SystemExit(f"probe records not acknowledged within {TIMEOUT_S:.0f} s: {failed[:3]}")
    return time.monotonic() - killed_at


def _wall(stamp: str) -> float:
    return datetime.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S.%f").timestamp()


def _after(pattern: re.Pattern[str], text: str, since: float, **match: int) -> tuple[float, tuple[str, ...]] | None:
    """The first line of ``pattern`` stamped at or after ``since`` whose numbered groups equal ``match``."""
    for m in pattern.finditer(text):
        if _wall(m.group(1)) >= since - 0.01 and all(int(m.group(int(k[1:]))) == v for k, v in match.items()):
            return _wall(m.group(1)), m.groups()
    return None


def _logs(nodes: list[NodeProcess]) -> str:
    return "\n".join(n.log_text(tail=10**9) for n in nodes)


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def one_run(run: int, root: Path, moto: MotoServer, args: argparse.Namespace) -> Run:
    store = moto.bucket_url()
    threshold = args.upload_threshold_mb
    extra = {
        "broker.session.timeout.ms": str(args.session_ms),
        "broker.heartbeat.interval.ms": str(max(100, args.session_ms // 8)),
        "s3.wal.upload.interval.ms": "3600000",
        "s3.wal.upload.threshold": f"{threshold}MiB",
        "s3.wal.cache.size": f"{2 * threshold}MiB",
        "s3.wal.capacity": f"{4 * threshold}MiB",
        "autobalancer.controller.enable": "false",
        "controlled.shutdown.enable": "false",
    }
    cluster = LocalCluster(plan_cluster(root, controllers=1, brokers=2, object_store=store, wal="s3", extra=extra))
    cluster.start_all()
    try:
        asyncio.run(wait_ready(cluster, 120))
        bootstrap = cluster.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(TOPIC, args.partitions * 2, 1)])[TOPIC].result(timeout=30)
        placement = _leaders(bootstrap, args.partitions * 2)
        victim = placement[0]
        mine = sorted(p for p, leader in placement.items() if leader == victim)
        survivor = next(b for b in cluster.brokers if b.spec.node_id != victim)
        started = time.monotonic()
        _fill(bootstrap, mine, args.wal_mb)
        print(f"run {run}: filled partitions {mine} of broker {victim} with {args.wal_mb} MiB in "
              f"{time.monotonic() - started:.1f} s", flush=True)
        cluster.node(victim).kill()
        killed_at, killed_wall = time.monotonic(), time.time()
        serves = _probe(survivor.spec.address, mine, killed_at)
        deadline = time.monotonic() + TIMEOUT_S
        while (end := _after(_REPLAY_END, _logs(cluster.brokers), killed_wall, g2=victim)) is None:
            if time.monotonic() > deadline:
                raise SystemExit(f"no failover of broker {victim} done:\n{cluster.logs()}")
            time.sleep(0.2)
        fenced = _after(_FENCED, _logs(cluster.controllers), killed_wall, g2=victim)
        start = _after(_REPLAY_START, _logs(cluster.brokers), killed_wall, g3=victim)
        read = _after(_READ, _logs(cluster.brokers), killed_wall, g2=victim)
        timing = _after(_TIMING, _logs(cluster.brokers), killed_wall, g2=victim)
        if fenced is None or start is None or timing is None:
            raise SystemExit(f"missing fence, replay or timing line:\n{cluster.logs()}")
        moto_get, moto_put, moto_copy = moto.raw_rates()
        # In place, the WAL is never read: no "replay read" line.
        _, (_, _, read_mib, read_s, get_sum, get_wait, decode) = read or (0, ("", "", "0", "0", "0", "0", "0"))
        _, (_, _, objects, mode, upload_wait, put_sum, put_mib, commit, cpu, loop_cpu) = timing
        copied = int(objects) if mode.startswith("WAL objects") else 0
        row = Run(run, float(args.wal_mb), fenced[0] - killed_wall, end[0] - start[0], serves, int(end[1][3]),
                  float(get_wait), float(upload_wait), float(cpu), float(decode), moto_get, moto_put, moto_copy,
                  copied)
        print(f"run {run}: fenced after {row.fenced_s:.2f} s, replay {row.replay_s:.2f} s ({row.batches} batches), "
              f"serving after {row.serves_s:.2f} s; load {_load()}", flush=True)
        print(f"run {run}: {f'{copied} WAL objects copied in place' if copied else 'replayed record by record'}; "
              f"read {float(read_mib):.0f} MiB in {float(read_s):.2f} s (GETs {float(get_sum):.2f} s "
              f"summed, waited {row.get_wait_s:.2f} s, decode {row.decode_cpu_s:.2f} s CPU); uploads waited "
              f"{row.upload_wait_s:.2f} s (PUT {float(put_sum):.2f} s summed for {float(put_mib):.0f} MiB, commits "
              f"{float(commit):.2f} s); broker CPU {row.cpu_s:.2f} s ({float(loop_cpu):.2f} s event loop) = "
              f"{row.cpu_ms_per_mib:.1f} ms/MiB; moto alone: GET {moto_get:.0f} MB/s, PUT {moto_put:.0f} MB/s, "
              f"copy {moto_copy:.0f} MB/s -> {row.moto_s:.2f} s for this WAL", flush=True)
        return row
    finally:
        cluster.stop_all(timeout=30)
        if args.keep_logs:
            for node in cluster.nodes:
                for log in node.logs:
                    target = Path(args.keep_logs) / f"run{run}-{log.name}"
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(log.read_bytes())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wal-mb", type=int, default=500, help="MiB written to the victim before the kill")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=4, help="partitions per broker")
    parser.add_argument("--session-ms", type=int, default=4000, help="broker.session.timeout.ms")
    parser.add_argument("--upload-threshold-mb", type=int, default=1024,
                        help="s3.wal.upload.threshold: above --wal-mb, so nothing is uploaded before the kill")
    parser.add_argument("--keep-logs", help="a directory to copy every node's log to")
    args = parser.parse_args()
    moto = MotoServer()
    rows: list[Run] = []
    try:
        for run in range(args.runs):
            with tempfile.TemporaryDirectory(prefix="fjord-failover-bench-") as tmp:
                rows.append(one_run(run, Path(tmp), moto, args))
    finally:
        moto.stop()
    print()
    print("| run | WAL MiB | death -> fenced | replay (start -> end) | death -> produce on new leader | batches | "
          "objects copied in place | broker CPU (ms/MiB) | waiting GETs / uploads | moto alone: GET, PUT, copy MB/s "
          "(s for this WAL) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r.run} | {r.wal_mb:.0f} | {r.fenced_s:.2f} s | {r.replay_s:.2f} s | {r.serves_s:.2f} s | "
              f"{r.batches} | {r.copied} | {r.cpu_s:.2f} s ({r.cpu_ms_per_mib:.1f}) | {r.get_wait_s:.2f} s / "
              f"{r.upload_wait_s:.2f} s | {r.moto_get_mbs:.0f}, {r.moto_put_mbs:.0f}, {r.moto_copy_mbs:.0f} "
              f"({r.moto_s:.2f} s) |")
    for name in ("fenced_s", "replay_s", "serves_s"):
        values = sorted(getattr(r, name) for r in rows)
        print(f"median {name[:-2]}: {values[len(values) // 2]:.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
