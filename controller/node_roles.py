"""What a node's configuration says about its controller: whether it runs on Raft, and the listener it serves.

Apart from ``controller.quorum`` so that the node can choose without importing the Raft stack: the embedded default
(a combined node that is the only voter) keeps a local metadata log and never runs Raft, and importing the quorum,
the Raft core and the quorum client cost every such node's start (issue 25; ``node.controller_handle`` imports them
for the nodes that use them).
"""

from __future__ import annotations

from settings.listeners import Listener
from settings.server import ServerConfig
from storage.config import ConfigError


def controller_listener(config: ServerConfig) -> Listener:
    """The listener Raft and the controller RPCs are served on (the first of ``controller.listener.names``)."""
    names = config.controller_listener_names
    for name in names:
        for listener in config.listeners:
            if listener.name == name:
                return listener
    raise ConfigError(f"listeners: no listener named {', '.join(names)} (controller.listener.names)")


def advertised_controller_endpoint(config: ServerConfig) -> tuple[str, str, int]:
    """This controller's CONTROLLER listener as the other voters reach it, ``(name, host, port)``, as an
    AddRaftVoter names it: advertised if it is, else as bound (a listener bound to every interface is named
    ``localhost``, as ``fjord storage format --standalone`` names it)."""
    name = config.controller_listener_names[0] if config.controller_listener_names else ""
    found = [lst for lst in (*config.listeners, *config.advertised_listeners) if lst.name == name]
    if not found:
        raise ConfigError(f"controller.listener.names: node {config.node_id} lists no {name or 'controller'} "
                          "listener")
    named = [lst for lst in found if lst.host]
    listener = named[-1] if named else found[-1]
    return name, listener.host or "localhost", listener.port


#: Hosts a listener binds to that no other node can connect to.
_WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::", "[::]"})


def reachable_controller_endpoint(config: ServerConfig) -> tuple[str, str, int] | None:
    """:func:`advertised_controller_endpoint` when it names a host others can reach, as a controller announces
    itself (auto-join, UpdateRaftVoter); None when the listener is bound to every interface and not advertised
    with a host (``localhost`` or ``0.0.0.0`` would send the other voters nowhere)."""
    name, host, port = advertised_controller_endpoint(config)
    explicit = any(lst.name == name and lst.host not in _WILDCARD_HOSTS
                   for lst in (*config.listeners, *config.advertised_listeners))
    return (name, host, port) if explicit and host not in _WILDCARD_HOSTS else None


def uses_quorum(config: ServerConfig) -> bool:
    """Whether this node's controller runs on Raft: a controller-only node, any quorum of several voters, or a
    controller whose voters are not configured (formatted to be added to a running quorum, or a static quorum's named
    by bootstrap servers alone). A combined node that is the only voter keeps the local metadata log (the embedded
    default), so its voters cannot change."""
    roles = set(config.process_roles)
    if "controller" not in roles:
        return False
    return roles == {"controller"} or len(config.voters) > 1 or config.voters_learned
