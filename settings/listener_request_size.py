"""The largest request frame each listener reads: ``listener.name.<listener>.socket.request.max.bytes``.

``socket.request.max.bytes`` bounds every listener of a node. A node serving clients it does not trust on one
listener and its own brokers or a few operators on another may bound the first far lower: a frame claiming more
than its listener's bound closes the connection it came on before a byte of its body is read (``wire.frames``), as
``socket.request.max.bytes`` does. Kafka reads the key broker-wide; the ``listener.name.<l>.`` form is Fjord's, in
the shape of Kafka's other per-listener keys (``listener.name.<l>.max.connections``), and like them it is read from
the properties file only. A bad value, or one naming a listener the node does not have (a typo would otherwise
leave the listener at the broker-wide bound unnoticed), stops the node naming the key.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Final

from settings.config_key import ConfigValueError
from settings.keys import BROKER_KEYS
from settings.security import listener_prefixed
from storage.config import ConfigError

KEY: Final = "socket.request.max.bytes"


def listener_request_override(name: str) -> str | None:
    """The listener (upper-cased) a ``listener.name.<listener>.socket.request.max.bytes`` key names, else None."""
    split = listener_prefixed(name)
    return split[0] if split is not None and split[1] == KEY else None


def listener_request_max_bytes(props: Mapping[str, str], listeners: Collection[str]) -> dict[str, int]:
    """{listener: bound} of the overrides in ``props``; ConfigError naming a bad one or an unknown listener."""
    out: dict[str, int] = {}
    for name, text in props.items():
        listener = listener_request_override(name)
        if listener is None:
            continue
        if listener not in listeners:
            raise ConfigError(f"{name}: {listener} is not one of the listeners ({', '.join(sorted(listeners))})")
        try:
            out[listener] = int(BROKER_KEYS[KEY].parse(text))
        except ConfigValueError as exc:
            raise ConfigError(f"{name}: {exc}") from None
    return out
