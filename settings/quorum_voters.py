"""The controller quorum's voters: Kafka's static ``controller.quorum.voters``, or Kafka 4's
``controller.quorum.bootstrap.servers`` in its standalone form.

Kafka 4 ships its configs with a dynamic quorum (KIP-853): the files name no voter, only
``controller.quorum.bootstrap.servers``, and ``kafka-storage format --standalone`` then writes the formatting
controller into the log as the quorum's one voter. Fjord has no format step and serves no voter changes, so it reads
that form where it means one thing: a controller whose bootstrap servers name only its own controller listener is the
quorum's one voter, as after ``--standalone``. Every other dynamic form (several controllers, which Kafka formats
with ``--initial-controllers``, or a controller joining others) stops the start naming the key: guessing the voters
could found a second cluster. When both keys are given the voters decide, as in Kafka, where the bootstrap servers
then only find the leader.

A broker-only node is not decided here: it learns the voters from its bootstrap servers as it starts
(:func:`metadata.remote.discovery.with_bootstrap_voters`), and :func:`resolve_voters` returns no voter for it.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from dataclasses import dataclass

from storage.config import ConfigError

VOTERS_KEY = "controller.quorum.voters"
BOOTSTRAP_KEY = "controller.quorum.bootstrap.servers"

#: Names a node's own controller listener answers to whatever the interface it binds: a loopback address reaches any
#: listener bound to every interface, and Kafka's shipped files name ``localhost``.
_LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})


@dataclass(frozen=True, slots=True)
class QuorumVoter:
    node_id: int
    host: str
    port: int


def parse_voters(items: Sequence[str], key: str = VOTERS_KEY) -> tuple[QuorumVoter, ...]:
    """``id@host:port`` entries (a bracketed IPv6 host allowed); node ids must be unique."""
    voters: list[QuorumVoter] = []
    for item in items:
        node, at, address = item.partition("@")
        host, colon, port = address.rpartition(":")
        if not at or not colon or not node.strip().isdigit() or not port.isdigit():
            raise ConfigError(f"{key}: {item!r} is not id@host:port")
        voters.append(QuorumVoter(int(node), host.strip("[]"), int(port)))
    if len({v.node_id for v in voters}) != len(voters):
        raise ConfigError(f"{key}: a node id appears twice in {','.join(items)}")
    return tuple(voters)


def parse_bootstrap_servers(items: Sequence[str], key: str = BOOTSTRAP_KEY) -> tuple[tuple[str, int], ...]:
    """``host:port`` entries (a bracketed IPv6 host allowed), as Kafka's ``QuorumConfig`` reads them."""
    out: list[tuple[str, int]] = []
    for item in items:
        host, colon, port = item.strip().rpartition(":")
        if not colon or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ConfigError(f"{key}: {item!r} is not host:port")
        out.append((host.strip("[]"), int(port)))
    return tuple(out)


def resolve_voters(
    *,
    voters_given: Sequence[str] | None,
    voters_default: Sequence[str],
    bootstrap: Sequence[str],
    node_id: int,
    roles: Sequence[str],
    own_controller_addresses: Sequence[tuple[str, int]],
) -> tuple[QuorumVoter, ...]:
    """The voters this node's quorum has.

    ``voters_given``: ``controller.quorum.voters`` as the file gives it (None: not given, then ``voters_default``,
    the embedded single node, stands when no bootstrap server is named either). ``own_controller_addresses``: the
    host and port of this node's controller listener as it binds it and as it advertises it. Raises ConfigError
    naming :data:`BOOTSTRAP_KEY` for a dynamic form Fjord does not serve.
    """
    servers = parse_bootstrap_servers(bootstrap)
    if voters_given is not None or not servers:
        return parse_voters(voters_given if voters_given is not None else voters_default)
    if "controller" not in roles:
        return ()  # a broker-only node: the voters come from its bootstrap servers as it starts
    if len(servers) == 1 and _names_own_listener(servers[0], own_controller_addresses):
        host, port = servers[0]
        return (QuorumVoter(node_id, host, port),)
    named = ", ".join(f"{host}:{port}" for host, port in servers)
    own = ", ".join(f"{host or '*'}:{port}" for host, port in own_controller_addresses) or "none"
    raise ConfigError(
        f"{BOOTSTRAP_KEY}: a controller's dynamic quorum is served only in its standalone form (the bootstrap "
        f"servers name only this controller's own listener, as after kafka-storage format --standalone); {named} "
        f"is not only this controller ({own}): list every voter in {VOTERS_KEY} (id@host:port,...)"
    )


def _names_own_listener(server: tuple[str, int], own: Sequence[tuple[str, int]]) -> bool:
    host, port = server
    if not any(port == own_port for _own_host, own_port in own):
        return False
    if host in _LOOPBACK_HOSTS or host == socket.gethostname():
        return True
    return any(host == own_host for own_host, own_port in own if own_port == port)
