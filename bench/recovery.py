"""Bounded recovery benchmark (issue 12): kill -9 -> serving again, for a small and a large partition.

One combined node (``fjord server start``, file WAL and ``file://`` object storage under a temporary directory) holds
one partition filled with ``--small-mb`` or ``--large-mb`` MB of 1 KiB records. Each kill cycle then writes
``--tail`` more records (not uploaded yet: they live only in the WAL, the part a crash must recover), SIGKILLs the
node, restarts it on the same directories and ports, and measures:

- ``serves``: from the SIGKILL to the first successful produce *and* fetch of that record on the partition (process
  start, WAL recovery, partition open and replay included);
- ``opened``: from the SIGKILL to the node's log line saying the partition is open (its replay done), read from
  the log's wall-clock timestamps; the rest of ``serves`` is the client reconnecting and the probe's round trips;
- ``WAL MB``: how much WAL the restart read back before opening partitions (from its trim point; what was not
  uploaded yet is re-uploaded), bounded by the WAL's upload and trim, not by the partition size;
- ``replayed``: the records (and bytes) the partition's recovery replayed and the offset it started from, as the
  node logs them ("recovered <topic>-0: replayed N records ... from offset X").

The replay reads only what follows the partition's recovery point, so ``replayed`` stays at about ``--tail``
records and ``serves`` does not grow with the partition size.

    .venv/bin/python bench/recovery.py [--small-mb 10] [--large-mb 300] [--cycles 3] [--tail 5000]
                                      [--upload-threshold-mb 64]

``--upload-threshold-mb`` raises ``s3.wal.upload.threshold`` (and the cache and WAL sizes with it), so that with a
big ``--tail`` hundreds of MB are only in the WAL at each kill (``--large-mb 0`` skips the large partition).

The default large size is what fills and runs within about two minutes on the 2-core development machine.
There (2026-11-26, load average about 1), medians of 3 cycles from kill -9 to serving: 10 MB 1.08 s, 10 GB
(``--large-mb 10240``, 10.5 M records) 1.14 s, partition open after 0.94-1.05 s against 0.96-1.14 s; every replay
read at most the 5,001 records written since the last checkpoint. Until the same day an open also read the whole
time stream (one index entry per index interval of the log: 10,855 entries, 0.14-0.22 s at 10 GB), which made
10 GB serve after 2.05 s; it now reads only the newest entry and leaves the rest to the first lookup by timestamp.
The first cycle after a fill re-uploads what its WAL still held (125 MB here: 1.70 s). About 0.8 s of each restart
is the Python process starting and importing its modules, so that is the floor here.

Since 2026-11-29 (issue 25) a restart no longer uploads the WAL tail before serving: it replays it into the LogCache
and uploads it in the background. ``--small-mb 10 --large-mb 0 --cycles 3 --tail 300000 --upload-threshold-mb 512``
(about 310 MB only in the WAL at each kill), on the 2-core machine at a load average of 7-9 from other work:
before, 5.03 / 10.33 / 15.76 s from kill -9 to serving (median 10.33 s); after, 3.05 / 2.91 / 3.29 s (median
3.05 s) while the WAL read back grew to 321 / 631 / 941 MB (each kill came before the previous tail's background
upload had finished), so the restart no longer follows what the WAL holds (a second run at a load average of 11:
5.23 / 4.77 / 6.09 s for 321 / 631 / 941 MB; the small tail, ``--tail 5000``, 1.71 s median at a load of 4-6).
Reading 207 MB of WAL back takes 0.33 s;
its background upload to a ``file://`` bucket 1.3-1.5 s.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]  # the repository's packages before this directory (bench/storage.py shadows ``storage``)

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402
from confluent_kafka.cimpl import NewTopic  # noqa: E402

from testkit.service_manager import socket_activated  # noqa: E402
from wire.ports import free_ports  # noqa: E402

TOPIC = "recovery-bench"
RECORD = 1024
START_TIMEOUT_S = 120.0
_OPENED = re.compile(rf"^(\S+ \S+) INFO +\S+: opened {TOPIC}-0 ", re.MULTILINE)
_WAL = re.compile(r"WAL /\S+: recovered up to offset (\d+) \(trim offset (\d+)\)")
_REPLAYED = re.compile(
    rf"recovered {TOPIC}-0: replayed (\d+) records \((\d+) batches, (\d+) bytes\) from offset (\d+) to (\d+)"
)


@dataclass
class Cycle:
    size_mb: int
    cycle: int
    serves_s: float
    opened_s: float
    wal_mb: float
    replayed_records: int
    replayed_bytes: int
    replay_from: int
    log_end: int


class Node:
    """A combined node on fixed ports, so clients reconnect to it across restarts."""

    def __init__(
        self,
        data_dir: Path,
        upload_threshold_mb: int = 64,
        extra: dict[str, str] | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.upload_threshold_mb = upload_threshold_mb
        self.extra = dict(extra or {})  # more --override settings
        self.env = dict(os.environ, PYTHONUNBUFFERED="1") if env is None else env
        self.port, self.controller_port = free_ports(2)
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir / "node.log"
        #: The client listener's socket when held across restarts as a service manager holds it (``hold_socket``).
        self.held: socket.socket | None = None

    def hold_socket(self) -> None:
        """From the next start on, the client listener's socket is this process's, passed to each node as systemd's
        socket activation passes it (``node.socket_activation``): a client connecting while no node runs is queued,
        not refused."""
        self.held = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.held.bind(("127.0.0.1", self.port))
        self.held.listen(1024)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        d = self.data_dir
        overrides = {
            "process.roles": "broker,controller",
            "node.id": "0",
            "controller.quorum.voters": f"0@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "log.dirs": str(d / "kraft"),
            "s3.data.buckets": f"0@file://{d / 'objects'}",
            "s3.wal.path": f"0@file://{d / 'wal'}",
            "s3.wal.upload.threshold": f"{self.upload_threshold_mb}MiB",
            "s3.wal.cache.size": f"{max(256, 2 * self.upload_threshold_mb)}MiB",
            "s3.wal.capacity": f"{max(2048, 4 * self.upload_threshold_mb)}MiB",
            "s3.block.cache.size": "64MiB",
            **self.extra,
        }
        cmd = [sys.executable, "-m", "node.cli", "server", "start"]
        for key, value in overrides.items():
            cmd += ["--override", f"{key}={value}"]
        fds: tuple[int, ...] = ()
        if self.held is not None:
            cmd, fds = socket_activated(cmd, [self.held])
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=self.env, pass_fds=fds
            )

    def log_text(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def _producer(bootstrap: str, *, idempotent: bool = True) -> Producer:
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": idempotent,
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "queue.buffering.max.kbytes": 262144,
            "message.timeout.ms": int(START_TIMEOUT_S * 1000),
            "reconnect.backoff.ms": 10,
            "reconnect.backoff.max.ms": 50,
        }
    )


def _write(bootstrap: str, records: int) -> None:
    producer = _producer(bootstrap)
    payload = b"x" * RECORD
    errors: list[str] = []

    def delivered(err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    for _ in range(records):
        while True:
            try:
                producer.produce(TOPIC, value=payload, partition=0, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    remaining = producer.flush(300)
    if remaining or errors:
        raise SystemExit(f"{remaining + len(errors)} records not acknowledged, e.g. {errors[:3]}")


def _serve_once(bootstrap: str, killed_at: float) -> float:
    """Produces one record and fetches it back, retrying while the node restarts; seconds since ``killed_at``.

    The probe is a plain ``acks=all`` producer: an idempotent one first needs a producer id, and librdkafka retries
    InitProducerId on a timer of its own after a refused connection, which would add up to a second of client
    waiting to a figure meant to time the broker (the load before the kill is idempotent)."""
    producer = _producer(bootstrap, idempotent=False)
    offsets: list[int] = []
    producer.produce(TOPIC, value=b"probe", partition=0, on_delivery=lambda e, m: offsets.append(m.offset()))
    if producer.flush(START_TIMEOUT_S) or not offsets or offsets[0] < 0:
        raise SystemExit(f"the probe record was not acknowledged within {START_TIMEOUT_S:.0f} s")
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "recovery-bench", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(TOPIC, 0, offsets[0])])
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None and msg.value() == b"probe":
                return time.monotonic() - killed_at
    finally:
        consumer.close()
    raise SystemExit(f"the probe record at offset {offsets[0]} was not fetched within {START_TIMEOUT_S:.0f} s")


def _wall(stamp: str) -> float:
    """A node log line's timestamp (local time, milliseconds) as seconds since the epoch."""
    return datetime.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S.%f").timestamp()


def run_size(size_mb: int, cycles: int, tail: int, upload_threshold_mb: int) -> list[Cycle]:
    results: list[Cycle] = []
    with tempfile.TemporaryDirectory(prefix="fjord-recovery-bench-") as tmp:
        node = Node(Path(tmp), upload_threshold_mb)
        node.start()
        try:
            admin = AdminClient({"bootstrap.servers": node.bootstrap})
            deadline = time.monotonic() + START_TIMEOUT_S
            while True:
                try:
                    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(timeout=10)
                    break
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
            started = time.monotonic()
            _write(node.bootstrap, size_mb * 1024 * 1024 // RECORD)
            print(f"filled {TOPIC}-0 with {size_mb} MB in {time.monotonic() - started:.1f} s", flush=True)
            for cycle in range(cycles):
                _write(node.bootstrap, tail)
                before = node.log_text()
                seen = [len(p.findall(before)) for p in (_REPLAYED, _OPENED, _WAL)]
                node.kill()
                killed_at, killed_wall = time.monotonic(), time.time()
                node.start()
                serves = _serve_once(node.bootstrap, killed_at)
                text = node.log_text()
                found = _REPLAYED.findall(text)[seen[0] :]
                records, _batches, size, start, end = (int(x) for x in found[-1]) if found else (0, 0, 0, -1, -1)
                opened = _OPENED.findall(text)[seen[1] :]
                opened_s = _wall(opened[0]) - killed_wall if opened else float("nan")
                wal = _WAL.findall(text)[seen[2] :]
                wal_mb = (int(wal[0][0]) - int(wal[0][1])) / 1e6 if wal else float("nan")
                results.append(Cycle(size_mb, cycle, serves, opened_s, wal_mb, records, size, start, end))
                replay = f"replayed {records} records [{start}, {end})" if found else "nothing to replay"
                print(
                    f"  {size_mb} MB cycle {cycle}: serving after {serves:.2f} s (open after {opened_s:.2f} s, "
                    f"{wal_mb:.0f} MB of WAL), {replay}",
                    flush=True,
                )
        finally:
            node.stop()
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small-mb", type=int, default=10)
    parser.add_argument("--large-mb", type=int, default=300)
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--tail", type=int, default=5000, help="records written before each kill")
    parser.add_argument("--upload-threshold-mb", type=int, default=64,
                        help="s3.wal.upload.threshold: how much WAL may stay not uploaded (raise it with --tail for "
                        "a kill with a big WAL tail)")
    args = parser.parse_args()
    rows = [row for size in (args.small_mb, args.large_mb) if size > 0
            for row in run_size(size, args.cycles, args.tail, args.upload_threshold_mb)]
    print()
    print(
        "| partition | cycle | kill -9 -> serving | -> opened | WAL MB | replayed records | replayed MB "
        "| replay from | log end |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row.size_mb} MB | {row.cycle} | {row.serves_s:.2f} s | {row.opened_s:.2f} s | {row.wal_mb:.0f} | "
            f"{row.replayed_records} | {row.replayed_bytes / 1e6:.1f} | "
            f"{row.replay_from if row.replay_from >= 0 else '-'} | {row.log_end if row.log_end >= 0 else '-'} |"
        )
    for size in sorted({r.size_mb for r in rows}):
        times = [r.serves_s for r in rows if r.size_mb == size]
        print(f"{size} MB: median kill -9 -> serving {sorted(times)[len(times) // 2]:.2f} s over {len(times)} cycles")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
