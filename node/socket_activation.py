"""Client listener sockets handed to the node by a service manager: systemd's socket activation (``sd_listen_fds``).

A node's own listening socket dies with its process, so while a killed node restarts its clients' connections are
refused, and librdkafka then waits for one of its metadata timers to try again, up to a second later
(``node.early_listen``). A socket held by the service manager outlives the node: the kernel completes every
client's handshake and queues its requests while no node runs, and the next node takes the socket over
(bench/kill_acks.py ``--socket-activation``). The protocol is systemd's (sd_listen_fds(3)): ``LISTEN_PID`` names this
process, ``LISTEN_FDS`` counts the sockets passed from file descriptor 3 on, and ``LISTEN_FDNAMES`` may name them
(``FileDescriptorName=`` of a ``.socket`` unit, the unit's name by default). A socket named for a client listener
(``PLAINTEXT``, say) serves it; any other serves the client listener configured with its port. A socket that fits
no client listener, or a descriptor that is no listening TCP socket, stops the start with one line naming it, as a
bad setting does. The variables are removed from the environment once read, so that no process the node starts
sees them.
"""

from __future__ import annotations

import os
import socket
from collections.abc import MutableMapping, Sequence
from dataclasses import dataclass

from storage.config import ConfigError

#: The first descriptor a service manager passes (SD_LISTEN_FDS_START).
FIRST_FD = 3
VARIABLES = ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES")


@dataclass(frozen=True, slots=True)
class InheritedSocket:
    """One listening socket passed by the service manager: its descriptor, its name (empty when unnamed)."""

    fd: int
    name: str
    sock: socket.socket

    def describe(self) -> str:
        host, port = self.sock.getsockname()[:2]
        named = f", named {self.name!r}" if self.name else ""
        return f"descriptor {self.fd} ({host}:{port}{named})"


def take_inherited(environ: MutableMapping[str, str] | None = None, pid: int | None = None) -> list[InheritedSocket]:
    """The listening sockets passed to this process (none unless ``LISTEN_PID`` is this process); the variables
    are removed from ``environ`` (the process's environment by default) either way. Raises ConfigError for a
    malformed variable or a descriptor that is no listening TCP socket."""
    env = os.environ if environ is None else environ
    values = {name: env.pop(name, None) for name in VARIABLES}
    listen_pid, listen_fds = values["LISTEN_PID"], values["LISTEN_FDS"]
    if listen_pid is None or listen_fds is None:
        return []
    if not listen_pid.isdigit() or not listen_fds.isdigit():
        raise ConfigError(f"LISTEN_PID={listen_pid!r} LISTEN_FDS={listen_fds!r}: not numbers (socket activation)")
    if int(listen_pid) != (os.getpid() if pid is None else pid):
        return []  # meant for another process (the one that started this one, say)
    count = int(listen_fds)
    names = values["LISTEN_FDNAMES"].split(":") if values["LISTEN_FDNAMES"] else []
    if names and len(names) != count:
        raise ConfigError(f"LISTEN_FDNAMES names {len(names)} sockets, LISTEN_FDS passes {count}")
    taken: list[InheritedSocket] = []
    try:
        for index in range(count):
            fd = FIRST_FD + index
            taken.append(InheritedSocket(fd, names[index] if names else "", _listening_socket(fd)))
    except BaseException:
        for inherited in taken:
            inherited.sock.close()
        raise
    return taken


def _listening_socket(fd: int) -> socket.socket:
    try:
        sock = socket.socket(fileno=fd)
    except OSError as exc:
        raise ConfigError(f"LISTEN_FDS: descriptor {fd} is not a socket: {exc.strerror}") from None
    try:
        listening = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
        family_ok = sock.family in (socket.AF_INET, socket.AF_INET6)
    except OSError:
        listening, family_ok = 0, False
    if sock.type != socket.SOCK_STREAM or not family_ok or not listening:
        sock.detach()  # not ours to close
        raise ConfigError(f"LISTEN_FDS: descriptor {fd} is not a listening TCP socket")
    os.set_inheritable(fd, False)  # a process the node starts does not keep it open
    sock.setblocking(False)
    return sock


def assign(listeners: Sequence[tuple[str, int]], inherited: list[InheritedSocket]) -> dict[str, list[socket.socket]]:
    """The inherited sockets of each client listener (``(name, configured port)``): those named for it, else
    those bound to its port (a listener configured with port 0 takes only sockets named for it). Raises ConfigError,
    closing every inherited socket, when one fits no listener."""
    names = {name for name, _port in listeners}
    by_listener: dict[str, list[socket.socket]] = {}
    for each in inherited:
        owner = each.name if each.name in names else next(
            (name for name, port in listeners if port != 0 and each.sock.getsockname()[1] == port), None)
        if owner is None:
            wanted = ", ".join(f"{name} (port {port})" for name, port in listeners) or "none"
            message = f"socket activation: {each.describe()} fits no client listener; the client listeners: {wanted}"
            for other in inherited:
                other.sock.close()
            raise ConfigError(message)
        by_listener.setdefault(owner, []).append(each.sock)
    return by_listener
