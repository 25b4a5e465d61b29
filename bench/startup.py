"""Process start to listening (issue 25): how long ``fjord server start`` with the shipped config takes to answer.

Each cycle starts ``python -m node.cli server start --config config/server.properties`` (its ports moved to free
ones, its ``data/`` directories under a temporary directory), and times from the moment before the process is
spawned to the first Metadata request answered on its PLAINTEXT listener (a connection alone would count a listener
bound but not yet serving, and since 2026-12-01 a starting node answers ApiVersions before it serves,
``wire.early_answers``: the figures below that date timed the first ApiVersions, then the node's own first answer);
``restart -> listening`` times the same restarts to the first connection accepted (the
client listener listens before the node imports its stacks, ``node.early_listen``: from then on a reconnecting
client is no longer refused, bench/kill_acks.py's ``listen``). The first cycle formats a new data directory; the
others restart on it after a clean stop, the common case of a rolling restart. ``imports`` is a separate process
that only imports the node and its server command as ``fjord`` does (hypothesis kept out, see
``node.cli.TEST_ONLY_LIBRARIES``) and exits, the floor of any start. Beside each wall-clock median, ``cpu s`` is the
median CPU time the node used until it answered (from ``/proc``): on the shared 2-core development machine the wall
clock mostly measures the other work running, the CPU time much less so.

Every figure is taken twice (``--modes`` picks one). ``bytecode cached`` is a node as installed: pip compiles every
module to bytecode at install time (here: a cache directory, ``PYTHONPYCACHEPREFIX``, filled by one import before
timing). ``compiled at start`` is a node whose environment forbids the bytecode cache (``PYTHONDONTWRITEBYTECODE=1``,
as on the development machines), which recompiles its modules from source at every start.

    .venv/bin/python bench/startup.py [--cycles 10] [--modes "bytecode cached"]

Target: median <= 0.4 s. Issue 25, step by step (2026-11-29, bytecode cached, load average 10-16 from other work;
each step's tree restarted in turn, 11 cycles, so the load falls on all alike; restart -> answering):

    step                                                          median s  min s  median cpu s
    main (fjord server start imports only its own command)          2.16    1.58       0.98
    + aiobotocore/botocore/aiohttp only for an s3:// bucket          1.77    1.20       0.72
    + no hypothesis in a fjord process (kio's strategy hook)         1.52    0.99       0.59
    + garbage collector off until serving, no full pass before       1.01    0.56       0.49

Second pass, what the embedded default never uses or needs only on a client's later request (2026-11-29 evening).
Each step's figure is the instructions (valgrind's callgrind, ``Ir``) of importing the server path as ``imports``
does, which no other load on the machine changes; the wall-clock and CPU figures of the whole are interleaved
pairs of 11 restarts each (restart -> answering; from the third on main with the early client listener):

    step                                                                  import Ir (M)   vs main
    main                                                                      2386
    + the S3 WAL and its object names only for an s3:// WAL                   2353         -1.4%
    + kio's classic consumer protocol schemas on first use (8 modules)        2292         -3.9%
    + RE2 with the first regular expression a client sends                    2279         -4.5%
    + Raft core, quorum controller and quorum client only for nodes on Raft   2206         -7.5%
    + gc.get_freeze_count (a walk of the 52,000 frozen objects, 5 ms) only for a DEBUG line: not an import

    pair (load average)      main median s   main cpu s   this pass median s   this pass cpu s
    1 (4-5)                      0.582          0.560            0.527              0.510
    2 (3)                        0.673          0.660            0.525              0.480
    3 (2)                        0.691          0.570            0.594              0.500
    4 (2)                        0.709          0.620            0.508              0.460
    5 (3-5)                      0.575          0.490            0.505              0.460
    6 (4)                        0.591          0.540            0.520              0.460

Not reached on this machine: the CPU a start needs halved, but the wall clock under this load is about twice it. The
second pass took 6-27% off a start's CPU and 9-28% off its wall clock in the pairs above, 13% in the median pair of
each (7.5% off the instructions of its imports, the steadier figure). It was not measured on a quiet machine, as
none was quiet during it: main answered in 0.408 s on one, and 13% off that is about 0.355 s, at but not clearly
under the 0.35 s aimed at. What a start spends now, measured with ``python -X importtime`` (each module's least self
time of 6 runs) and cProfile: from the first log line to serving 20-40 ms (configuration, metadata replay, WAL open,
listeners); before it, importing about 670 modules (366 of the node's own; of kio's, the serializer and a few
schemas: it imports each API's on the API's first request), half of whose CPU is ``@dataclass`` building the ~385
classes they define (Python 3.11 compiles each of their ~2,100 generated methods from source at every start:
``__init__``, ``__repr__``, ``__eq__``, and a frozen class's ``__setattr__``, ``__delattr__`` and ``__hash__``). The
rest is spread thin over the modules a start needs. The largest single costs left are third-party: crc32c looks its
own version up through ``importlib.metadata`` (2%, 25 modules), prometheus_client imports its HTTP exposition
(``http.server``, ``email``: 2%), and binding a listener by host name imports the ``idna`` codec
(``socket.getaddrinfo`` encodes the host: 1%); of the node's own, the embedded CONTROLLER listener's stream RPCs (27
frozen dataclasses, 3.5%: the shipped config serves that listener) and the handler table's 60 handler modules (3%:
kio's way, each API's handler imported on its first request, would take it off). What came off in the first pass:
the object-store metrics imported the S3 store for its list of operation names, which pulled in aiobotocore,
botocore and aiohttp (290 modules, two TLS contexts loading the CA bundle) on every node; kio imported hypothesis
and built a strategy per type in a development environment (0.2 s, and a ``.hypothesis`` directory, seconds under
load, in a new working directory: the ``first start`` row); the collector walked the growing start heap about 150
times to free some 800 objects, and once more in full before the first answer. No broker path imports pyspark
(tests/node/test_start_imports.py checks these on a real node, and that none of what the second pass moved comes
back).
"""

from __future__ import annotations

import argparse
import math
import os
import re
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "config" / "server.properties"
sys.path[:0] = [str(ROOT)]  # the repository's packages before this directory (bench/storage.py shadows ``storage``)

from wire.ports import free_ports  # noqa: E402

START_TIMEOUT_S = 30.0
MODES = ["bytecode cached", "compiled at start"]
POLL_S = 0.002
#: Metadata v1 (key 3) for every topic, correlation id 1, client id "startup-bench": a small request only the node
#: itself answers (a starting node answers ApiVersions before it serves, ``wire.early_answers``).
_CLIENT_ID = b"startup-bench"
_METADATA = struct.pack(">hhih", 3, 1, 1, len(_CLIENT_ID)) + _CLIENT_ID + struct.pack(">i", -1)


def _config(work: Path) -> Path:
    """The shipped config with its ports moved to free ones and its relative ``data/`` paths under ``work``."""
    port, controller_port = free_ports(2)
    text = CONFIG.read_text(encoding="utf-8")
    text = re.sub(r"\b9092\b", str(port), text)
    text = re.sub(r"\b9093\b", str(controller_port), text)
    path = work / "server.properties"
    path.write_text(text, encoding="utf-8")
    return path


def _port(config: Path) -> int:
    found = re.search(r"^listeners=PLAINTEXT://127\.0\.0\.1:(\d+)", config.read_text(encoding="utf-8"), re.MULTILINE)
    assert found is not None
    return int(found.group(1))


def _listens(port: int) -> bool:
    """Whether a connection to ``port`` is accepted now (the node's early client listener: ``node.early_listen``)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True
    except OSError:
        return False


def _answers(port: int) -> bool:
    """Whether the broker on ``port`` answers a Metadata request now (or within the second it waits)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as sock:
            sock.sendall(struct.pack(">i", len(_METADATA)) + _METADATA)
            header = sock.recv(8)
            return len(header) >= 8 and struct.unpack(">ii", header)[1] == 1
    except OSError:
        return False


def _env(bytecode: Path | None) -> dict[str, str]:
    """The node's environment: with ``bytecode``, that bytecode cache read and written; else none at all."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("PYTHONPYCACHEPREFIX", None)
    if bytecode is None:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    else:
        env["PYTHONPYCACHEPREFIX"] = str(bytecode)
    return env


def _cpu_seconds(pid: int) -> float:
    """The CPU time (user and system) process ``pid`` has used so far, from ``/proc`` (0.0 where there is none)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime and stime, fields 14 and 15


def _start_once(work: Path, config: Path, log: Path, env: dict[str, str]) -> tuple[tuple[float, float], float]:
    """Seconds from spawning the node to its first answer and the CPU seconds it used until then, and the seconds to
    its client listener accepting a connection (listening, not yet serving)."""
    port = _port(config)
    cmd = [sys.executable, "-m", "node.cli", "server", "start", "--config", str(config)]
    with open(log, "ab") as out:
        started = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=work, stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            listening = None
            while listening is None or not _answers(port):
                if listening is None and _listens(port):
                    listening = time.monotonic() - started
                    continue
                if proc.poll() is not None:
                    raise SystemExit(f"the node exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
                if time.monotonic() - started > START_TIMEOUT_S:
                    raise SystemExit(f"the node did not answer within {START_TIMEOUT_S:.0f} s")
                time.sleep(POLL_S)
            return (time.monotonic() - started, _cpu_seconds(proc.pid)), listening
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)


def _imports_once(env: dict[str, str]) -> tuple[float, float]:
    before, started = os.times(), time.monotonic()
    probe = "import node.cli; node.cli.as_own_process('server'); import node.commands.server, node.process"
    subprocess.run([sys.executable, "-c", probe], cwd=ROOT, check=True, env=env)
    wall, after = time.monotonic() - started, os.times()
    return wall, after.children_user + after.children_system - before.children_user - before.children_system


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cycles", type=int, default=10)
    parser.add_argument("--modes", nargs="+", choices=MODES, default=MODES, help="the figures to take (default: both)")
    args = parser.parse_args()
    print(f"{'what':<44}{'median s':>10}{'min s':>8}{'max s':>8}{'cpu s':>8}")
    for mode in args.modes:
        with tempfile.TemporaryDirectory(prefix="fjord-startup-") as tmp:
            work = Path(tmp)
            env = _env(work / "pycache" if mode == "bytecode cached" else None)
            _imports_once(env)  # fills the bytecode cache (a no-op without one)
            config = _config(work)
            log = work / "node.log"
            first = [_start_once(work, config, log, env)[0]]
            restarts, listening = zip(*(_start_once(work, config, log, env) for _ in range(args.cycles)), strict=True)
            imports = [_imports_once(env) for _ in range(args.cycles)]
        for name, values in (("first start (new data dir)", first), ("restart -> answering", restarts),
                             ("restart -> listening", [(s, math.nan) for s in listening]),
                             ("imports only", imports)):
            label = f"{name}, {mode}"
            wall, cpu = [seconds for seconds, _ in values], [seconds for _, seconds in values]
            cpu_text = "-" if any(math.isnan(seconds) for seconds in cpu) else f"{statistics.median(cpu):.3f}"
            print(f"{label:<44}{statistics.median(wall):>10.3f}{min(wall):>8.3f}{max(wall):>8.3f}{cpu_text:>8}")

if __name__ == "__main__":
    main()
