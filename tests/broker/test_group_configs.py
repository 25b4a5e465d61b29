"""A group's dynamic configs (the GROUP config resource, ``kafka-configs.sh --entity-type groups``) through real
admin clients: described with the broker's values until set, set and deleted with IncrementalAlterConfigs,
replaced with legacy AlterConfigs, refused with INVALID_CONFIG naming the key when outside the broker's bounds,
listed by ListConfigResources, kept across a restart (they are metadata records), and used: a consumer group's own
heartbeat interval is what its members are told."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

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
from kafka.admin import ConfigResource as KConfigResource
from kafka.admin import ConfigResourceType, KafkaAdminClient
from kio.schema.errors import ErrorCode

from metadata.controller_api import ConfigResource as FjordResource
from testkit.node_process import BrokerProcess, WireClient, start_broker
from tests.broker.cg_wire import await_coordinator, heartbeat
from tests.telemetry_wire import list_resources
from wire import schema

TIMEOUT = 15.0
#: Bounds wider than Kafka's defaults, so a value only these allow proves the broker's own bounds are used.
BOUNDS = {"group.share.max.record.lock.duration.ms": "120000", "group.share.record.lock.duration.ms": "40000"}


@pytest.fixture(scope="module")
def bounded_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = start_broker(tmp_path_factory.mktemp("group-configs"), BOUNDS)
    try:
        yield process
    finally:
        assert process.stop() == 0, process.log_text()


@pytest.fixture(scope="module")
def admin(bounded_broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": bounded_broker.bootstrap, "socket.timeout.ms": 10000})


def describe(admin: AdminClient, group: str) -> dict[str, tuple[str, ConfigSource]]:
    (future,) = admin.describe_configs([ConfigResource(ResourceType.GROUP, group)]).values()
    return {name: (entry.value, ConfigSource(entry.source)) for name, entry in future.result(timeout=TIMEOUT).items()}


def alter(admin: AdminClient, group: str, *changes: tuple[str, str | None], validate_only: bool = False) -> Any:
    entries = [
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.DELETE if value is None
                    else AlterConfigOpType.SET)
        for name, value in changes
    ]
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)
    (future,) = admin.incremental_alter_configs([resource], validate_only=validate_only).values()
    return future.result(timeout=TIMEOUT)


def refusal(admin: AdminClient, group: str, *changes: tuple[str, str]) -> KafkaError:
    with pytest.raises(KafkaException) as info:
        alter(admin, group, *changes)
    error: KafkaError = info.value.args[0]
    return error


def test_confluent_admin_sets_describes_and_deletes_a_share_groups_configs(admin: AdminClient) -> None:
    before = describe(admin, "cfg-orders")
    assert before["share.record.lock.duration.ms"] == ("40000", ConfigSource.DEFAULT_CONFIG)  # the broker's value
    assert before["share.auto.offset.reset"] == ("latest", ConfigSource.DEFAULT_CONFIG)
    assert before["consumer.session.timeout.ms"] == ("45000", ConfigSource.DEFAULT_CONFIG)

    alter(admin, "cfg-orders", ("share.record.lock.duration.ms", "90000"), ("share.isolation.level", "read_committed"),
          ("share.auto.offset.reset", "by_duration:PT1H"))
    after = describe(admin, "cfg-orders")
    assert after["share.record.lock.duration.ms"] == ("90000", ConfigSource.GROUP_CONFIG)
    assert after["share.isolation.level"] == ("read_committed", ConfigSource.GROUP_CONFIG)
    assert after["share.auto.offset.reset"] == ("by_duration:PT1H", ConfigSource.GROUP_CONFIG)
    assert describe(admin, "cfg-other")["share.isolation.level"] == ("read_uncommitted", ConfigSource.DEFAULT_CONFIG)

    alter(admin, "cfg-orders", ("share.isolation.level", None))
    assert describe(admin, "cfg-orders")["share.isolation.level"] == ("read_uncommitted", ConfigSource.DEFAULT_CONFIG)
    alter(admin, "cfg-orders", ("share.record.lock.duration.ms", "50000"), validate_only=True)
    assert describe(admin, "cfg-orders")["share.record.lock.duration.ms"] == ("90000", ConfigSource.GROUP_CONFIG)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("share.record.lock.duration.ms", "130000"),
         "share.record.lock.duration.ms must be less than or equal to group.share.max.record.lock.duration.ms"),
        (("share.session.timeout.ms", "30000"),
         "share.session.timeout.ms must be greater than or equal to group.share.min.session.timeout.ms"),
        (("consumer.heartbeat.interval.ms", "20000"),
         "consumer.heartbeat.interval.ms must be less than or equal to group.consumer.max.heartbeat.interval.ms"),
        (("share.auto.offset.reset", "sometimes"), "share.auto.offset.reset"),
        (("share.record.lock.duration.ms", "soon"), "share.record.lock.duration.ms"),
        (("share.partition.max.record.locks", "10"), "Unknown group config name: share.partition.max.record.locks"),
    ],
)
def test_a_bad_value_is_invalid_config_naming_the_key_and_changes_nothing(
    admin: AdminClient, change: tuple[str, str], message: str
) -> None:
    alter(admin, "cfg-bad", ("share.record.lock.duration.ms", "70000"))
    error = refusal(admin, "cfg-bad", ("share.isolation.level", "read_committed"), change)
    assert error.code() == KafkaError.INVALID_CONFIG
    assert message in error.str()
    described = describe(admin, "cfg-bad")
    assert described["share.record.lock.duration.ms"] == ("70000", ConfigSource.GROUP_CONFIG)
    assert described["share.isolation.level"] == ("read_uncommitted", ConfigSource.DEFAULT_CONFIG)


def test_legacy_alter_configs_replaces_a_groups_configs(
    bounded_broker: BrokerProcess, admin: AdminClient, wire: Callable[[int], WireClient]
) -> None:
    client = KafkaAdminClient(bootstrap_servers=bounded_broker.bootstrap, request_timeout_ms=10000)
    try:
        group = KConfigResource(ConfigResourceType.GROUP, "cfg-legacy")
        client.alter_configs([KConfigResource(ConfigResourceType.GROUP, "cfg-legacy", configs={
            "share.heartbeat.interval.ms": "6000", "share.auto.offset.reset": "earliest"})], incremental=False)
        assert describe(admin, "cfg-legacy")["share.auto.offset.reset"] == ("earliest", ConfigSource.GROUP_CONFIG)
        # kafka-python re-sends the keys it does not change (it describes them first), so they stay.
        client.alter_configs([KConfigResource(ConfigResourceType.GROUP, "cfg-legacy",
                                              configs={"share.heartbeat.interval.ms": "7000"})], incremental=False)
        described = client.describe_configs([group], config_filter="all")
        entries = {e["name"]: e["value"] for e in _kafka_python_entries(described)}
        assert (entries["share.heartbeat.interval.ms"], entries["share.auto.offset.reset"]) == ("7000", "earliest")
    finally:
        client.close()
    # AlterConfigs as sent replaces the whole set: the key left out returns to the broker's value.
    (future,) = admin.alter_configs([ConfigResource(ResourceType.GROUP, "cfg-legacy",
                                                    set_config={"share.heartbeat.interval.ms": "8000"})]).values()
    future.result(timeout=TIMEOUT)
    after = describe(admin, "cfg-legacy")
    assert after["share.heartbeat.interval.ms"] == ("8000", ConfigSource.GROUP_CONFIG)
    assert after["share.auto.offset.reset"] == ("latest", ConfigSource.DEFAULT_CONFIG)
    listed = list_resources(wire(bounded_broker.port), types=(FjordResource.GROUP,)).config_resources
    assert "cfg-legacy" in {r.resource_name for r in listed}
    assert {r.resource_type for r in listed} == {FjordResource.GROUP}


def _kafka_python_entries(described: Any) -> list[dict[str, Any]]:
    """The config entries of kafka-python's describe_configs answer (a list of responses, or a nested dict)."""
    if isinstance(described, dict):
        (by_name,) = described.values()
        (configs,) = by_name.values()
        return [{"name": name, "value": entry["value"]} for name, entry in configs.items()]
    (response,) = described
    (result,) = response.results
    return [{"name": entry[0], "value": entry[1]} for entry in result[4]]


def test_a_groups_configs_survive_a_restart(broker_factory: Callable[..., BrokerProcess], tmp_path: Path) -> None:
    first = broker_factory(BOUNDS)
    admin = AdminClient({"bootstrap.servers": first.bootstrap})
    alter(admin, "cfg-durable", ("share.record.lock.duration.ms", "100000"))
    assert first.stop() == 0, first.log_text()
    second = broker_factory(BOUNDS, data_dir=first.data_dir)
    again = AdminClient({"bootstrap.servers": second.bootstrap})
    assert describe(again, "cfg-durable")["share.record.lock.duration.ms"] == ("100000", ConfigSource.GROUP_CONFIG)


def test_a_consumer_groups_own_heartbeat_interval_reaches_its_members(
    bounded_broker: BrokerProcess, admin: AdminClient, wire: Callable[[int], WireClient]
) -> None:
    client = wire(bounded_broker.port)
    await_coordinator(client, "cfg-consumers")
    joined = heartbeat(client, "cfg-consumers", str(uuid.uuid4()), 0, topics=(), owned={})
    assert (joined.error_code, schema.millis(joined.heartbeat_interval)) == (ErrorCode.none, 5000)  # the broker's
    alter(admin, "cfg-consumers", ("consumer.heartbeat.interval.ms", "7000"))
    again = heartbeat(client, "cfg-consumers", joined.member_id, joined.member_epoch, topics=())
    assert (again.error_code, schema.millis(again.heartbeat_interval)) == (ErrorCode.none, 7000)
    other = heartbeat(client, "cfg-consumers-other", str(uuid.uuid4()), 0, topics=(), owned={})
    assert schema.millis(other.heartbeat_interval) == 5000
