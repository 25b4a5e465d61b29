"""``make test``'s suite in two lanes: librdkafka's own suite beside everything else.

librdkafka's suite (``tests/broker/test_librdkafka_suite.py``) takes about 12 of the suite's 60 minutes on a 2-core
machine and spends them waiting: for sessions and poll intervals to expire, through socket delays its client injects
and in its own sleeps, at about half a core. It runs in a pytest process of its own, against its own nodes (every
test server binds port 0), while the main lane runs the rest: first the unit tests that only compute (storage,
raft, wire, metadata, settings) and the in-process ones (controller, node), which no timer of librdkafka's tests
notices, then the broker folder and the rest. The main lane's output streams as it runs; the side lane's is kept in
``.cache/librdkafka-lane.log`` and printed when both are done. The exit code is the first failing lane's.

Usage: ``python scripts/test_lanes.py [PYTEST_ARGS...]`` (the arguments go to the main lane, e.g. ``--durations=30``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
SIDE_LANE = "tests/broker/test_librdkafka_suite.py"
#: The main lane's folders that go first, while the side lane runs: tests that compute and race no timer.
FIRST = ["storage", "raft", "wire", "metadata", "settings", "controller", "node"]
SIDE_LOG = ROOT / ".cache" / "librdkafka-lane.log"


def _holds_tests(folder: Path) -> bool:
    """Whether a test module stands anywhere under ``folder`` (not looking into npm's ``node_modules``)."""
    for _, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if d != "node_modules"]
        if any(f.startswith("test_") and f.endswith(".py") for f in files):
            return True
    return False


def main_lane_paths() -> list[str]:
    """Every test folder and top-level test module under ``tests/``, :data:`FIRST` first, then by name."""
    entries = sorted(
        p.name
        for p in TESTS.iterdir()
        if (p.is_dir() and _holds_tests(p)) or (p.name.startswith("test_") and p.suffix == ".py")
    )
    ordered = [name for name in FIRST if name in entries] + [name for name in entries if name not in FIRST]
    return [f"tests/{name}" for name in ordered]


def run(main_args: list[str]) -> int:
    python = sys.executable
    SIDE_LOG.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with SIDE_LOG.open("w") as log:
        side = subprocess.Popen(
            [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", SIDE_LANE], cwd=ROOT, stdout=log, stderr=log
        )
        try:
            main_lane = [python, "-m", "pytest", "-q", *main_args, "--ignore", SIDE_LANE, *main_lane_paths()]
            main = subprocess.run(main_lane, cwd=ROOT, check=False).returncode
            side_code = side.wait()
        finally:
            if side.poll() is None:
                side.kill()
                side.wait()
    print(f"\n===== librdkafka's suite (side lane, exit {side_code}) =====", flush=True)
    sys.stdout.write(SIDE_LOG.read_text(errors="replace"))
    print(f"===== both lanes done in {time.monotonic() - started:.0f} s: main exit {main}, side exit {side_code}")
    return main or side_code


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
