"""Storage engine benchmark (issue 2, "Performance"): prints a Markdown table of what the engine achieves here.

    .venv/bin/python bench/storage.py [--quick] [--only NAME ...] [--dir DIR]

Sections (each runs in a child process of its own, so one section's memory, threads or moto server cannot skew
another's figures):

- ``append``:   appends of 64 KiB from 16 concurrent writers through the engine with the file WAL (fsync'd group
  commits), closed loop; plus the bare file WAL under the same load and the disk's own 1 MiB write+fsync rate
  for reference. Uploads go to an in-memory store: in production they go to S3 over the network, not to the
  WAL's disk (the same holds for ``latency``). The machine is shared, so wall-clock MB/s is noisy: the last column
  gives CPU seconds per GB appended (the process's user + sys, and the event-loop thread's share), engine and bare
  WAL runs alternate (three of each; one with ``--quick``) and the median run by CPU is shown.
- ``latency``:  open-loop appends of 64 KiB at a fixed 50 MB/s; latency is measured from each append's *scheduled*
  time, so a stall delays every append behind it (no coordinated omission).
- ``wal-latency``: the bare file WAL's ack latency for fdatasync'd 100 KiB appends at 20 MB/s (open loop) while
  it rolls 16 MiB segments with nothing to recycle, for each ``Preallocation`` mode: the earlier eager zero-fill
  next to group commits, the paced zero-fill between them, and none.
- ``small-latency``: the ack latency of lone 100-byte appends, each 2 ms after the previous one's acknowledgement
  (a share consumer's acknowledgements: one small durable write per ShareFetch round trip), on fresh WALs (the
  paced zero-fill at work), through the bare file WAL and through the engine's stream, rounds alternating.
- ``puts``:     1 GiB spread over 1000 streams with ``s3.wal.upload.threshold`` 500 MiB; object-store PUT requests
  per GiB (``store.stats.puts``).
- ``catchup``:  one stream written to a moto S3 server (``ThreadedMotoServer`` on 127.0.0.1 in the child), then
  read from offset 0 by a fresh engine (cold caches) in 1 MiB fetches, read-ahead on; read-ahead off for contrast;
  whole-object GETs as the server's own ceiling; and the same from the local store, which separates the
  engine's read path from the server.
- ``memory``:   peak resident set size (psutil RSS, sampled every 20 ms) while writing through and reading back
  far more data than the configured caches, against the caches' configured sizes plus the fixed overhead (the
  RSS of the child with everything imported and the engine started, before any data) and the buffers of object
  builds (twice the upload threshold). Run twice: with glibc's default malloc, and with its mmap threshold fixed
  (``MALLOC_MMAP_THRESHOLD_``) so freed large buffers go back to the system; the gap is allocator retention.

``--quick`` shrinks every size (a run of about a minute); the default sizes are the issue's.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import uvloop

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]  # the repository's packages before this directory (bench/storage.py shadows ``storage``)

# The sections, grouped by what they measure: bulk appends, one append's wait, reading back and memory.
from bench.storage_common import FULL, QUICK, Row, Sizes  # noqa: E402
from bench.storage_latency import bench_latency, bench_small_latency, bench_wal_latency  # noqa: E402
from bench.storage_reads import bench_catchup, bench_memory  # noqa: E402
from bench.storage_throughput import bench_append, bench_puts  # noqa: E402

SECTIONS: dict[str, Callable[[Sizes, Path], Coroutine[Any, Any, list[Row]]]] = {
    "append": bench_append,
    "latency": bench_latency,
    "wal-latency": bench_wal_latency,
    "small-latency": bench_small_latency,
    "puts": bench_puts,
    "catchup": bench_catchup,
    "memory": bench_memory,
}


# -------------------------------------------------------------------------------------------------- driver


def run_child(name: str, sizes: Sizes, base: Path | None) -> None:
    """Runs one section and prints its rows as JSON on the last line of stdout."""
    runner: Callable[[Coroutine[Any, Any, list[Row]]], list[Row]] = uvloop.run
    with tempfile.TemporaryDirectory(prefix=f"fjord-bench-{name}-", dir=base) as tmp:
        rows = runner(SECTIONS[name](sizes, Path(tmp)))
    print(json.dumps([dataclasses.asdict(r) for r in rows]))


MMAP_THRESHOLD = "131072"
"""glibc otherwise raises its mmap threshold dynamically (up to 32 MiB) after large buffers are freed, and then
keeps freed object-build and block buffers in a fragmented heap instead of returning them to the system."""


def run_section(name: str, args: argparse.Namespace, env: dict[str, str] | None = None) -> list[Row]:
    command = [sys.executable, str(Path(__file__).resolve()), "--child", name]
    if args.quick:
        command.append("--quick")
    if args.dir:
        command += ["--dir", str(args.dir)]
    started = time.perf_counter()
    proc = subprocess.run(
        command, capture_output=True, text=True, timeout=args.timeout, check=False, env={**os.environ, **(env or {})}
    )
    elapsed = time.perf_counter() - started
    if proc.returncode != 0 or not proc.stdout.strip():
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return [Row(name, "failed", ok=False, note=f"exit {proc.returncode}: {tail}")]
    rows = [Row(**r) for r in json.loads(proc.stdout.strip().splitlines()[-1])]
    print(f"  {name}: done in {elapsed:.0f} s", file=sys.stderr)
    return rows


def render(rows: list[Row], quick: bool) -> str:
    lines = [
        f"Fjord storage benchmark ({'quick sizes' if quick else 'issue sizes'}; {os.cpu_count()} CPUs, "
        f"Python {sys.version.split()[0]})",
        "",
        "| metric | result | target | ok | CPU s/GB |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        verdict = {True: "yes", False: "**no**", None: ""}[row.ok]
        lines.append(f"| {row.metric} | {row.result} | {row.target} | {verdict} | {row.cpu} |")
    lines.append("")
    lines += [f"- {row.metric}: {row.note}" for row in rows if row.note]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes for a fast run")
    parser.add_argument("--only", nargs="+", choices=sorted(SECTIONS), help="run only these sections")
    parser.add_argument("--dir", type=Path, help="where to put WALs and objects (default: the system temp dir)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per section before giving up")
    parser.add_argument("--child", choices=sorted(SECTIONS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = QUICK if args.quick else FULL
    if args.child:
        run_child(args.child, sizes, args.dir)
        return 0
    rows: list[Row] = []
    for name in args.only or list(SECTIONS):
        print(f"running {name}...", file=sys.stderr)
        try:
            rows += run_section(name, args)
            if name == "memory":  # the same workload with the allocator tuned, to separate it from the engine
                rows += run_section(name, args, {"MALLOC_MMAP_THRESHOLD_": MMAP_THRESHOLD})
        except subprocess.TimeoutExpired:
            rows.append(Row(name, "timed out", ok=False, note=f"no result within {args.timeout:.0f} s"))
    print(render(rows, args.quick))
    return 0 if all(r.ok is not False for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
