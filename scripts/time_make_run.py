"""Times a new user's first minute: a fresh clone's ``make run`` until the broker answers its first request.

    python3 scripts/time_make_run.py [--repo PATH] [--port 9092] [--timeout 600]

Clones the repository (its committed HEAD) into a temporary directory, runs ``make run`` there (which creates the
venv, installs the broker and starts it on 127.0.0.1:9092 as ``config/server.properties`` says), sends ApiVersions
to the port until it is answered (a starting node accepts connections before it answers them), prints the seconds
that took, then stops the node and deletes the clone. It is a measurement, not a test: how fast a machine installs
depends on its network and pip's cache (a warm cache is printed as such), so nothing here passes or fails on a
number. The port must be free: a node already serving on it would be timed instead.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


#: ApiVersions v0 (key 18), correlation id 1, client id "first-run": the smallest request a broker answers.
_API_VERSIONS = struct.pack(">hhih", 18, 0, 1, len(b"first-run")) + b"first-run"


def answers(port: int) -> bool:
    """Whether something on ``port`` answers an ApiVersions request now."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(struct.pack(">i", len(_API_VERSIONS)) + _API_VERSIONS)
            header = sock.recv(8)
            return len(header) >= 8 and struct.unpack(">ii", header)[1] == 1
    except OSError:
        return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", default=str(REPO), help="the repository to clone (default: this one)")
    parser.add_argument("--port", type=int, default=9092, help="the port config/server.properties serves on")
    parser.add_argument("--timeout", type=float, default=600.0, help="give up after this many seconds")
    args = parser.parse_args()
    if answers(args.port):
        print(f"127.0.0.1:{args.port} already answers requests: stop what serves there first", file=sys.stderr)
        return 2
    workdir = Path(tempfile.mkdtemp(prefix="fjord-first-run-"))
    clone = workdir / "fjord"
    log_path = workdir / "make-run.log"
    try:
        subprocess.run(["git", "clone", "--quiet", args.repo, str(clone)], check=True)
        started = time.monotonic()
        with open(log_path, "wb") as log:
            # Its own process group: make, the venv's pip and the node are all stopped together.
            proc = subprocess.Popen(["make", "run"], cwd=clone, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
        try:
            while not answers(args.port):
                if proc.poll() is not None:
                    print(f"make run exited with {proc.returncode} before serving:", file=sys.stderr)
                    print(log_path.read_text(errors="replace")[-4000:], file=sys.stderr)
                    return 1
                if time.monotonic() - started > args.timeout:
                    print(f"no request answered within {args.timeout:.0f} s", file=sys.stderr)
                    return 1
                time.sleep(0.1)
            elapsed = time.monotonic() - started
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
        print(f"make run: first request answered on 127.0.0.1:{args.port} {elapsed:.1f} s after starting "
              f"(fresh clone of {args.repo}; pip's cache as this machine has it)")
        return 0
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
