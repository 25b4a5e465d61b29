"""A listener's listening sockets, bound before anything serves them: a node binds its client listeners' as soon as
it has read its config (``node.early_listen``), and a :class:`~wire.listener.KafkaListener` that accepts on its own
sockets (TLS, connection quotas) binds them here too. A module of its own so that binding needs socket and asyncio
only, not the listener's connection, codec and metrics stack: ``fjord server start`` listens before it imports that.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import typing

logger = logging.getLogger(__name__)

_BIND_ATTEMPTS = 5  # port 0 on several addresses: the first one's port may be taken on another


async def bind_listening(host: str, port: int, *, backlog: int, listener_name: str) -> list[socket.socket]:
    """Listening sockets for one listener: one per address ``host`` resolves to (``localhost``: 127.0.0.1 and ::1),
    as asyncio's own server binds; an empty host or 0.0.0.0 is every IPv4 address. With port 0 the first socket's
    port is used for the others (tried again, a few times, when another process has it on one of the addresses).
    They listen at once: the kernel completes a client's TCP handshake from then on, while the connection is only
    accepted (and its requests read) once the listener serves."""
    if host in ("", "0.0.0.0"):
        addresses: list[tuple[socket.AddressFamily, tuple[typing.Any, ...]]] = [(socket.AF_INET, (host, port))]
    else:
        infos = await asyncio.get_running_loop().getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
        addresses = list(dict.fromkeys((family, tuple(sockaddr)) for family, _t, _p, _c, sockaddr in infos))
    attempts = _BIND_ATTEMPTS if port == 0 and len(addresses) > 1 else 1
    attempt = 1
    while True:
        try:
            return _bind_each(addresses, port, backlog, listener_name)
        except OSError:
            if attempt >= attempts:
                raise
            attempt += 1


def _bind_each(
    addresses: list[tuple[socket.AddressFamily, tuple[typing.Any, ...]]], port: int, backlog: int, listener_name: str
) -> list[socket.socket]:
    """Listening sockets for ``addresses``, all on one port (with port 0, the first one's). An address whose
    socket cannot even be made (its address family unsupported on this host: ::1 without IPv6) is skipped, as
    asyncio's server skips it, as long as another binds; every error names its address."""
    bound: list[socket.socket] = []
    skipped: OSError | None = None
    try:
        for family, sockaddr in addresses:
            each_port = int(bound[0].getsockname()[1]) if bound else port
            try:
                sock = socket.socket(family, socket.SOCK_STREAM)
            except OSError as exc:
                skipped = OSError(exc.errno, f"{sockaddr[0]}:{each_port}: {exc.strerror}")
                logger.warning("listener %s does not listen on %s: %s", listener_name, sockaddr[0], exc.strerror)
                continue
            bound.append(sock)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:  # the IPv4 addresses have their own sockets
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind((sockaddr[0], each_port, *sockaddr[2:]))
                sock.listen(backlog)
            except OSError as exc:
                raise OSError(exc.errno, f"{sockaddr[0]}:{each_port}: {exc.strerror}") from None
            sock.setblocking(False)
    except OSError:
        for sock in bound:
            sock.close()
        raise
    if not bound:
        raise skipped if skipped is not None else OSError(f"no address to listen on for {listener_name}")
    return bound
