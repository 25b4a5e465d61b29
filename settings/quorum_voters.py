"""The controller quorum's voters: Kafka's static ``controller.quorum.voters``, or Kafka 4's
``controller.quorum.bootstrap.servers`` with the voters a controller's directory was formatted with.

Kafka 4 ships its configs with a dynamic quorum (KIP-853): the files name no voter, only
``controller.quorum.bootstrap.servers``, and ``kafka-storage format`` writes the quorum's first voters into each
controller's log: the formatting controller alone (``--standalone``) or a list (``--initial-controllers``).
``fjord storage format`` writes them to the directory's ``bootstrap.properties`` (``settings.bootstrap_file``), and
they are the quorum's first voters; later ones are added and removed by AddRaftVoter and RemoveRaftVoter
(``fjord metadata-quorum add-controller``), and the log holds them from then on (``raft.voter_set``). A controller
formatted to be added later (``--no-initial-controllers``) has no voter here: it starts as an observer that finds
the quorum through its bootstrap servers, as a broker does, and votes once added. Without a format, a controller
whose bootstrap servers name only its own controller listener is the quorum's one voter, as after ``--standalone``;
any other unformatted dynamic form stops the start naming the key: guessing the voters could found a second
cluster. When both keys are given the
voters decide, as in Kafka, where the bootstrap servers then only find the leader.

A broker-only node is not decided here: it learns the voters from its bootstrap servers as it starts
(:func:`metadata.remote.discovery.with_bootstrap_voters`), and :func:`resolve_voters` returns no voter for it.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from dataclasses import dataclass

from settings.host_port import split_host_port
from settings.kafka_uuid import is_kafka_uuid
from storage.config import ConfigError

VOTERS_KEY = "controller.quorum.voters"
BOOTSTRAP_KEY = "controller.quorum.bootstrap.servers"

#: Names a node's own controller listener answers to whatever the interface it binds: a loopback address reaches any
#: listener bound to every interface, and Kafka's shipped files name ``localhost``.
_LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})


KEEP_VOTERS_LISTED = (
    f"{BOOTSTRAP_KEY}: this controller's directory was formatted for a static quorum and its log names no voters: "
    f"keep the voters in {VOTERS_KEY} (id@host:port,...) until kafka-features upgrade --feature kraft.version=1 has "
    f"run and reached it; from then on its log's voters rule and bootstrap servers alone will do"
)
"""Why a static quorum's controller named by bootstrap servers alone cannot start: its log does not name the voters
(the upgrade has not run, or has not reached it)."""


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
        split = split_host_port(address)
        if not at or split is None or not node.strip().isdigit():
            raise ConfigError(f"{key}: {item!r} is not id@host:port (a port from 0 to 65535)")
        voters.append(QuorumVoter(int(node), *split))
    if len({v.node_id for v in voters}) != len(voters):
        raise ConfigError(f"{key}: a node id appears twice in {','.join(items)}")
    return tuple(voters)


def parse_initial_controllers(
    text: str, key: str = "--initial-controllers"
) -> tuple[tuple[QuorumVoter, ...], dict[int, str]]:
    """Kafka's ``id@host:port:directoryId,...``: the voters, and the directory ids given (by node id). KIP-853 tells
    a controller's disks apart by its metadata directory's id, which the format writes to ``meta.properties`` as
    Kafka's does; Fjord's quorum itself knows a voter by its node id alone."""
    items: list[str] = []
    directory_ids: dict[str, str] = {}
    for item in (part.strip() for part in text.split(",")):
        head, colon, tail = item.rpartition(":")
        if colon and "@" in head and head.rpartition(":")[2].isdigit() and not tail.isdigit():  # a port before it
            if not is_kafka_uuid(tail):
                raise ConfigError(f"{key}: {item!r}: directory id {tail!r} is not a 22-character base64url UUID")
            item = head
            directory_ids[item] = tail
        items.append(item)
    if not any(items):
        raise ConfigError(f"{key}: no controller is named")
    voters = parse_voters(items, key)
    by_node = {voter.node_id: directory_ids[item] for item, voter in zip(items, voters, strict=True)
               if item in directory_ids}
    if len(set(by_node.values())) < len(by_node):
        raise ConfigError(f"{key}: two controllers are given the same directory id")
    return voters, by_node


def parse_bootstrap_servers(items: Sequence[str], key: str = BOOTSTRAP_KEY) -> tuple[tuple[str, int], ...]:
    """``host:port`` entries (a bracketed IPv6 host allowed), as Kafka's ``QuorumConfig`` reads them."""
    out: list[tuple[str, int]] = []
    for item in items:
        split = split_host_port(item)
        if split is None:
            raise ConfigError(f"{key}: {item!r} is not host:port (a port from 0 to 65535)")
        out.append(split)
    return tuple(out)


def resolve_voters(
    *,
    voters_given: Sequence[str] | None,
    voters_default: Sequence[str],
    bootstrap: Sequence[str],
    node_id: int,
    roles: Sequence[str],
    own_controller_addresses: Sequence[tuple[str, int]],
    formatted: Sequence[QuorumVoter] = (),
    standalone: bool = False,
    joining: bool = False,
    ran_before: bool = False,
) -> tuple[QuorumVoter, ...]:
    """The voters this node's quorum has.

    ``voters_given``: ``controller.quorum.voters`` as the file gives it (None: not given, then ``voters_default``,
    the embedded single node, stands when no bootstrap server is named either). ``own_controller_addresses``: the
    host and port of this node's controller listener as it binds it and as it advertises it, the advertised last.
    ``formatted``: the voters a controller's directory was formatted with (``settings.bootstrap_file``), which decide
    when the file names bootstrap servers only; ``standalone``: this controller is being formatted as the quorum's
    one voter (``fjord storage format --standalone``); ``joining``: it was formatted to be added to a running quorum
    (``--no-initial-controllers``), so it has no voter of its own (it learns them as it starts); ``ran_before``: its
    metadata directory is formatted (``meta.properties``) without voters, as a static quorum's controller is: no voter
    is returned, as its voters are those its log names once ``kafka-features upgrade --feature kraft.version=1`` ran
    (Kafka's operators then replace the list by bootstrap servers), which its controller checks as it opens its log
    (:data:`KEEP_VOTERS_LISTED` when the log names none). Raises ConfigError naming :data:`BOOTSTRAP_KEY` for a
    dynamic form Fjord cannot tell the voters of.
    """
    servers = parse_bootstrap_servers(bootstrap)
    if voters_given is not None or not servers:
        return parse_voters(voters_given if voters_given is not None else voters_default)
    if "controller" not in roles or joining:
        return ()  # a broker-only node or a joining controller: the voters come from its bootstrap servers
    if formatted:
        return tuple(formatted)
    if standalone:
        if not own_controller_addresses:
            raise ConfigError("controller.listener.names: a controller needs a controller listener to be a voter")
        named_own = [(host, port) for host, port in own_controller_addresses if host]
        host, port = named_own[-1] if named_own else ("localhost", own_controller_addresses[-1][1])
        return (QuorumVoter(node_id, host, port),)
    if len(servers) == 1 and _names_own_listener(servers[0], own_controller_addresses):
        host, port = servers[0]
        return (QuorumVoter(node_id, host, port),)
    if ran_before:
        return ()  # a static quorum's controller: the voters are its log's, if the upgrade reached it
    named = ", ".join(f"{host}:{port}" for host, port in servers)
    own = ", ".join(f"{host or '*'}:{port}" for host, port in own_controller_addresses) or "none"
    raise ConfigError(
        f"{BOOTSTRAP_KEY}: {named} is not only this controller ({own}), and its directory was not formatted with "
        f"the quorum's voters: format every controller with fjord storage format --initial-controllers "
        f"id@host:port,... (as kafka-storage format), or list every voter in {VOTERS_KEY} (id@host:port,...)"
    )


def _names_own_listener(server: tuple[str, int], own: Sequence[tuple[str, int]]) -> bool:
    host, port = server
    if not any(port == own_port for _own_host, own_port in own):
        return False
    if host in _LOOPBACK_HOSTS or host == socket.gethostname():
        return True
    return any(host == own_host for own_host, own_port in own if own_port == port)
