"""Free TCP ports on 127.0.0.1, chosen before the server that will bind them starts: their one definition (the
tests, the benchmarks and ``fjord cluster up``, whose voters must know each other's ports).

Prefer not to need one. A server that binds port 0 gets a port nobody else can take and reports it: an in-process
listener (``KafkaListener.bound_port``), the metrics endpoint (``metrics.port=0``), moto's server, and a ``fjord server
start`` child with ``listeners=...://127.0.0.1:0``, which logs the ports it bound (``start_broker`` in
testkit/node_process.py reads them). A free port chosen here is only free *now*: the socket is closed before
whoever needs the port binds it, and another process may take it in between. Use it only where the port must be
known before the server starts, which is what a controller quorum needs: every voter's address is in every
voter's ``controller.quorum.voters``. It also serves as an address where nothing listens.
"""

from __future__ import annotations

import contextlib
import socket

__all__ = ["free_port", "free_ports"]


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on right now (the kernel's choice for port 0)."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` distinct free ports: all are held open until every one is chosen, so the kernel cannot hand out
    the same port twice (as separate :func:`free_port` calls could)."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.create_server(("127.0.0.1", 0))) for _ in range(count)]
        return [int(sock.getsockname()[1]) for sock in sockets]
