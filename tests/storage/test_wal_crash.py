"""SIGKILL a process while it appends to the WAL, recover, and find every acknowledged append (issue 2 item 3).

For each WAL mode, twice in a row on the same data: a child process (wal_crash_child.py) appends from many
concurrent writers and trims behind itself, printing each acknowledged append; it is killed at a random moment;
this process then recovers the WAL and checks that every acknowledged, untrimmed append comes back, at the WAL
offset it was acknowledged at, with its exact bytes, and that the recovered log is contiguous and in order. The
second round starts the child on the recovered data, so it also proves that appends after a torn-tail recovery
land where the next recovery finds them.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from wal_crash_child import open_crash_wal, payload_for

from storage.wal.base import WALRecord

CHILD = Path(__file__).with_name("wal_crash_child.py")
REPO = Path(__file__).resolve().parents[2]
ROUNDS = 2
MIN_ACKS = 60  # the kill comes after 1-3x this many acknowledgements, then after a random extra delay
READY_TIMEOUT_S = 30
RUN_TIMEOUT_S = 30


@dataclass
class Promises:
    """What the children promised: acknowledged appends by WAL offset, and how far trims went.

    A trim may complete without its ``T`` line being printed (killed in between), so records below the highest
    *attempted* trim may be gone; records below the highest *completed* trim must be.
    """

    acked: dict[int, tuple[int, int, int]] = field(default_factory=dict)  # wal offset -> (stream, offset, next)
    trim: int = 0  # completed
    trim_attempted: int = 0

    def absorb(self, line: str) -> None:
        kind, *values = line.split()
        if kind == "A":
            stream, offset, wal_offset, wal_next = map(int, values)
            assert wal_offset not in self.acked, f"WAL offset {wal_offset} acknowledged twice"
            self.acked[wal_offset] = (stream, offset, wal_next)
        elif kind == "T":
            self.trim = max(self.trim, int(values[0]))
        elif kind == "I":
            self.trim_attempted = max(self.trim_attempted, int(values[0]))


async def run_child_until_killed(
    mode: str, data: Path, *, epoch: int, stream_base: int, rng: random.Random, promises: Promises
) -> int:
    """Runs one child and SIGKILLs it at a random moment; returns how many acknowledgements it printed."""
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(CHILD), mode, str(data), str(epoch), str(stream_base),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env, cwd=REPO,
    )
    assert proc.stdout is not None and proc.stderr is not None
    stdout, stderr = proc.stdout, proc.stderr
    acks = 0
    kill_after = rng.randint(MIN_ACKS, 3 * MIN_ACKS)
    try:
        ready = await asyncio.wait_for(stdout.readline(), READY_TIMEOUT_S)
        assert ready.startswith(b"READY"), (ready, (await stderr.read()).decode()[-2000:])

        async def read_acks() -> None:
            nonlocal acks
            while acks < kill_after:
                line = await stdout.readline()
                assert line, f"child exited early: {(await stderr.read()).decode()[-2000:]}"
                promises.absorb(line.decode())
                acks += line.startswith(b"A")

        await asyncio.wait_for(read_acks(), RUN_TIMEOUT_S)
        await asyncio.sleep(rng.uniform(0.0, 0.6))
    finally:
        if proc.returncode is None:
            proc.kill()  # SIGKILL: no cleanup, no flush, no close
    rest = await asyncio.wait_for(stdout.read(), RUN_TIMEOUT_S)
    await proc.wait()
    for line in rest.decode().splitlines(keepends=True):
        if line.endswith("\n"):  # a line cut by the kill promised nothing
            promises.absorb(line)
            acks += line.startswith("A")
    return acks


def check(recovered: list[WALRecord], promises: Promises) -> None:
    by_offset = {rec.offset: rec for rec in recovered}
    for prev, cur in itertools.pairwise(recovered):
        assert cur.offset == prev.next_offset, f"recovered log is not contiguous at {prev.next_offset}"
    last_offset: dict[int, int] = {}
    for rec in recovered:
        assert rec.offset >= promises.trim, f"WAL offset {rec.offset} came back after a trim to {promises.trim}"
        assert rec.batch.payload == payload_for(rec.batch.stream_id, rec.batch.base_offset), (
            f"wrong bytes for stream {rec.batch.stream_id} offset {rec.batch.base_offset}"
        )
        before = last_offset.get(rec.batch.stream_id)
        assert before is None or rec.batch.base_offset == before + 1, (
            f"stream {rec.batch.stream_id}: offset {rec.batch.base_offset} recovered after {before}"
        )
        last_offset[rec.batch.stream_id] = rec.batch.base_offset
    missing = []
    for wal_offset, (stream, offset, wal_next) in sorted(promises.acked.items()):
        if wal_offset < max(promises.trim, promises.trim_attempted):
            continue
        found = by_offset.get(wal_offset)
        if found is None or (found.batch.stream_id, found.batch.base_offset, found.next_offset) != (
            stream, offset, wal_next
        ):
            missing.append((wal_offset, stream, offset))
    assert not missing, f"{len(missing)} acknowledged appends lost, first: {missing[:5]}"


@pytest.mark.parametrize("mode", ["file", "s3"])
async def test_every_acknowledged_append_survives_sigkill(mode: str, tmp_path: Path) -> None:
    rng = random.Random(f"wal-crash-{mode}")
    promises = Promises()
    epoch = 1
    for round_number in range(ROUNDS):
        acks = await run_child_until_killed(
            mode, tmp_path, epoch=epoch, stream_base=100 * round_number, rng=rng, promises=promises
        )
        assert acks >= MIN_ACKS
        wal = open_crash_wal(mode, tmp_path, epoch + 1)  # a newer owner, as after a failover
        await wal.start()
        recovered = [rec async for rec in wal.recover()]
        await wal.close()
        check(recovered, promises)
        untrimmed = [o for o in promises.acked if o >= max(promises.trim, promises.trim_attempted)]
        assert len(recovered) >= len(untrimmed) > 0
        epoch += 2
