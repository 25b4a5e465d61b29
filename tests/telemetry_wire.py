"""KIP-714 client telemetry at the wire level, for the tests: the requests a client and ``kafka-client-metrics.sh``
send (GetTelemetrySubscriptions, PushTelemetry, IncrementalAlterConfigs, DescribeConfigs and ListConfigResources on
CLIENT_METRICS resources) and a minimal OTLP encoder of gauge metrics, as a client's exporter writes them."""

from __future__ import annotations

import struct
import uuid
from collections.abc import Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from metadata.admin import config_wire
from metadata.controller_api import ConfigResource, IncrementalOp
from testkit.node_process import WireClient
from wire import codec, schema

CLIENT_METRICS = ConfigResource.CLIENT_METRICS


def call(wire: WireClient, request: Any, client_id: str = "fjord-tests") -> Any:
    correlation = wire.send(request, client_id=client_id)
    got, response = wire.receive(int(request.__api_key__), int(request.__version__))
    assert got == correlation
    return response


def subscribe(wire: WireClient, name: str, configs: Mapping[str, str | None]) -> tuple[ErrorCode, str | None]:
    ops = {key: IncrementalOp.SET if value is not None else IncrementalOp.DELETE for key, value in configs.items()}
    request = config_wire.alter_configs_request(ConfigResource(CLIENT_METRICS, name), configs, ops, False)
    return config_wire.read_alter_configs_response(call(wire, request))


def get_subscriptions(wire: WireClient, instance: uuid.UUID | None = None, client_id: str = "fjord-tests") -> Any:
    cls = codec.request_class(71, 0)
    return call(wire, schema.build(cls, client_instance_id=instance or uuid.UUID(int=0)), client_id)


def push(wire: WireClient, instance: uuid.UUID, subscription: int, payload: bytes = b"", *,
          compression: int = 0, terminating: bool = False, client_id: str = "fjord-tests") -> ErrorCode:
    cls = codec.request_class(72, 0)
    request = schema.build(cls, client_instance_id=instance, subscription_id=subscription, terminating=terminating,
                           compression_type=compression, metrics=payload)
    return ErrorCode(int(call(wire, request, client_id).error_code))


def list_resources(wire: WireClient, version: int = 1, types: tuple[int, ...] = ()) -> Any:
    cls = codec.request_class(74, version)
    return call(wire, schema.build(cls, **({"resource_types": types} if version >= 1 else {})))


def describe(wire: WireClient, name: str) -> dict[str, tuple[str | None, int]]:
    cls = codec.request_class(32, 4)
    resource = schema.build_nested(cls, "resources", resource_type=CLIENT_METRICS, resource_name=name,
                                   configuration_keys=None)
    result = call(wire, schema.build(cls, resources=(resource,), include_synonyms=False,
                                      include_documentation=False)).results[0]
    assert result.error_code == ErrorCode.none, result.error_message
    return {c.name: (c.value, int(c.config_source)) for c in result.configs}


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def otlp_gauges(metrics: Mapping[str, float], attributes: Mapping[str, str] | None = None) -> bytes:
    """A MetricsData message holding one gauge point per metric."""
    attrs = b"".join(
        _field(7, _field(1, k.encode()) + _field(2, _field(1, v.encode()))) for k, v in (attributes or {}).items()
    )
    encoded = b"".join(
        _field(2, _field(1, name.encode()) + _field(5, _field(1, _varint(4 << 3 | 1) + struct.pack("<d", value)
                                                                + attrs)))
        for name, value in metrics.items()
    )
    return _field(1, _field(2, encoded))
