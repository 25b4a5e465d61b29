"""Consumer group benchmark (KIP-848): how fast a group of 50 settles, against a classic cooperative-sticky group,
and what one ConsumerGroupHeartbeat costs the broker. One ``fjord server start`` process, one Markdown table.

    .venv/bin/python bench/consumer_groups.py [--members 50] [--partitions 200] [--heartbeat-ms 1000]
                                               [--seconds 10] [--window 16] [--rounds 1] [--skip-clients]

Settling (one topic of ``--partitions`` partitions, ``--members`` consumers subscribed to it):

- ``consumer (librdkafka)``: confluent-kafka consumers with ``group.protocol=consumer``, all in this process, polled
  round-robin by one thread. ``join``: from the moment the last member subscribed (its first heartbeat follows at
  once) until every partition is owned: the clients' ``assignment()`` sets are disjoint and cover the topic, and
  ConsumerGroupDescribe shows every member at the group's epoch, which is the target assignment's. ``leave``: one
  member closes (its leave heartbeat), until the others own everything again at the new epoch.
- ``consumer (raw wire)``: the same group as raw ConsumerGroupHeartbeat clients on asyncio (one connection per
  member) that give up revoked partitions at once: a member heartbeats again immediately when an answer changed its
  assignment, else after the heartbeat interval the broker gave it (the first such wait a random part of it, so
  the members are not in lockstep). ``join`` starts when the last member's first
  heartbeat is answered. This row is what the protocol and the broker take without a client's own work.
- ``classic cooperative-sticky``: confluent-kafka consumers with the classic protocol and
  ``partition.assignment.strategy=cooperative-sticky`` (the eager first round and the incremental second), until the
  clients' assignments cover the topic and DescribeGroups says Stable with every member.

The new protocol's members learn of a new target on their next heartbeat, the classic ones of a rebalance on theirs,
so both get the same interval: ``group.consumer.heartbeat.interval.ms`` on the broker, ``heartbeat.interval.ms`` on
the classic clients (``--heartbeat-ms``). ``group.initial.rebalance.delay.ms`` is 0 so the classic group's first
round is not held back 3 s.

Heartbeat cost: a ``--members`` group of raw clients is settled, then every member sends its steady-state heartbeat
(group, member id and epoch; everything else null, as clients send when nothing changed) ``--window`` at a time on
its own connection for ``--seconds``. ``heartbeats/s`` is what the broker answered per wall second (the 2 cores are
shared with this client), ``per CPU-s`` is heartbeats per CPU second of the broker process (psutil, all its
threads), the figure the issue's 5,000 heartbeats/s on one core is about.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import struct
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]  # the repository's packages before this directory (bench/storage.py shadows ``storage``)

from testkit.node_process import BrokerProcess, WireClient, start_broker  # noqa: E402
from testkit.waiting import eventually  # noqa: E402
from wire import codec, schema  # noqa: E402

HEARTBEAT_KEY = 68
DESCRIBE_KEY = 69
_LENGTH = struct.Struct(">i")
SETTLE_TIMEOUT_S = 120.0


@dataclass
class Row:
    group: str
    join_s: float | None = None
    leave_s: float | None = None
    note: str = ""


# ---------------------------------------------------------------------------------------------- broker views


def describe(port: int, group: str) -> Any:
    with WireClient(port) as client:
        request = schema.build(codec.request_class(DESCRIBE_KEY, 1), group_ids=(group,))
        (described,) = client.request(request).groups
    return described


def consumer_group_settled(port: int, group: str, members: int, partitions: int) -> bool:
    """ConsumerGroupDescribe: ``members`` members, each at the group epoch, which the target assignment has, and
    their current assignments cover the ``partitions`` once (a member at the target epoch may still wait for a
    partition another has not released)."""
    described = describe(port, group)
    owned = [p for m in described.members for t in m.assignment.topic_partitions for p in t.partitions]
    return bool(
        described.error_code == 0
        and len(described.members) == members
        and described.group_epoch == described.assignment_epoch
        and all(m.member_epoch == described.group_epoch for m in described.members)
        and len(owned) == partitions
        and set(owned) == set(range(partitions))
    )


def classic_group_settled(port: int, group: str, members: int) -> bool:
    with WireClient(port) as client:
        request = schema.build(codec.request_class(15, 5), groups=(group,), include_authorized_operations=False)
        (described,) = client.request(request).groups
    return bool(described.group_state == "Stable" and len(described.members) == members)


def owns_everything(consumers: list[Consumer], partitions: int) -> bool:
    owned = [tp.partition for c in consumers for tp in c.assignment()]
    return len(owned) == partitions and set(owned) == set(range(partitions))


def coordinator_ready(port: int, group: str) -> None:
    """FindCoordinator until the broker coordinates ``group`` (it creates and loads __consumer_offsets first)."""

    def found() -> bool:
        with WireClient(port) as client:
            request = schema.build(codec.request_class(10, 4), key_type=0, coordinator_keys=(group,))
            (coordinator,) = client.request(request).coordinators
        return bool(coordinator.error_code == 0)

    eventually(found, timeout=60, interval=0.1, what=f"a coordinator for {group}")


# ---------------------------------------------------------------------------------------------- librdkafka groups


class Poller:
    """One thread serving every consumer's callbacks (``poll(0)`` round-robin), as the rebalance needs."""

    def __init__(self, consumers: list[Consumer]) -> None:
        self.consumers = list(consumers)
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="poller", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            with self.lock:
                for consumer in self.consumers:
                    consumer.poll(0)
            time.sleep(0.005)

    def remove(self, consumer: Consumer) -> None:
        with self.lock:
            self.consumers.remove(consumer)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


def librdkafka_group(broker: BrokerProcess, topic: str, args: argparse.Namespace, *, classic: bool) -> Row:
    group = f"bench-{'classic' if classic else 'consumer'}-{uuid.uuid4().hex[:6]}"
    base = {"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False,
            "log_level": 3}
    if classic:
        base |= {"partition.assignment.strategy": "cooperative-sticky", "heartbeat.interval.ms": args.heartbeat_ms}
    else:
        base |= {"group.protocol": "consumer"}
    consumers = [Consumer({**base, "client.id": f"m{i}"}) for i in range(args.members)]
    poller = Poller(consumers)
    settled: Callable[[int], bool] = (
        (lambda n: classic_group_settled(broker.port, group, n)) if classic
        else (lambda n: consumer_group_settled(broker.port, group, n, args.partitions))
    )
    try:
        for consumer in consumers:
            consumer.subscribe([topic])
        started = time.monotonic()
        eventually(lambda: owns_everything(poller.consumers, args.partitions) and settled(args.members),
                   timeout=SETTLE_TIMEOUT_S, interval=0.02, what=f"{group} settled")
        joined = time.monotonic() - started
        leaving = consumers[0]
        poller.remove(leaving)
        started = time.monotonic()
        leaving.close()
        eventually(lambda: owns_everything(poller.consumers, args.partitions) and settled(args.members - 1),
                   timeout=SETTLE_TIMEOUT_S, interval=0.02, what=f"{group} settled after a leave")
        left = time.monotonic() - started
    finally:
        poller.stop()
        for consumer in consumers[1:]:
            consumer.close()
    name = "classic cooperative-sticky (librdkafka)" if classic else "consumer (librdkafka)"
    return Row(name, joined, left)


# ---------------------------------------------------------------------------------------------- raw wire members


class Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.correlation = 0

    @classmethod
    async def open(cls, port: int) -> Connection:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer)

    async def frame(self) -> bytes:
        (size,) = _LENGTH.unpack(await self.reader.readexactly(_LENGTH.size))
        return await self.reader.readexactly(size)

    async def call(self, request: Any) -> Any:
        self.correlation += 1
        self.writer.write(codec.encode_request(request, self.correlation, "bench-raw"))
        cls = type(request)
        return codec.decode_response(cls.__api_key__, cls.__version__, await self.frame())[1]

    def close(self) -> None:
        self.writer.close()


@dataclass
class RawMember:
    """A ConsumerGroupHeartbeat v1 client that revokes at once: what it reports owning is what it was last given."""

    conn: Connection
    group: str
    topic: str
    member_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    epoch: int = 0
    owned: dict[uuid.UUID, tuple[int, ...]] = field(default_factory=dict)
    interval_s: float = 5.0

    async def heartbeat(self, *, leave: bool = False) -> bool:
        """One full heartbeat; True when the answer changed this member's assignment or epoch."""
        cls = codec.request_class(HEARTBEAT_KEY, 1)
        joining = self.epoch == 0
        request = schema.build(
            cls, group_id=self.group, member_id=self.member_id, member_epoch=-1 if leave else self.epoch,
            rebalance_timeout=60_000 if joining else -1,
            subscribed_topic_names=(self.topic,) if joining else None, server_assignor=None,
            topic_partitions=tuple(
                schema.build_nested(cls, "topic_partitions", topic_id=t, partitions=p) for t, p in self.owned.items()
            ),
        )
        answer = await self.conn.call(request)
        if answer.error_code != 0:
            raise RuntimeError(f"{self.member_id}: heartbeat answered {answer.error_code} {answer.error_message}")
        changed = answer.member_epoch != self.epoch
        self.epoch = answer.member_epoch
        interval_ms = schema.millis(answer.heartbeat_interval)
        self.interval_s = interval_ms / 1000 if interval_ms > 0 else self.interval_s
        if answer.assignment is not None:
            given = {tp.topic_id: tuple(tp.partitions) for tp in answer.assignment.topic_partitions}
            changed = changed or given != self.owned
            self.owned = given
        return bool(changed)

    async def run(self, stop: asyncio.Event) -> None:
        """Heartbeats at once after a change, else after the interval; the first idle wait is a random part of it,
        so the members' heartbeats are spread over the interval as independent clients' are, not in lockstep."""
        phase = random.random()
        while not stop.is_set():
            if not await self.heartbeat():
                try:
                    await asyncio.wait_for(stop.wait(), self.interval_s * phase)
                except TimeoutError:
                    pass
                phase = 1.0

    def steady_frame(self, correlation: int) -> bytes:
        request = schema.build(
            codec.request_class(HEARTBEAT_KEY, 1), group_id=self.group, member_id=self.member_id,
            member_epoch=self.epoch, rebalance_timeout=-1, subscribed_topic_names=None, server_assignor=None,
            topic_partitions=None,
        )
        return codec.encode_request(request, correlation, "bench-raw")


async def _wait_settled(port: int, group: str, members: int, partitions: int) -> None:
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while not await asyncio.to_thread(consumer_group_settled, port, group, members, partitions):
        if time.monotonic() > deadline:
            raise AssertionError(f"{group} did not settle with {members} members in {SETTLE_TIMEOUT_S} s")
        await asyncio.sleep(0.01)


async def raw_group(broker: BrokerProcess, topic: str, args: argparse.Namespace) -> tuple[Row, list[RawMember]]:
    """Settles a raw group (join, then one member leaves, then it joins again so ``--members`` stay); returns the
    row and the settled members, still connected, for the heartbeat cost."""
    group = f"bench-raw-{uuid.uuid4().hex[:6]}"
    coordinator_ready(broker.port, group)
    members = [RawMember(await Connection.open(broker.port), group, topic) for _ in range(args.members)]
    await asyncio.gather(*(m.heartbeat() for m in members))  # every member's first heartbeat, answered
    started = time.monotonic()
    stop = asyncio.Event()
    tasks = [asyncio.create_task(m.run(stop)) for m in members]
    await _wait_settled(broker.port, group, args.members, args.partitions)
    joined = time.monotonic() - started
    leaving = members.pop()
    tasks.pop().cancel()  # it may be waiting for an answer: the leave goes on a connection of its own
    leaving.conn.close()
    leaving.conn = await Connection.open(broker.port)
    started = time.monotonic()
    await leaving.heartbeat(leave=True)
    await _wait_settled(broker.port, group, args.members - 1, args.partitions)
    left = time.monotonic() - started
    # A new member takes its place, so the heartbeat cost is measured on a group of ``--members``.
    leaving = RawMember(leaving.conn, group, topic)
    await leaving.heartbeat()
    members.append(leaving)
    tasks.append(asyncio.create_task(leaving.run(stop)))
    await _wait_settled(broker.port, group, args.members, args.partitions)
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    return Row("consumer (raw wire, instant revoke)", joined, left), members


async def _pipeline(member: RawMember, window: int, until: float, counts: list[int]) -> None:
    frames = b"".join(member.steady_frame(i) for i in range(window))
    sample: bytes | None = None
    while time.monotonic() < until:
        member.conn.writer.write(frames)
        for _ in range(window):
            sample = await member.conn.frame()
        counts[0] += window
    assert sample is not None
    _, answer = codec.decode_response(HEARTBEAT_KEY, 1, sample)
    if answer.error_code != 0 or answer.member_epoch != member.epoch:
        raise RuntimeError(f"steady heartbeat answered {answer.error_code} at epoch {answer.member_epoch}")


async def heartbeat_cost(broker: BrokerProcess, members: list[RawMember], args: argparse.Namespace) -> str:
    process = psutil.Process(broker.proc.pid)
    counts = [0]
    cpu = process.cpu_times()
    started = time.monotonic()
    await asyncio.gather(*(_pipeline(m, args.window, started + args.seconds, counts) for m in members))
    elapsed = time.monotonic() - started
    after = process.cpu_times()
    cpu_s = (after.user + after.system) - (cpu.user + cpu.system)
    beats = counts[0]
    return (
        f"| steady heartbeats, {len(members)} members x {args.window} in flight, {elapsed:.1f} s | {beats:,} | "
        f"{beats / elapsed:,.0f}/s | {cpu_s / beats * 1000:.3f} CPU-s per 1,000 | {beats / cpu_s:,.0f} per CPU-s |"
    )


# ---------------------------------------------------------------------------------------------- the run


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(timeout=60)
    eventually(lambda: len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == partitions,
               timeout=30, what=f"{topic} created")


def _fmt(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.2f} s"


async def _raw_part(broker: BrokerProcess, topic: str, args: argparse.Namespace) -> tuple[Row, str]:
    row, members = await raw_group(broker, topic, args)
    try:
        cost = await heartbeat_cost(broker, members, args)
    finally:
        for m in members:
            m.conn.close()
    return row, cost


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, default=50)
    parser.add_argument("--partitions", type=int, default=200)
    parser.add_argument("--heartbeat-ms", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=10.0, help="steady heartbeats for this long")
    parser.add_argument("--window", type=int, default=16, help="heartbeats in flight per connection")
    parser.add_argument("--rounds", type=int, default=1, help="settle each group this many times (median)")
    parser.add_argument("--skip-clients", action="store_true", help="no librdkafka groups")
    args = parser.parse_args()
    hb = str(args.heartbeat_ms)
    overrides = {
        "group.consumer.heartbeat.interval.ms": hb, "group.consumer.min.heartbeat.interval.ms": hb,
        "group.initial.rebalance.delay.ms": "0",
    }
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="fjord-bench-groups-") as root:
        broker = start_broker(Path(root) / "broker", overrides)
        try:
            runs: dict[str, list[Row]] = {}
            cost = ""
            for number in range(args.rounds):
                topic = f"bench-groups-{number}"
                create_topic(broker.bootstrap, topic, args.partitions)
                raw, cost = asyncio.run(_raw_part(broker, topic, args))
                got = [raw]
                if not args.skip_clients:
                    got.append(librdkafka_group(broker, topic, args, classic=False))
                    got.append(librdkafka_group(broker, topic, args, classic=True))
                for row in got:
                    runs.setdefault(row.group, []).append(row)
                    print(f"  round {number}: {row.group}: join {_fmt(row.join_s)}, leave {_fmt(row.leave_s)}",
                          file=sys.stderr, flush=True)
            for name, got in runs.items():
                rows.append(Row(name, statistics.median(r.join_s or 0 for r in got),
                                statistics.median(r.leave_s or 0 for r in got)))
        finally:
            broker.stop()
    print(f"{args.members} members, {args.partitions} partitions, heartbeat interval {args.heartbeat_ms} ms, "
          f"one broker process, median of {args.rounds} round(s)\n")
    print("| group | join: last member's first heartbeat to all owned | one member leaves: to all owned |")
    print("|---|---|---|")
    for row in rows:
        print(f"| {row.group} | {_fmt(row.join_s)} | {_fmt(row.leave_s)} |")
    print("\n| heartbeat cost | heartbeats | wall rate | broker CPU | broker rate |")
    print("|---|---|---|---|---|")
    print(cost)
    return 0


if __name__ == "__main__":
    sys.exit(main())
