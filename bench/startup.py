"""Process start to listening (issue 25): how long ``fjord server start`` with the shipped config takes to answer.

Each cycle starts ``python -m node.cli server start --config config/server.properties`` (its ports moved to free
ones, its ``data/`` directories under a temporary directory), and times from the moment before the process is
spawned to the first ApiVersions answered on its PLAINTEXT listener (a connection alone would count a listener
bound but not yet serving). The first cycle formats a new data directory; the others restart on it after a clean
stop, the common case of a rolling restart. ``imports`` is a separate process that only imports the node
(``import node.process``) and the CLI and exits, the floor of any start.

Every figure is taken twice. ``bytecode cached`` is a node as installed: pip compiles every module to bytecode at
install time (here: a cache directory, ``PYTHONPYCACHEPREFIX``, filled by one import before timing). ``compiled at
start`` is a node whose environment forbids the bytecode cache (``PYTHONDONTWRITEBYTECODE=1``, as on the
development machines), which recompiles its ~370 modules from source at every start: about 0.4 s of each.

    .venv/bin/python bench/startup.py [--cycles 10]

Target: median <= 0.4 s, not reached. On the 2-core development machine (2026-11-29, load average 6-9 from other
work, so every figure is inflated and noisy), median restart -> answering over 7 cycles: main 2.19 s with a bytecode
cache and 3.36 s without; with ``fjord server start`` importing only its own command 1.17 s and 1.28 s. What a start
spends, measured with ``python -X importtime`` and cProfile: from the first log line to serving takes 30-40 ms
(configuration, metadata replay, WAL open, listeners); everything before it is importing the ~560 modules of the
node (about 0.5 s of CPU with a bytecode cache, roughly a third of it ``@dataclass`` building classes), plus about
0.4 s compiling them when there is no bytecode cache, plus 0.2 s for hypothesis, which kio imports when it is
installed (a development dependency only). No broker path imports pyspark or aiobotocore (the latter only for an
``s3://`` bucket). The ``first start`` row is 3-5 s in the development environment for the same reason: that import
of hypothesis creates its ``.hypothesis`` directory in the new working directory (seconds, under load); restarts
find it there.
"""

from __future__ import annotations

import argparse
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

from testkit.ports import free_ports  # noqa: E402

START_TIMEOUT_S = 30.0
MODES = ["bytecode cached", "compiled at start"]
POLL_S = 0.002
#: ApiVersions v0 (key 18), correlation id 1, client id "startup-bench": the smallest request a broker answers.
_CLIENT_ID = b"startup-bench"
_API_VERSIONS = struct.pack(">hhih", 18, 0, 1, len(_CLIENT_ID)) + _CLIENT_ID


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


def _answers(port: int) -> bool:
    """Whether the broker on ``port`` answers an ApiVersions request now."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as sock:
            sock.sendall(struct.pack(">i", len(_API_VERSIONS)) + _API_VERSIONS)
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


def _start_once(work: Path, config: Path, log: Path, env: dict[str, str]) -> tuple[float, float]:
    """Seconds from spawning the node to its first answer, and the CPU seconds it used until then."""
    port = _port(config)
    cmd = [sys.executable, "-m", "node.cli", "server", "start", "--config", str(config)]
    with open(log, "ab") as out:
        started = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=work, stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            while not _answers(port):
                if proc.poll() is not None:
                    raise SystemExit(f"the node exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
                if time.monotonic() - started > START_TIMEOUT_S:
                    raise SystemExit(f"the node did not answer within {START_TIMEOUT_S:.0f} s")
                time.sleep(POLL_S)
            return time.monotonic() - started, _cpu_seconds(proc.pid)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)


def _imports_once(env: dict[str, str]) -> tuple[float, float]:
    before, started = os.times(), time.monotonic()
    probe = "import node.cli; node.cli.without_test_only_libraries(); import node.commands.server, node.process"
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
            first = [_start_once(work, config, log, env)]
            restarts = [_start_once(work, config, log, env) for _ in range(args.cycles)]
            imports = [_imports_once(env) for _ in range(args.cycles)]
        for name, values in (("first start (new data dir)", first), ("restart -> answering", restarts),
                             ("imports only", imports)):
            label = f"{name}, {mode}"
            wall, cpu = [seconds for seconds, _ in values], [seconds for _, seconds in values]
            print(f"{label:<44}{statistics.median(wall):>10.3f}{min(wall):>8.3f}{max(wall):>8.3f}"
                  f"{statistics.median(cpu):>8.3f}")

if __name__ == "__main__":
    main()
