"""Share consumers for the share-state durability tests (a broker killed, a partition moved, an S3-WAL failover
while records are in flight): a holder that judges one batch and then holds the rest of it, and a
:class:`LiveReader` that reads on through the failure.

The holder runs as its own process (confluent-kafka's ShareConsumer in explicit mode): from its first non-empty poll
it ACCEPTs the values ``v % 4 == 0``, REJECTs ``v % 4 == 1``, RELEASEs ``v % 4 == 2`` and leaves ``v % 4 == 3``
acquired, commits those acknowledgements synchronously (the broker answered: they are durable), reports the sets
and is then frozen
(SIGSTOP), so it neither acknowledges nor releases what it holds, and its connection stays open as a hung
consumer's would. The broker side is then failed by the test; what a user must see afterwards is
:meth:`Held.check_redelivered`, of what the group's other consumers got (:func:`note_once`).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

from confluent_kafka import AcknowledgeType, KafkaException, Message, ShareConsumer

from testkit.waiting import eventually
from tests.broker.share_clients import DEADLINE_S

_SCRIPT = textwrap.dedent(
    """
    import json, sys, time
    from confluent_kafka import AcknowledgeType, ShareConsumer
    bootstrap, group, topic = sys.argv[1:4]
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                       "share.acknowledgement.mode": "explicit"})
    c.subscribe([topic])
    deadline = time.monotonic() + 60
    got = []
    while not got and time.monotonic() < deadline:
        got = [m for m in c.poll(0.2) if m.error() is None]
    verdicts = {"accepted": [], "rejected": [], "released": [], "held": []}
    kinds = [("accepted", AcknowledgeType.ACCEPT), ("rejected", AcknowledgeType.REJECT),
             ("released", AcknowledgeType.RELEASE), ("held", None)]
    for m in got:
        verdict, kind = kinds[int(m.value()) % 4]
        if kind is not None:
            c.acknowledge(m, kind)
        verdicts[verdict].append(int(m.value()))
    results = c.commit_sync(30) if got else {}
    verdicts["errors"] = [str(e) for e in results.values() if e is not None]
    print(json.dumps(verdicts), flush=True)
    time.sleep(600)
    """
)


@dataclass(frozen=True)
class Held:
    """What the holder did with its batch."""

    accepted: frozenset[int]
    rejected: frozenset[int]
    released: frozenset[int]
    held: frozenset[int]

    @property
    def acknowledged(self) -> frozenset[int]:
        return self.accepted | self.rejected

    def check_redelivered(self, seen: Mapping[int, int], produced: range) -> None:
        """``seen``: value -> delivery count of what the group's other consumers got afterwards (each value once).
        Acknowledged records never come back; released ones do, as second deliveries (the release wrote the count
        of the first); held ones come back; every other record is delivered, for the first time: nothing is skipped.

        A held record's delivery count is not checked: acquisitions are not written (as in Kafka, a fetch costs no
        durable write), so one that a crash interrupted may be counted again from its last written state."""
        came_back = sorted(self.acknowledged & seen.keys())
        assert not came_back, f"acknowledged records delivered again: {came_back[:20]}"
        not_back = sorted(self.held - seen.keys())
        assert not not_back, f"records held (acquired, not acknowledged) never came back: {not_back[:20]}"
        released = {v: seen.get(v) for v in self.released if seen.get(v) != 2}
        assert not released, f"released records not redelivered as second deliveries (value: count): {released}"
        fresh = set(produced) - self.acknowledged - self.released - self.held
        skipped = sorted(fresh - seen.keys())
        assert not skipped, f"records never delivered to anyone: {skipped[:20]}"
        again = {v: n for v, n in seen.items() if v in fresh and n != 1}
        assert not again, f"records first delivered after the failure came with delivery counts {again}"


class LiveReader:
    """A share consumer reading in small batches through a failure: it accepts each batch and commits it
    synchronously; a batch whose commit the broker confirmed is acknowledged for good, one whose commit failed
    (the leader moved or died under it) may come back. ``hold_a_batch`` keeps one batch in flight across the
    failure."""

    def __init__(self, consumer: ShareConsumer) -> None:
        self.consumer = consumer
        self.deliveries: Counter[int] = Counter()
        self.acknowledged: set[int] = set()
        self.came_back: list[int] = []
        self._pending: list[Message] = []

    def _step(self) -> None:
        batch, self._pending = self._pending or self._poll(), []
        for message in batch:
            self.consumer.acknowledge(message, AcknowledgeType.ACCEPT)
        if batch:
            results = self.consumer.commit_sync(10)
            if results and all(error is None for error in results.values()):
                self.acknowledged.update(int(m.value()) for m in batch)

    def _poll(self) -> list[Message]:
        batch = [m for m in self.consumer.poll(0.1) if m.error() is None]
        for message in batch:
            value = int(message.value())
            if value in self.acknowledged:
                self.came_back.append(value)
            self.deliveries[value] += 1
        return batch

    def hold_a_batch(self) -> None:
        """Takes a batch and keeps it unacknowledged until the next read: in flight across the move."""
        self._pending = eventually(self._poll, timeout=DEADLINE_S, interval=0.001, what="a batch to hold",
                                   retry_on=(KafkaException,))

    def read_until(self, count: int, what: str) -> None:
        """Reads until ``count`` distinct records were delivered (errors while the leader moves mean "not yet")."""

        def enough() -> bool:
            self._step()
            return len(self.deliveries) >= count

        eventually(enough, timeout=DEADLINE_S, interval=0.001, what=what, retry_on=(KafkaException,))

    def check(self, produced: range) -> None:
        back = sorted(set(self.came_back))
        assert not back, f"{len(back)} records whose acknowledgement the broker confirmed came back: {back[:20]}"
        assert set(self.deliveries) == set(produced), "the reading group did not get every record"
        again = sum(n - 1 for n in self.deliveries.values())
        print(f"reading group: {len(produced)} records, {again} redelivered (their acknowledgements failed)")


def note_once(seen: dict[int, int], message: Message) -> None:
    """Records a delivery in ``seen`` (value -> delivery count); a value delivered twice is an error."""
    value = int(message.value())
    assert value not in seen, f"record {value} delivered twice after the failure"
    seen[value] = message.delivery_count() or 1


@contextmanager
def holder(bootstrap: str, group: str, topic: str) -> Iterator[Held]:
    """Runs the holder until it reported and froze; killed when the block ends."""
    proc = subprocess.Popen([sys.executable, "-c", _SCRIPT, bootstrap, group, topic],
                            stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline() if proc.stdout is not None else ""
        assert line, f"the holding consumer exited ({proc.poll()}) without reporting"
        proc.send_signal(signal.SIGSTOP)
        report = json.loads(line)
        assert not report["errors"], f"the holder's acknowledgements failed: {report['errors']}"
        held = Held(*(frozenset(report[k]) for k in ("accepted", "rejected", "released", "held")))
        assert held.accepted and held.rejected and held.released and held.held, f"the holder's batch: {report}"
        yield held
    finally:
        proc.kill()
        proc.wait(timeout=10)
