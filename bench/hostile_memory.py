"""Hostile-client memory benchmark (issue 26, "Performance"): a node's RSS growth under connections that each claim
a ~100 MB request and send nothing more.

    .venv/bin/python bench/hostile_memory.py [--connections N] [--dir DIR]

One real ``fjord server start`` process (PLAINTEXT, the setup bound ``fjord.connections.setup.max.ms`` raised to
10 minutes so no connection is cut off while it is measured). After one produce and one fetch (so the code paths a
client uses are loaded), N connections (1,000 by default) each send a 4-byte length of 104,857,599 and 10 bytes of
it; once a further request is answered on a fresh connection (the claims have been read by then), the broker's
VmRSS is read again. Prints one Markdown table: connections, bytes claimed, RSS before and after, growth, and
whether it is within the issue's 64 MiB bound. Before issue 26 each claim allocated its full size.
"""

from __future__ import annotations

import argparse
import socket
import struct
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]  # the repository's packages before this directory (bench/storage.py shadows ``storage``)

from testkit.node_process import WireClient, api_versions_request, start_broker  # noqa: E402

CLAIMED = 104_857_599
MiB = 1024 * 1024
BOUND = 64 * MiB


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def measure(data_dir: Path, connections: int) -> tuple[int, int]:
    """(RSS before, RSS after) the claims, in bytes."""
    broker = start_broker(data_dir, {"fjord.connections.setup.max.ms": "600000"})
    sockets: list[socket.socket] = []
    try:
        with WireClient(broker.port) as client:
            for _ in range(3):
                client.request(api_versions_request(3))
            before = rss_bytes(broker.proc.pid)
            for _ in range(connections):
                sock = socket.create_connection(("127.0.0.1", broker.port), timeout=30)
                sock.sendall(struct.pack(">i", CLAIMED) + b"\x00\x00\x00\x12" + b"\x00" * 6)
                sockets.append(sock)
            with WireClient(broker.port) as late:  # accepted after all the others: they have been read
                late.request(api_versions_request(3))
            client.request(api_versions_request(3))
            return before, rss_bytes(broker.proc.pid)
    finally:
        for sock in sockets:
            sock.close()
        broker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--dir", type=Path, help="data directory (default: a temporary one, removed after)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fjord-bench-hostile-") as tmp:
        before, after = measure(args.dir or Path(tmp), args.connections)
    grown = after - before
    print("| connections | claimed | RSS before MiB | RSS after MiB | growth MiB | within 64 MiB |")
    print("|---:|---:|---:|---:|---:|---|")
    print(f"| {args.connections:,} | {args.connections * CLAIMED / 1e9:.0f} GB | {before / MiB:.0f} | "
          f"{after / MiB:.0f} | {grown / MiB:.1f} | {'yes' if grown <= BOUND else 'NO'} |")


if __name__ == "__main__":
    main()
