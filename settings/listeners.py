"""A node's listeners as its settings name them: ``listeners`` and ``advertised.listeners`` (``NAME://host:port``),
and ``listener.security.protocol.map``. A leaf of ``settings``, read by :mod:`settings.server` and by whatever binds
or names a listener."""

from __future__ import annotations

from dataclasses import dataclass

from settings.endpoint import Endpoint
from storage.config import ConfigError


@dataclass(frozen=True, slots=True)
class Listener:
    """A configured listener; ``host`` "" binds every interface."""

    name: str
    host: str
    port: int

    def endpoint(self, security_protocol: str) -> Endpoint:
        return Endpoint(self.name, self.host, self.port, security_protocol)


def parse_listeners(text: str, key: str) -> tuple[Listener, ...]:
    """``NAME://host:port,...`` (host may be empty or a bracketed IPv6 address); names must be unique."""
    out: list[Listener] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, sep, rest = item.partition("://")
        if not sep or not name:
            raise ConfigError(f"{key}: {item!r} is not NAME://host:port")
        host, colon, port_text = rest.rpartition(":")
        if not colon:
            raise ConfigError(f"{key}: {item!r} has no port")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        try:
            port = int(port_text)
        except ValueError:
            raise ConfigError(f"{key}: port {port_text!r} of {item!r} is not a number") from None
        if not 0 <= port <= 65535:
            raise ConfigError(f"{key}: port {port} of {item!r} is out of range")
        if any(existing.name == name.upper() for existing in out):
            raise ConfigError(f"{key}: listener name {name} appears twice")
        out.append(Listener(name.upper(), host, port))
    return tuple(out)


def parse_protocol_map(text: str) -> dict[str, str]:
    """``listener.security.protocol.map``: each listener's security protocol, by upper-case listener name."""
    out: dict[str, str] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, colon, protocol = item.partition(":")
        if not colon:
            raise ConfigError(f"listener.security.protocol.map: {item!r} is not NAME:PROTOCOL")
        out[name.strip().upper()] = protocol.strip().upper()
    return out
