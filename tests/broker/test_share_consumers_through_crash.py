"""A share group's record states survive the broker's kill -9 (issue 22): confluent-kafka ShareConsumers against a
real broker process restarted on the same data directory.

A consumer takes a batch, accepts a quarter of it, rejects a quarter, releases a quarter and holds the rest
(acquired, never acknowledged; :mod:`tests.broker.share_holder`); more records arrive that nobody has seen. Then the
broker dies (SIGKILL) and starts again: the share state is replayed from the partition's share stream, so the
group's other consumer gets the released records as second deliveries, the held records again and everything never
delivered, each once, and never an accepted or rejected record. A second kill, after that consumer accepted
everything, brings nothing back. A consumer reading in small batches, its acknowledgements checkpointed several
times over, reads on through a kill -9 with a batch in flight.

Its own module: the node is killed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import ShareConsumer

from broker.share.store import SNAPSHOT_EVERY
from testkit.node_process import BrokerProcess, start_broker
from tests.broker.cg_clients import produce, unique
from tests.broker.share_clients import drain, set_group_config, share_consumer_factory
from tests.broker.share_holder import LiveReader, holder, note_once
from tests.topics import create_topic
from wire.ports import free_port

FIRST, TOTAL = 60, 200
#: Enough small batches for several snapshots of the group's state (broker.share.store.SNAPSHOT_EVERY updates).
MANY = 5 * SNAPSHOT_EVERY * 5


@pytest.fixture
def nodes() -> Iterator[list[BrokerProcess]]:
    started: list[BrokerProcess] = []
    yield started
    for node in started:
        node.kill()


@pytest.fixture
def share_consumer(nodes: list[BrokerProcess]) -> Iterator[Callable[..., ShareConsumer]]:
    yield from share_consumer_factory(lambda: nodes[-1].bootstrap)


def test_acknowledged_records_stay_acknowledged_and_held_ones_return_after_kill_9(
    tmp_path: Path, nodes: list[BrokerProcess], share_consumer: Callable[..., ShareConsumer]
) -> None:
    first = start_broker(tmp_path / "node")
    nodes.append(first)
    topic, group = unique("share-crash"), unique("share-crash-group")
    create_topic(first.bootstrap, topic, 1)
    set_group_config(first.bootstrap, group, {"share.auto.offset.reset": "earliest"})
    produce(first.bootstrap, topic, range(FIRST), partitions=1)
    with holder(first.bootstrap, group, topic) as held:
        produce(first.bootstrap, topic, range(FIRST, TOTAL), partitions=1)  # never delivered before the crash
        first.kill()
        second = start_broker(tmp_path / "node")
        nodes.append(second)
        consumer = share_consumer(group, topic)
        seen: dict[int, int] = {}
        expected = set(range(TOTAL)) - held.acknowledged
        drain([consumer], lambda: expected <= seen.keys(), lambda _, m: note_once(seen, m),
              "the held and the undelivered records after kill -9")
        consumer.poll(0.05)  # implicit mode: accepts what the last poll returned
        consumer.commit_sync(10)
        consumer.close()
    held.check_redelivered(seen, range(TOTAL))

    # Everything is acknowledged now, and stays so across another crash: a record produced after it is the only
    # one the group gets.
    second.kill()
    third = start_broker(tmp_path / "node")
    nodes.append(third)
    produce(third.bootstrap, topic, [TOTAL], partitions=1)
    after: list[int] = []
    drain([share_consumer(group, topic)], lambda: TOTAL in after, lambda _, m: after.append(int(m.value())),
          "the record produced after the second crash")
    assert after == [TOTAL], f"acknowledged records delivered again after the second crash: {sorted(after)[:20]}"


def test_a_consumer_reads_on_through_kill_9_after_many_checkpoints(
    tmp_path: Path, nodes: list[BrokerProcess], share_consumer: Callable[..., ShareConsumer]
) -> None:
    """Many small acknowledged batches (more than one snapshot's worth of updates, so the share stream has been
    checkpointed and trimmed) and one batch in flight when the broker dies; the broker comes back on the same port
    and the same consumer reads on."""
    overrides = {"listeners": f"PLAINTEXT://127.0.0.1:{free_port()},CONTROLLER://127.0.0.1:0"}
    first = start_broker(tmp_path / "node", overrides)
    nodes.append(first)
    topic, group = unique("share-checkpoints"), unique("share-checkpoints-group")
    create_topic(first.bootstrap, topic, 1)
    set_group_config(first.bootstrap, group, {"share.auto.offset.reset": "earliest"})
    produced = range(MANY)
    produce(first.bootstrap, topic, produced, partitions=1, batch_records=5)  # whole batches are acquired
    reader = LiveReader(share_consumer(group, topic, **{"share.acknowledgement.mode": "explicit",
                                                        "max.poll.records": 5, "reconnect.backoff.max.ms": 500}))
    reader.read_until(MANY * 3 // 4, "three quarters of the records, in small acknowledged batches")
    reader.hold_a_batch()
    first.kill()
    second = start_broker(tmp_path / "node", overrides)
    nodes.append(second)
    assert second.port == first.port
    reader.read_until(MANY, "the rest of the records after kill -9")
    reader.check(produced)
