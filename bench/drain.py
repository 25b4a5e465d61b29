"""Drain benchmark (issue 25, "Producer stall per balancing move and per drained partition: p50 <= 100 ms,
max <= 200 ms"): how long a steady producer stalls on each partition ``fjord cluster drain --node N`` moves off a
broker, how long the drain takes, and (unless ``--no-shutdown``) the same for a controlled shutdown (SIGTERM).

A cluster of ``fjord server start`` processes on 127.0.0.1 (1 controller, ``--brokers`` brokers, ``file://`` object
storage and file WALs under a temporary directory; the cluster, the producers and the read-back are
``bench/balancer.py``'s, imported, so the topic is its ``balancer-bench``). Two idempotent acks=all confluent-kafka
producers write ``--rate`` records of 1 KiB per second between them over the ``--partitions`` topic (placed round
robin, so each broker leads ``partitions / brokers``): one at librdkafka's defaults (``retry.backoff.ms`` 100), one
at ``--lowered-backoff-ms`` (20), each on rows of its own (``bench/balancer.py``'s docstring says why: librdkafka
backs off ``retry.backoff.ms`` after a NOT_LEADER_OR_FOLLOWER even when the refusal names the new leader). After a
steady spell the broker leading the lowest-numbered partition is drained with the command an operator runs (a
subprocess, its output timestamped line by line), then (unless ``--no-shutdown``) another broker still leading
partitions gets SIGTERM (``controlled.shutdown.enable``, shipped on: the controller moves its leaderships away before
it stops). Per drained (or shut-down) partition and producer:

- ``ack gap``: the longest gap between two consecutive acknowledgements of that partition's records, over the gaps
  that end after the drain started and start before it ended (the "before" row: the same over the 3 s before, the
  floor: the record spacing, ``partitions / rate * 2`` s per partition and producer, or the acknowledgements'
  bursts on a loaded machine, whichever is longer);
- ``max latency``: the longest delivery latency (enqueue to acknowledgement) of a record of that partition
  acknowledged from the drain's start on: ``bench/balancer.py``'s stall, without the spacing;
- ``broker: hand-over`` from the brokers' logs (source stops appending -> target has it open), as the balancer
  bench times it;
- ``drain``: the command's run from its start to its exit (the Python interpreter's start included, 0.85 s at a load
  of 8), to its "moving N partitions" line, and from that line (the AlterPartitionReassignments answered) to its last
  progress line (all moved, none in flight); ``shutdown``: SIGTERM to the process's exit, and to the Metadata showing
  it leading nothing.

At the end every record is read back: ``lost`` counts acknowledged records missing, ``dup`` records read twice.
With ``--runs`` > 1 each run has a fresh cluster, and a summary gives the p50 and max over every run's partitions.

    .venv/bin/python bench/drain.py [--runs 3] [--brokers 3] [--partitions 12] [--rate 2000]
                                    [--lowered-backoff-ms 20] [--no-shutdown] [--keep-logs DIR]

The target: issue 25's p50 <= 100 ms, max <= 200 ms per drained partition. Not met (below).

On the 2-core development machine (2026-11-29, defaults, ``--runs 3``, load average 8.1, 8.8 and 9.8 at the runs'
starts from other helpers' work): per drained partition (12 over the runs), p50 / max, at librdkafka's default
backoff: ack gap 430 / 743 ms (the runs' p50s 727, 401, 422), max latency 555 / 769 ms; at the lowered backoff ack
gap 450 / 831 ms; the ack gap before the drain 198 / 231 ms (the loaded machine's floor: acknowledgements came in
bursts). The brokers' hand-over 469 / 731 ms. The drain command 1.6-3.5 s from its start to its exit, of which the
moves (AlterPartitionReassignments answered -> none in flight) 0.27-0.58 s; in later runs (below) its start to the
moves issued was 1.0-1.4 s: the interpreter's start and imports (``fjord cluster drain --help`` takes 0.85 s at a
load of 8) and its five requests before the moves, which take 0.1 s on an idle cluster (Metadata 3, DescribeConfigs
19, IncrementalAlterConfigs 61, ListPartitionReassignments 8, AlterPartitionReassignments 43 ms; the whole drain of
four partitions 0.46 s) and 0.1-0.4 s under this load. Controlled shutdown (6 partitions each run): ack gap 550 /
907 ms at the default backoff (the runs' p50s 377, 552, 844), SIGTERM -> exit 0.46-0.84 s, Metadata naming other
leaders for all of them after 55-111 ms (while the source still closes). Lost 0, dup 0, failed 0 in every run.

A drain is not worse than a balancing move: its one AlterPartitionReassignments starts every move within about 50 ms
at the controller, the source closes them together (one upload of its WAL block for all four, the closes' "closes"
phase the same for each), and the two targets open two each. Three runs alternating with ``bench/balancer.py`` (load
average 8.7-12.7; drain first): the brokers' hand-over p50 371, 556, 533 ms against the balancer's 522, 514, 640 ms;
the client stall (max latency, default backoff) 464, -, 699 ms against the balancer's 553, 758, 853 ms (the drain's
second run's client rows were lost to a bug of this bench's first version, which read the acknowledgements at the
command's exit, before the records held during the moves had theirs); three more pairs with this version (load
9.4-11.9): hand-over 529, 489, 258 ms against 394, 580, 302 ms, client stall 638, 577, 291 ms against 481, 824, 421
ms. What bounds the stall is the hand-over, as in ``bench/balancer.py``: from the brokers' logs of the ``--runs 3``
set (per run, the same for the four partitions but for the election), the source's close 436, 192 and 288 ms (its
"closes" phase, the WAL block's upload, its commit and the streams' closes at the controller, most of it), the
election reaching the target 12-156 ms, the target's open 115-231 ms (the meta stream's replay reads the object the
close just uploaded), then librdkafka's ``retry.backoff.ms`` where it is longer than the target's open. On this loaded
machine all of it is two to three times what ``bench/balancer.py`` records at a load of 1-5 (stall p50 about 250 ms,
hand-over about 190 ms), which is still over the issue's 100 ms: a drain gets no closer than a balancing move does.

Issue 25, after a closing partition's last upload carried only the closing streams' records and its commit closed
them (``bench/balancer.py``'s seventh round; 2026-11-30, ``--runs 1 --no-shutdown``, load average 3-6, alternating
with main): the brokers' hand-over p50 379, 538, 293 ms against main's 356, 285, 213 ms, the default-backoff max
latency p50 515, 965, 453 against 493, 321, 291 ms (lost 0, dup 0). A drain's four closes upload one block either
way, whose "closes" phase was 94-97 ms here and 79-107 ms on main: the drain's block is small (12 partitions at
2,000 records/s), so a close that uploads only its own records gains little, and the runs' scatter (settling an
append in flight up to 265 ms, the target's stream opens 5-130 ms) decides the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]  # the repository's packages before this directory (bench/storage.py shadows ``storage``)

from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from bench.balancer import TOPIC, Load, hand_overs, keep_node_logs, leaders, read_back, start_loads  # noqa: E402
from bench.stats import percentile  # noqa: E402
from node.local_cluster import LocalCluster, plan_cluster, wait_ready  # noqa: E402

STEADY_S = 5.0  # load before the drain: the baseline
BEFORE_S = 3.0  # the window of the "before" rows
SETTLE_S = 3.0  # load after a drain or shutdown, so its retried records are acknowledged
DRAIN_TIMEOUT_S = 120.0
SHUTDOWN_TIMEOUT_S = 60.0


def ack_gaps(load: Load, partitions: list[int], start: float, end: float) -> list[float]:
    """Per partition the longest gap between consecutive acknowledgements that ends after ``start`` and begins
    before ``end`` (monotonic seconds)."""
    times: dict[int, list[float]] = defaultdict(list)
    for partition, at, _, _ in load.acked:
        times[partition].append(at)
    found: list[float] = []
    for partition in partitions:
        acks = sorted(times[partition])
        gaps = [b - a for a, b in itertools.pairwise(acks) if b >= start and a <= end]
        if gaps:
            found.append(max(gaps))
    return found


def max_latencies(load: Load, partitions: list[int], start: float, end: float) -> list[float]:
    """Per partition the longest delivery latency of a record acknowledged between ``start`` and ``end``."""
    during: dict[int, list[float]] = defaultdict(list)
    for partition, at, latency, _ in load.acked:
        if start <= at <= end and partition in partitions:
            during[partition].append(latency)
    return [max(during[p]) for p in partitions if during[p]]


@dataclass
class DrainCommand:
    """``fjord cluster drain`` as a subprocess, its stdout lines stamped (monotonic) as they arrive."""

    argv: list[str]
    lines: list[tuple[float, str]] = field(default_factory=list)
    started: float = 0.0
    ended: float = 0.0
    code: int = -1

    def run(self) -> None:
        self.started = time.monotonic()
        with subprocess.Popen(self.argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, bufsize=1, env=dict(os.environ, PYTHONUNBUFFERED="1")) as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                self.lines.append((time.monotonic(), line.rstrip()))
            self.code = proc.wait(timeout=DRAIN_TIMEOUT_S + 30)
        self.ended = time.monotonic()

    def issued(self) -> float | None:
        """From the command's start to its "moving N partitions" line: the interpreter's start, then Metadata,
        DescribeConfigs, IncrementalAlterConfigs, ListPartitionReassignments and AlterPartitionReassignments."""
        moving = [at for at, line in self.lines if line.startswith("moving ")]
        return moving[0] - self.started if moving else None

    def moves_span(self) -> float | None:
        """From the "moving N partitions" line to the last progress line ("N/N moved, 0 still moving")."""
        moving = [at for at, line in self.lines if line.startswith("moving ")]
        progress = [at for at, line in self.lines if line.endswith(" still moving")]
        return progress[-1] - moving[0] if moving and progress else None


@dataclass
class RunResult:
    """One run's figures, seconds: per label (the phase and the producer) the values per partition."""

    values: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    lost: int = 0
    dup: int = 0
    failed: int = 0


def _wait_leads_nothing(bootstrap: str, node: int, timeout: float) -> float:
    """Monotonic time at which Metadata first shows ``node`` leading no partition of the topic."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if node not in leaders(bootstrap).values():
                return time.monotonic()
        except Exception:  # a broker between metadata answers (the stopping one among them); ask again
            pass
        time.sleep(0.02)
    raise SystemExit(f"broker {node} still leads partitions after {timeout:.0f} s of its shutdown")


def _record(result: RunResult, phase: str, loads: dict[str, Load], partitions: list[int], *, start: float,
            end: float, before: float) -> None:
    for label, load in loads.items():
        result.values[f"{phase} ack gap, {label}"] += ack_gaps(load, partitions, start, end)
        result.values[f"{phase} max latency, {label}"] += max_latencies(load, partitions, start, end + SETTLE_S)
        result.values[f"{phase} ack gap in the {BEFORE_S:.0f} s before, {label}"] += ack_gaps(
            load, partitions, before - BEFORE_S, before)


def run_once(brokers: int, partitions: int, rate: int, *, lowered_backoff_ms: int, shutdown: bool,
             keep_logs: Path | None) -> RunResult:
    result = RunResult()
    with tempfile.TemporaryDirectory(prefix="fjord-drain-bench-") as tmp:
        cluster = LocalCluster(plan_cluster(Path(tmp), controllers=1, brokers=brokers))
        cluster.start_all()
        try:
            asyncio.run(wait_ready(cluster, timeout=60))
            bootstrap = cluster.bootstrap_servers
            admin = AdminClient({"bootstrap.servers": bootstrap})
            admin.create_topics([NewTopic(TOPIC, partitions, 1)])[TOPIC].result(timeout=30)
            loads, threads = start_loads(bootstrap, partitions, rate, lowered_backoff_ms)
            time.sleep(STEADY_S)
            placement = leaders(bootstrap)
            drained = placement[min(placement)]
            moved = sorted(p for p, leader in placement.items() if leader == drained)
            staying = next(b for b in cluster.brokers if b.spec.node_id != drained)
            command = DrainCommand([sys.executable, "-m", "node.cli", "cluster", "drain", "--bootstrap-server",
                                    staying.spec.address, "--node", str(drained), "--timeout",
                                    str(DRAIN_TIMEOUT_S)])
            wall0 = time.time()
            command.run()
            if command.code != 0:
                raise SystemExit(f"drain failed ({command.code}):\n" + "\n".join(line for _, line in command.lines))
            span = command.moves_span()
            print(f"drained broker {drained}: partitions {moved} in {command.ended - command.started:.2f} s "
                  f"(moves {span if span is None else round(span, 2)} s)", flush=True)
            result.values["drain: command start -> exit"].append(command.ended - command.started)
            if span is not None:
                result.values["drain: moves issued -> all moved"].append(span)
            issued = command.issued()
            if issued is not None:
                result.values["drain: command start -> moves issued"].append(issued)
            time.sleep(SETTLE_S)  # the records held during the moves are acknowledged after the command's exit
            _record(result, "drain:", loads, moved, start=command.started, end=command.ended, before=command.started)
            result.values["drain: broker hand-over"] += [m.total for m in hand_overs(cluster, moved, wall0).values()]
            if shutdown:
                placement = leaders(bootstrap)
                victim = max((b.spec.node_id for b in cluster.brokers if b.spec.node_id != drained),
                             key=lambda b: (sum(1 for leader in placement.values() if leader == b), -b))
                shut = sorted(p for p, leader in placement.items() if leader == victim)
                node = cluster.node(victim)
                signalled = time.monotonic()
                node.terminate()
                away = _wait_leads_nothing(cluster.node(drained).spec.address, victim, SHUTDOWN_TIMEOUT_S)
                node.wait(SHUTDOWN_TIMEOUT_S)
                exited = time.monotonic()
                print(f"shut down broker {victim}: partitions {shut} led elsewhere after {away - signalled:.2f} s, "
                      f"process exited after {exited - signalled:.2f} s", flush=True)
                result.values["shutdown: SIGTERM -> leads nothing"].append(away - signalled)
                result.values["shutdown: SIGTERM -> exit"].append(exited - signalled)
                time.sleep(SETTLE_S)
                _record(result, "shutdown:", loads, shut, start=signalled, end=exited, before=signalled)
            for load in loads.values():
                load.stop.set()
            for thread in threads:
                thread.join(timeout=150)
            acked = [seq for load in loads.values() for _, _, _, seq in load.acked]
            result.failed = sum(len(load.failed) for load in loads.values())
            live = ",".join(b.spec.address for b in cluster.brokers if b.running)
            read = Counter(read_back(live, partitions, len(acked), timeout=120))
            result.lost = sum(1 for seq in acked if seq not in read)
            result.dup = sum(1 for c in read.values() if c > 1)
            print(f"{len(acked)} acknowledged, {result.failed} failed, lost {result.lost}, dup {result.dup}",
                  flush=True)
            return result
        finally:
            cluster.stop_all(timeout=60)
            keep_node_logs(cluster, keep_logs)


def _table(values: dict[str, list[float]]) -> str:
    rows = [f"{'':62} {'n':>4} {'p50 ms':>8} {'max ms':>8}"]
    order = sorted(values, key=lambda label: (not label.startswith("drain"), label))
    for label in order:
        if values[label]:
            v = values[label]
            rows.append(f"{label:62} {len(v):4} {percentile(v, 0.5) * 1000:8.0f} {max(v) * 1000:8.0f}")
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs, each on a fresh cluster")
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--rate", type=int, default=2000, help="records per second (1 KiB each), both producers")
    parser.add_argument("--lowered-backoff-ms", type=int, default=20,
                        help="a second producer's retry.backoff.ms, on rows of its own (0: only the default one)")
    parser.add_argument("--no-shutdown", action="store_true", help="skip the controlled shutdown (SIGTERM) rows")
    parser.add_argument("--keep-logs", type=Path, help="copy the nodes' logs to this directory at the end")
    args = parser.parse_args()
    total = RunResult()
    medians: dict[str, list[float]] = defaultdict(list)
    for index in range(args.runs):
        load_avg = os.getloadavg()[0]
        print(f"\nrun {index + 1}/{args.runs} (load average {load_avg:.1f}): {args.brokers} brokers, "
              f"{args.partitions} partitions, {args.rate} records/s of 1 KiB", flush=True)
        result = run_once(args.brokers, args.partitions, args.rate, lowered_backoff_ms=args.lowered_backoff_ms,
                          shutdown=not args.no_shutdown,
                          keep_logs=args.keep_logs / f"run-{index + 1}" if args.keep_logs else None)
        print(_table(result.values), flush=True)
        for label, values in result.values.items():
            total.values[label] += values
            if values:
                medians[label].append(statistics.median(values))
        total.lost += result.lost
        total.dup += result.dup
        total.failed += result.failed
    if args.runs > 1:
        print(f"\nover {args.runs} runs (every partition of every run)")
        print(_table(total.values))
        print("runs' p50s (ms): " + "; ".join(
            f"{label}: {', '.join(f'{m * 1000:.0f}' for m in ms)}" for label, ms in medians.items()
            if "gap," in label or "latency" in label))
    print(f"lost {total.lost}, dup {total.dup}, failed {total.failed}")
    return 0 if total.lost == 0 and total.dup == 0 and not total.failed else 1


if __name__ == "__main__":
    sys.exit(main())
