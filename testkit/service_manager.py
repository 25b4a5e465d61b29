"""A command started as systemd starts a socket-activated service (sd_listen_fds(3)): the listening sockets the caller
holds become descriptors 3, 4, ... of the new process, and ``LISTEN_PID``, ``LISTEN_FDS`` (and ``LISTEN_FDNAMES``)
describe them. The caller keeps its own sockets open across the service's restarts, as systemd does: clients
connecting while no service runs are queued by the kernel, not refused (``node.socket_activation``).

A small Python launcher moves the descriptors and sets the variables, then ``exec``s the command, so that
``LISTEN_PID`` is the command's own pid: it costs the start about 20 ms, which systemd does not.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Sequence

_LAUNCHER = """\
import fcntl, os, sys
fds = [int(f) for f in sys.argv[1].split(",")]
high = [fcntl.fcntl(f, fcntl.F_DUPFD_CLOEXEC, 100) for f in fds]
for f in fds:
    os.close(f)
for i, f in enumerate(high):
    os.dup2(f, 3 + i)
    os.close(f)
os.environ["LISTEN_PID"] = str(os.getpid())
os.environ["LISTEN_FDS"] = str(len(fds))
if sys.argv[2]:
    os.environ["LISTEN_FDNAMES"] = sys.argv[2]
os.execv(sys.argv[3], sys.argv[3:])
"""


def socket_activated(
    command: Sequence[str], sockets: Sequence[socket.socket], names: Sequence[str] = ()
) -> tuple[list[str], tuple[int, ...]]:
    """``command`` (its first word an absolute path) wrapped to receive ``sockets`` as a socket-activated service,
    and the descriptors to pass to ``subprocess.Popen(..., pass_fds=...)``."""
    fds = tuple(s.fileno() for s in sockets)
    wrapped = [sys.executable, "-S", "-c", _LAUNCHER, ",".join(map(str, fds)), ":".join(names), *command]
    return wrapped, fds
