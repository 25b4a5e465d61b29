"""A group's dynamic configs on a cluster: set through one broker, checked by the active controller against the
bounds of its own node (INVALID_CONFIG naming the key), and read back from another broker, which learns them from
the metadata log."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)

from node.local_cluster import LocalCluster
from testkit.waiting import eventually

TIMEOUT = 15.0


def _described(admin: AdminClient, group: str) -> dict[str, tuple[str, int]]:
    (future,) = admin.describe_configs([ConfigResource(ResourceType.GROUP, group)]).values()
    return {name: (entry.value, entry.source) for name, entry in future.result(timeout=TIMEOUT).items()}


def _set(admin: AdminClient, group: str, key: str, value: str) -> None:
    entry = ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
    (future,) = admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, group,
                                                                incremental_configs=[entry])]).values()
    future.result(timeout=TIMEOUT)


def test_a_group_config_set_through_one_broker_is_seen_by_another(
    cluster_factory: Callable[..., LocalCluster],
) -> None:
    cluster = cluster_factory(controllers=1, brokers=2, extra={"group.share.max.record.lock.duration.ms": "90000"})
    first, second = (AdminClient({"bootstrap.servers": f"127.0.0.1:{node.spec.port}"}) for node in cluster.brokers)
    _set(first, "cluster-share", "share.record.lock.duration.ms", "80000")  # beyond Kafka's default bound, within ours
    eventually(lambda: _described(second, "cluster-share")["share.record.lock.duration.ms"],
               until=lambda got: got == ("80000", ConfigSource.GROUP_CONFIG.value), timeout=15,
               what="the group config to reach the second broker")

    with pytest.raises(KafkaException) as info:
        _set(second, "cluster-share", "share.record.lock.duration.ms", "95000")
    error: KafkaError = info.value.args[0]
    assert error.code() == KafkaError.INVALID_CONFIG
    assert "share.record.lock.duration.ms must be less than or equal to group.share.max.record.lock.duration.ms" in (
        error.str())
    assert _described(first, "cluster-share")["share.record.lock.duration.ms"] == ("80000",
                                                                                 ConfigSource.GROUP_CONFIG.value)
