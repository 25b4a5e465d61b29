"""The benchmarks a user is told to run: each entry point under ``bench/`` starts (``--help`` answers) and README's
list of benchmarks names it.

Benches never run as tests (they measure, and a shared CI machine would make their figures meaningless), so nothing
else notices a bench that no longer starts, as ``bench/raft.py`` once did when its own name shadowed the ``raft``
package it imports. The modules a bench is split into (no ``__main__``) are covered through the bench that imports
them.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
START_TIMEOUT_S = 120.0


def entry_points() -> list[Path]:
    return sorted(p for p in (ROOT / "bench").glob("*.py") if 'if __name__ == "__main__":' in p.read_text())


def test_every_bench_answers_help() -> None:
    benches = entry_points()
    assert len(benches) >= 10  # the glob found the folder
    running = {bench: subprocess.Popen([sys.executable, str(bench), "--help"], cwd=ROOT, stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, text=True) for bench in benches}
    deadline = time.monotonic() + START_TIMEOUT_S
    failures: list[str] = []
    for bench, proc in running.items():
        try:
            out, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
            failures.append(f"{bench.name}: no answer to --help in {START_TIMEOUT_S:.0f} s")
            continue
        if proc.returncode != 0 or "usage:" not in out:
            failures.append(f"{bench.name}: exit {proc.returncode}: {out.strip().splitlines()[-1:]}")
    assert not failures, "\n".join(failures)


def test_the_readme_lists_every_bench() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Benchmarks", 1)[1].split("\n## ", 1)[0]
    missing = [bench.name for bench in entry_points() if f"bench/{bench.name}" not in section]
    assert not missing, f"README's Benchmarks section does not name {missing}"
