"""Connection quota keys on a broker (issue 13): Kafka's ``max.connections*`` keys are accepted in the properties
file and applied to the client listener, changed on a running broker with IncrementalAlterConfigs (the per-IP
limit then closes the extra connection), shown by DescribeConfigs with their source, and a bad value is refused
(at start, or with INVALID_REQUEST, Kafka's code for a broker value). One in-process node; the admin requests go
over a raw ``WireClient`` in a thread, as the node serves on this test's event loop. The accept-path behaviour
itself is ``tests/wire/test_connection_limits``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from controller.decisions.configs import plan_alter_configs
from metadata.controller_api import ConfigResource
from metadata.errors import ControllerError
from metadata.image import MetadataImage
from node.process import Node
from settings.describe import ConfigSource
from settings.server import ServerConfig
from storage.config import ConfigError
from testkit.node_process import WireClient, api_versions_request, default_overrides
from testkit.waiting import eventually_async
from wire import codec, schema

TIMEOUT_S = 10.0
STATIC = {
    "max.connections.per.ip": "50",
    "max.connections.per.ip.overrides": "10.1.1.1:7",
    "max.connection.creation.rate": "1000",
    "listener.name.plaintext.max.connections": "40",
    "listener.name.plaintext.max.connection.creation.rate": "500",
    "socket.listen.backlog.size": "7",
}
KEYS = ("max.connections", "max.connections.per.ip", "max.connections.per.ip.overrides", "max.connection.creation.rate")


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    overrides = {**default_overrides(tmp_path), **STATIC}
    started = Node(ServerConfig.load(None, [f"{k}={v}" for k, v in overrides.items()]))
    await started.start()
    try:
        yield started
    finally:
        await started.stop()


def _describe(port: int, broker: str) -> dict[str, tuple[str | None, int, bool]]:
    """{key: (value, source, read only)} of the connection quota keys of broker resource ``broker``."""
    cls = codec.request_class(32, 4)
    resource = schema.build_nested(cls, "resources", resource_type=4, resource_name=broker, configuration_keys=KEYS)
    with WireClient(port) as client:
        (result,) = client.request(schema.build(cls, resources=(resource,))).results
    assert result.error_code == ErrorCode.none, result.error_message
    return {entry.name: (entry.value, entry.config_source, entry.read_only) for entry in result.configs}


def _incremental_alter(port: int, broker: str, values: Mapping[str, str]) -> ErrorCode:
    cls = codec.request_class(44, 1)
    ops = tuple(
        schema.build_nested(schema.field_entity(cls, "resources"), "configs", name=k, config_operation=0, value=v)
        for k, v in values.items()
    )
    resource = schema.build_nested(cls, "resources", resource_type=4, resource_name=broker, configs=ops)
    with WireClient(port) as client:
        (result,) = client.request(schema.build(cls, resources=(resource,), validate_only=False)).responses
    code: ErrorCode = result.error_code
    return code


def _api_versions_served(client: WireClient) -> bool:
    try:
        return bool(client.request(api_versions_request()).error_code == ErrorCode.none)
    except ConnectionError:
        return False


async def test_connection_quota_keys_at_start_and_altered_at_runtime(node: Node) -> None:
    gate = node.broker.connection_gate
    assert gate is not None
    settings = gate.limits.settings
    assert (settings.max_connections_per_ip, dict(settings.per_ip_overrides)) == (50, {"10.1.1.1": 7})
    assert settings.max_connection_creation_rate == 1000
    assert dict(settings.listener_max_connections) == {"PLAINTEXT": 40}
    assert dict(settings.listener_max_connection_creation_rate) == {"PLAINTEXT": 500}
    assert node.broker.server.backlog == 7, "socket.listen.backlog.size is the listeners' listen backlog"
    port = node.broker.server.bound_port
    broker = str(node.node_id)

    described = await asyncio.to_thread(_describe, port, broker)
    assert described["max.connections.per.ip"] == ("50", ConfigSource.STATIC_BROKER_CONFIG.value, False)
    assert described["max.connections"] == (str(2**31 - 1), ConfigSource.DEFAULT_CONFIG.value, False)

    altered = await asyncio.to_thread(_incremental_alter, port, "", {"max.connections.per.ip": "2"})
    assert altered == ErrorCode.none
    await eventually_async(
        lambda: gate.limits.settings.max_connections_per_ip == 2,
        timeout=TIMEOUT_S,
        what="the cluster-wide max.connections.per.ip reaches the listener",
    )
    described = await asyncio.to_thread(_describe, port, broker)
    assert described["max.connections.per.ip"] == ("2", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value, False)
    assert settings.listener_max_connections == gate.limits.settings.listener_max_connections, "static ones stay"

    await eventually_async(
        lambda: gate.limits.count(address="127.0.0.1") == 0, timeout=TIMEOUT_S, what="the admin connections closed"
    )
    first, second = WireClient(port), WireClient(port)
    third = WireClient(port)
    try:
        assert await asyncio.to_thread(_api_versions_served, first)
        assert await asyncio.to_thread(_api_versions_served, second)
        assert await asyncio.to_thread(third.is_closed_by_peer), "the third connection from 127.0.0.1 is refused"
        assert await asyncio.to_thread(_api_versions_served, first)
    finally:
        for client in (first, second, third):
            client.close()

    await eventually_async(
        lambda: gate.limits.count(address="127.0.0.1") == 0, timeout=TIMEOUT_S, what="the test connections closed"
    )
    refused = {"max.connections.per.ip.overrides": "no-count", "max.connection.creation.rate": "-1"}
    for key, value in refused.items():
        assert await asyncio.to_thread(_incremental_alter, port, broker, {key: value}) == ErrorCode.invalid_request
    # Per-listener keys are static in Fjord: AlterConfigs does not know them.
    unknown = {"listener.name.plaintext.max.connections": "5"}
    assert await asyncio.to_thread(_incremental_alter, port, broker, unknown) == ErrorCode.invalid_request
    # max.connections.per.ip=0 with empty overrides would lock every client out: refused as Kafka's validateValues
    # does, whether it is asked cluster-wide or of this broker; with overrides it is Kafka's allow-list.
    locked_out = {"max.connections.per.ip": "0", "max.connections.per.ip.overrides": ""}
    for resource in ("", broker):
        assert await asyncio.to_thread(_incremental_alter, port, resource, locked_out) == ErrorCode.invalid_request
    allow_list = {"max.connections.per.ip": "0", "max.connections.per.ip.overrides": "127.0.0.1:5"}
    assert await asyncio.to_thread(_incremental_alter, port, broker, allow_list) == ErrorCode.none
    await eventually_async(
        lambda: (
            (gate.limits.settings.max_connections_per_ip, dict(gate.limits.settings.per_ip_overrides))
            == (0, {"127.0.0.1": 5})
        ),
        timeout=TIMEOUT_S,
        what="the allow-list reaches the listener",
    )


def test_a_recorded_per_ip_zero_without_overrides_is_ignored(caplog: pytest.LogCaptureFixture) -> None:
    """The safety net behind the AlterConfigs check, which cannot see the brokers' files: dynamic values that, merged
    with the file, would lock every client out give way to the file's pair, both keys together."""
    config = ServerConfig.from_properties({"max.connections.per.ip": "9"})
    settings = config.connection_limits({"max.connections.per.ip": "0"}, None)
    assert (settings.max_connections_per_ip, dict(settings.per_ip_overrides)) == (9, {})
    assert "ignoring the dynamic max.connections.per.ip" in caplog.text


def test_an_allow_list_in_the_file_never_falls_open_to_unlimited() -> None:
    """The file's allow-list (per.ip=0 with overrides) emptied dynamically: the file's allow-list stays in force, not
    its per.ip alone (0 without overrides once meant no limit at all)."""
    config = ServerConfig.from_properties(
        {"max.connections.per.ip": "0", "max.connections.per.ip.overrides": "127.0.0.1:5"}
    )
    for cluster, node in (
        ({"max.connections.per.ip.overrides": ""}, None),
        (None, {"max.connections.per.ip": "0", "max.connections.per.ip.overrides": ""}),
    ):
        settings = config.connection_limits(cluster, node)
        assert (settings.max_connections_per_ip, dict(settings.per_ip_overrides)) == (0, {"127.0.0.1": 5})


def test_a_dynamic_per_ip_zero_relying_on_the_files_overrides_is_accepted() -> None:
    """Kafka merges a dynamic max.connections.per.ip=0 with the file's overrides: the controller, which cannot see
    that file, accepts it and judges only a pair set dynamically in full."""
    image = MetadataImage(cluster_id="test")
    for name in ("", "1"):
        resource = ConfigResource(ConfigResource.BROKER, name)
        (record,) = plan_alter_configs(image, resource, {"max.connections.per.ip": "0"}, {})
        assert (record.name, record.value) == ("max.connections.per.ip", "0")
        with pytest.raises(ControllerError, match=r"only if max\.connections\.per\.ip\.overrides"):
            plan_alter_configs(
                image, resource, {"max.connections.per.ip": "0", "max.connections.per.ip.overrides": ""}, {}
            )
    config = ServerConfig.from_properties({"max.connections.per.ip.overrides": "127.0.0.1:5"})
    settings = config.connection_limits(None, {"max.connections.per.ip": "0"})
    assert (settings.max_connections_per_ip, dict(settings.per_ip_overrides)) == (0, {"127.0.0.1": 5})


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"listener.name.plaintext.max.connections": "many"}, "listener.name.plaintext.max.connections"),
        ({"max.connections.per.ip": "0"}, "only if max.connections.per.ip.overrides"),
        ({"max.connections.per.ip.overrides": "127.0.0.1"}, "is not host:count"),
    ],
)
def test_bad_connection_quota_values_stop_the_start(props: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ServerConfig.from_properties(props)
