"""``host:port`` as Kafka reads an address in ``controller.quorum.voters``, ``controller.quorum.bootstrap.servers``
and a tool's ``--bootstrap-server``: the last colon splits it, an IPv6 host may be bracketed, and the port is a
number from 0 to 65535.

One parser for every place that takes such an address, so that none lets through what another refuses: a port past
65535 reached the socket layer before, and a CLI printed the socket's traceback instead of naming the option.
"""

from __future__ import annotations

MAX_PORT = 65535


def split_host_port(item: str) -> tuple[str, int] | None:
    """``(host, port)`` of ``host:port`` (brackets taken off an IPv6 host), or None when ``item`` is not one: no
    colon, no host, or a port that is not a number from 0 to :data:`MAX_PORT`."""
    host, colon, port = item.strip().rpartition(":")
    host = host.strip()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not colon or not host or not port.isascii() or not port.isdigit() or int(port) > MAX_PORT:
        return None
    return host, int(port)
