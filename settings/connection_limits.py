"""A node's connection quota settings (``wire.connection_limits``) from its properties and the dynamic broker configs.

The broker-wide keys (``max.connections``, ``max.connections.per.ip``, ``max.connections.per.ip.overrides``,
``max.connection.creation.rate``) are dynamic, as in Kafka: a value set on this broker with AlterConfigs wins over the
cluster-wide default (the "" broker resource), which wins over the properties file. The per-listener forms
``listener.name.<l>.max.connections`` and ``listener.name.<l>.max.connection.creation.rate`` are read from the
properties file only: Fjord's config catalogue has no templated dynamic keys, so AlterConfigs refuses them as
unknown. Host names in the overrides are resolved here, so the accept path compares addresses only: once per change
of the keys' values (:func:`dynamic_texts`), and off the event loop (``node.process``).
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from collections.abc import Callable, Mapping
from typing import Any

from settings.config_key import ConfigValueError
from settings.keys import BROKER_KEYS
from settings.security import listener_prefixed
from storage.config import ConfigError
from wire.connection_limits import ConnectionLimitSettings, ip_key, parse_ip_overrides

logger = logging.getLogger(__name__)

#: The connection quota keys a listener may override (Kafka's ``SocketServer.ListenerReconfigurableConfigs``).
LISTENER_KEYS = ("max.connections", "max.connection.creation.rate")


def listener_connection_override(name: str) -> tuple[str, str] | None:
    """(listener name, key) of ``listener.name.<listener>.max.connections`` or ``...max.connection.creation.rate``,
    else None."""
    split = listener_prefixed(name)
    return split if split is not None and split[1] in LISTENER_KEYS else None


def listener_connection_limits(props: Mapping[str, str]) -> dict[str, dict[str, int]]:
    """{listener: {key: value}} of the per-listener connection quota keys in ``props``; ConfigError naming a bad one."""
    out: dict[str, dict[str, int]] = {}
    for name, text in props.items():
        override = listener_connection_override(name)
        if override is None:
            continue
        listener, key = override
        try:
            value = BROKER_KEYS[key].parse(text)
        except ConfigValueError as exc:
            raise ConfigError(f"{name}: {exc}") from None
        out.setdefault(listener, {})[key] = int(value)
    return out


#: The broker-wide connection quota keys, dynamic as in Kafka.
DYNAMIC_KEYS = (
    "max.connections",
    "max.connections.per.ip",
    "max.connections.per.ip.overrides",
    "max.connection.creation.rate",
)
_PER_IP_ZERO = "max.connections.per.ip can be set to zero only if max.connections.per.ip.overrides property is set."


def per_ip_refusal(max_per_ip: int, overrides_text: str) -> str | None:
    """Kafka's rule (``KafkaConfig.validateValues``): ``max.connections.per.ip`` may be 0 (no address may connect)
    only with overrides (the addresses that may); the message when it is broken, else None."""
    if max_per_ip == 0 and not parse_ip_overrides(overrides_text):
        return _PER_IP_ZERO
    return None


def check_per_ip(max_per_ip: int, overrides_text: str) -> None:
    """:func:`per_ip_refusal` of the properties file: ConfigError."""
    refused = per_ip_refusal(max_per_ip, overrides_text)
    if refused is not None:
        raise ConfigError(refused)


def dynamic_texts(
    cluster_dynamic: Mapping[str, str] | None, node_dynamic: Mapping[str, str] | None
) -> tuple[str | None, ...]:
    """The dynamic values of :data:`DYNAMIC_KEYS` in force (this broker's own, else the cluster-wide default): the
    settings are rebuilt (and host names resolved) only when these change, not at every broker config change."""
    node, cluster = node_dynamic or {}, cluster_dynamic or {}
    return tuple(node.get(key, cluster.get(key)) for key in DYNAMIC_KEYS)


def _resolve(overrides: Mapping[str, int]) -> dict[str, int]:
    """The overrides by address: IP literals as they are, host names as every address they resolve to."""
    out: dict[str, int] = {}
    for host, count in overrides.items():
        try:
            ipaddress.ip_address(host)
            out[ip_key(host)] = count
            continue
        except ValueError:
            pass
        try:
            infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
        except OSError as exc:
            logger.warning(
                "max.connections.per.ip.overrides: cannot resolve %s (%s); its override is not applied", host, exc
            )
            continue
        for info in infos:
            out[ip_key(str(info[4][0]))] = count
    return out


def connection_limit_settings(
    value: Callable[[str], Any],
    static: Mapping[str, str],
    inter_broker_listener: str | None,
    cluster_dynamic: Mapping[str, str] | None = None,
    node_dynamic: Mapping[str, str] | None = None,
) -> ConnectionLimitSettings:
    """The settings in force: ``value`` reads a broker key from the properties (its default when absent),
    ``static`` holds them as given (the per-listener keys), ``cluster_dynamic``/``node_dynamic`` are the image's
    dynamic broker configs (cluster-wide default, this broker's own)."""
    layers = (node_dynamic or {}, cluster_dynamic or {})

    def effective(name: str) -> Any:
        for layer in layers:
            text = layer.get(name)
            if text is not None:
                try:
                    return BROKER_KEYS[name].parse(text)
                except ConfigValueError as exc:  # validated when altered; an old record must not stop the broker
                    logger.warning("ignoring the dynamic value of %s: %s", name, exc)
        return value(name)

    per_listener = listener_connection_limits(static)
    overrides_text = str(effective("max.connections.per.ip.overrides") or "")
    per_ip = int(effective("max.connections.per.ip"))
    if per_ip_refusal(per_ip, overrides_text) is not None:
        # The dynamic values merged with the file's lock every address out: AlterConfigs could not refuse it, as
        # the controller does not see this broker's file. The file's pair applies, both keys together (start-up
        # checked it): never its per.ip alone, whose 0 without the overrides it came with would mean no limit.
        per_ip = int(value("max.connections.per.ip"))
        overrides_text = str(value("max.connections.per.ip.overrides") or "")
        logger.warning(
            "ignoring the dynamic max.connections.per.ip and max.connections.per.ip.overrides: together "
            "with the properties file they set max.connections.per.ip=0 without overrides (no address "
            "could connect); the properties file's max.connections.per.ip=%d and overrides %r apply",
            per_ip,
            overrides_text,
        )
    return ConnectionLimitSettings(
        max_connections=int(effective("max.connections")),
        max_connections_per_ip=per_ip,
        per_ip_overrides=_resolve(parse_ip_overrides(overrides_text)),
        max_connection_creation_rate=int(effective("max.connection.creation.rate")),
        listener_max_connections={
            name: limits["max.connections"] for name, limits in per_listener.items() if "max.connections" in limits
        },
        listener_max_connection_creation_rate={
            name: limits["max.connection.creation.rate"]
            for name, limits in per_listener.items()
            if "max.connection.creation.rate" in limits
        },
        inter_broker_listener=inter_broker_listener,
        quota_window_num=int(value("quota.window.num")),
        quota_window_s=float(value("quota.window.size.seconds")),
    )
