"""A broker's client listeners listening from the start of the process, as Kafka's ``SocketServer`` binds its
sockets when it is made and only processes requests once the broker is ready (``enableRequestProcessing``).

``fjord server start`` binds them as soon as it has read its config, before it imports the broker, controller and
storage stacks and replays the metadata log (most of a restart). Only what reading the config and binding need is
imported before (tests/node/test_start_imports.py): ``settings.server`` and ``wire.listening_sockets``, neither of which
imports the listener, kio or the metrics; ``--add-scram`` and ``--feature`` are parsed after. From then on the kernel
completes a client's TCP handshake and queues what it sends; ``wire.early_answers`` answers its ApiVersions at once on
listeners without TLS, and the listener reads the rest once the node serves. A client reconnecting to a restarting
node thus connects while it starts instead of being refused: librdkafka (2.16) re-bootstraps on a refused connection
and tries again only when one of its metadata timers fires (its fast leader query, backing off to
``retry.backoff.max.ms``, or its one-second scan of unavailable topics), and asks for metadata on the next tick once
the connection is up. Refused until the node serves, it needs two ticks after that; connected while the node starts
but answered only once it serves, one; answered at once, none: the tick during the start sends the request, answered
as soon as the node serves (bench/kill_acks.py).

A service manager may hold the sockets instead (systemd's socket activation, ``node.socket_activation``): then
nothing is refused even while no node runs. A port in use fails the start here, with the same one line as before;
the sockets are handed to the broker's listeners (``wire.listener.KafkaListener(sockets=...)``), which close them
when they close, and the caller closes them if the node stops before its broker took them.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Mapping, Sequence

from node.socket_activation import assign, take_inherited
from settings.server import ServerConfig
from storage.config import ConfigError
from wire.listening_sockets import bind_listening

logger = logging.getLogger(__name__)

#: Each client listener's name and its listening sockets.
ListeningSockets = Mapping[str, Sequence[socket.socket]]


async def listen_early(config: ServerConfig) -> dict[str, list[socket.socket]]:
    """The listening sockets of every client listener of a broker or combined node (none for a controller): those
    a service manager passed (``node.socket_activation``), else bound here."""
    bound: dict[str, list[socket.socket]] = {}
    inherited = take_inherited()
    if "broker" not in config.process_roles:
        if inherited:
            for each in inherited:
                each.sock.close()
            raise ConfigError(f"socket activation: {inherited[0].describe()} passed to a node without client "
                              f"listeners (process.roles={','.join(config.process_roles)})")
        return bound
    passed = assign([(listener.name, listener.port) for listener in config.broker_listeners], inherited)
    backlog = int(config.value("socket.listen.backlog.size"))
    try:
        for listener in config.broker_listeners:
            host = listener.host or "0.0.0.0"
            if listener.name in passed:
                bound[listener.name] = passed.pop(listener.name)
                host, port = bound[listener.name][0].getsockname()[:2]
                logger.info("listener %s listening on %s:%d (passed by the service manager); requests are read once "
                            "the node is up", listener.name, host, port)
                continue
            try:
                bound[listener.name] = await bind_listening(
                    host, listener.port, backlog=backlog, listener_name=listener.name
                )
            except OSError as exc:
                raise ConfigError(f"listeners: cannot bind {listener.name} to {host}:{listener.port}: "
                                  f"{exc.strerror}") from None
            logger.info("listener %s listening on %s:%d; requests are read once the node is up", listener.name, host,
                        bound[listener.name][0].getsockname()[1])
    except BaseException:
        close_all(bound)
        close_all(passed)
        raise
    return bound


def close_all(bound: ListeningSockets) -> None:
    """Closes the sockets (those a listener took and closed already stay closed)."""
    for sockets in bound.values():
        for sock in sockets:
            sock.close()


def without_tls(config: ServerConfig, bound: ListeningSockets) -> dict[str, Sequence[socket.socket]]:
    """The listeners of ``bound`` that ``wire.early_answers`` may answer on before the node serves: those without
    TLS, whose handshake would need the listener's certificates loaded first."""
    return {name: socks for name, socks in bound.items()
            if config.security_protocols.get(name) in ("PLAINTEXT", "SASL_PLAINTEXT")}
