"""Fetch sessions at a real node (Fetch v15 as the Java consumer sends it). From v13 a session names partitions by
topic id (KIP-516), as Kafka 4 consumers send them: a topic deleted and created again under the same name is not read
through a session that holds the old id (its partitions answer UNKNOWN_TOPIC_ID, and the client refreshes its
metadata), and forgetting the old id leaves the session, as Kafka's session does. The cache's size is the broker's
``max.incremental.fetch.session.cache.slots``."""

from __future__ import annotations

from collections.abc import Callable

from kio.schema.errors import ErrorCode
from kio.static.constants import uuid_zero

from testkit.node_process import BrokerProcess, WireClient
from tests.broker.java_requests import fetch, produce, records, wait_for_leader
from tests.broker.kafka_clients import call, entity, topic_name
from tests.topics import create_topic
from wire import schema


def _delete(client: WireClient, topic: str) -> None:
    deleted = call(client, 20, 6, topics=(schema.build(entity(20, 6, "topics"), name=topic, topic_id=uuid_zero),),
                   timeout=30_000)
    assert [r.error_code for r in deleted.responses] == [ErrorCode.none]


def test_a_topic_created_again_is_not_read_through_a_session_holding_its_old_id(
    shared_broker: BrokerProcess, wire: Callable[[int], WireClient]
) -> None:
    client = wire(shared_broker.port)
    topic = topic_name("recreated")
    create_topic(client, topic)
    old_id = wait_for_leader(client, topic).topic_id
    opened = fetch(client, old_id, 0, session_epoch=0, max_wait_ms=0)
    assert opened.error_code == ErrorCode.none and opened.session_id != 0
    session = opened.session_id

    _delete(client, topic)
    create_topic(client, topic)
    new_id = wait_for_leader(client, topic).topic_id
    assert new_id != old_id
    assert produce(client, topic, 0, records(3)).error_code == ErrorCode.none

    # The session's partition, by its old id: unknown, not the new topic's records under the old id.
    stale = fetch(client, old_id, 0, session_id=session, session_epoch=1, max_wait_ms=0, partitions=False)
    assert stale.error_code == ErrorCode.none
    [(topic_id, error, has_records)] = [
        (t.topic_id, p.error_code, bool(p.records)) for t in stale.responses for p in t.partitions
    ]
    assert (topic_id, error, has_records) == (old_id, ErrorCode.unknown_topic_id, False)

    # The client forgets the old id (the Java consumer does once its metadata has the new one): gone from the
    # session, whose next answer names nothing.
    topic_cls = entity(1, 15, "forgotten_topics_data")
    forgot = call(
        client, 1, 15, replica_id=-1, max_wait=0, min_bytes=1, max_bytes=50 << 20, isolation_level=0,
        session_id=session, session_epoch=2, topics=(),
        forgotten_topics_data=(schema.build(topic_cls, topic_id=old_id, partitions=(0,)),), rack_id="",
    )
    assert forgot.error_code == ErrorCode.none and forgot.responses == ()
    after = fetch(client, old_id, 0, session_id=session, session_epoch=3, max_wait_ms=0, partitions=False)
    assert after.error_code == ErrorCode.none and after.responses == ()


def test_no_session_slots_serves_every_fetch_without_a_session(
    broker_factory: Callable[..., BrokerProcess], wire: Callable[[int], WireClient]
) -> None:
    """``max.incremental.fetch.session.cache.slots=0`` is read, as Kafka reads it: no session is created."""
    node = broker_factory({"max.incremental.fetch.session.cache.slots": "0"})
    client = wire(node.port)
    topic = topic_name("no-sessions")
    create_topic(client, topic)
    topic_id = wait_for_leader(client, topic).topic_id
    answered = fetch(client, topic_id, 0, session_epoch=0, max_wait_ms=0)
    assert answered.error_code == ErrorCode.none and answered.session_id == 0
