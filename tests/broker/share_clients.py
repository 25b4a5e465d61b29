"""confluent-kafka's ShareConsumer for the share group tests: a group's configs set as an operator sets them
(IncrementalAlterConfigs on the GROUP resource), the consumer factory, and bounded polling of several consumers."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from confluent_kafka import Message, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from testkit.waiting import eventually

DEADLINE_S = 60.0


def set_group_config(bootstrap: str, group: str, configs: Mapping[str, str]) -> None:
    """Sets a group's configs (``kafka-configs --entity-type groups --alter``)."""
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    (future,) = admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, group,
                                                                incremental_configs=entries)]).values()
    future.result(timeout=30)


def share_consumer_factory(bootstrap: Callable[[], str]) -> Iterator[Callable[..., ShareConsumer]]:
    """The body of a share-consumer fixture: yields ``new(group, topic, **config)``, a subscribed ShareConsumer;
    whatever a test leaves open is closed afterwards (an open consumer keeps the interpreter from exiting)."""
    opened: list[ShareConsumer] = []

    def new(group: str, topic: str, **extra: Any) -> ShareConsumer:
        consumer = ShareConsumer({"bootstrap.servers": bootstrap(), "group.id": group, **extra})
        consumer.subscribe([topic])
        opened.append(consumer)
        return consumer

    yield new
    for consumer in opened:
        try:
            consumer.close()
        except RuntimeError:
            pass  # closed by the test


def drain(
    consumers: list[ShareConsumer],
    done: Callable[[], bool],
    on_message: Callable[[ShareConsumer, Message], None],
    what: str,
    timeout: float = DEADLINE_S,
) -> None:
    """Polls every consumer in turn (short polls) until ``done()``; fails after ``timeout`` seconds."""

    def polled() -> bool:
        for consumer in consumers:
            for message in consumer.poll(0.05):
                assert message.error() is None, message.error()
                on_message(consumer, message)
        return done()

    eventually(polled, timeout=timeout, interval=0.001, what=what)
