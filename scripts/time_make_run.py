"""Times a new user's first minute: a fresh clone's ``make run`` until the broker accepts its first connection.

    python3 scripts/time_make_run.py [--repo PATH] [--port 9092] [--timeout 600]

Clones the repository (its committed HEAD) into a temporary directory, runs ``make run`` there (which creates the
venv, installs the broker and starts it on 127.0.0.1:9092 as ``config/server.properties`` says), connects to the
port until a connection is accepted, prints the seconds that took, then stops the node and deletes the clone. It is
a measurement, not a test: how fast a machine installs depends on its network and pip's cache (a warm cache is
printed as such), so nothing here passes or fails on a number. The port must be free: a node already serving on it
would be timed instead.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", default=str(REPO), help="the repository to clone (default: this one)")
    parser.add_argument("--port", type=int, default=9092, help="the port config/server.properties serves on")
    parser.add_argument("--timeout", type=float, default=600.0, help="give up after this many seconds")
    args = parser.parse_args()
    if accepts(args.port):
        print(f"127.0.0.1:{args.port} already accepts connections: stop what serves there first", file=sys.stderr)
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
            while not accepts(args.port):
                if proc.poll() is not None:
                    print(f"make run exited with {proc.returncode} before serving:", file=sys.stderr)
                    print(log_path.read_text(errors="replace")[-4000:], file=sys.stderr)
                    return 1
                if time.monotonic() - started > args.timeout:
                    print(f"no connection accepted within {args.timeout:.0f} s", file=sys.stderr)
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
        print(f"make run: first connection accepted on 127.0.0.1:{args.port} {elapsed:.1f} s after starting "
              f"(fresh clone of {args.repo}; pip's cache as this machine has it)")
        return 0
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
