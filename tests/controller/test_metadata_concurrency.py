"""Stream-metadata writes in flight together (``storage.metadata.write_locks``): writes on other streams and keys
proceed while one is being committed, writes on the same stream still see each other's effects, and the state a
proposer builds (applying in completion order) is the state replaying the log builds (log order) — on a restart
and on every voter of a quorum."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest

from controller.controller import Controller
from controller.quorum import QuorumController
from settings.server import ServerConfig
from storage.errors import OffsetNotMatchedError
from storage.metadata.api import CommitStreamSetObjectRequest, NodeIdentity, ObjectStreamRange, StreamMetadata
from storage.metadata.record_codec import MetadataRecord
from storage.metadata.state_machine import StreamMetadataStateMachine
from storage.metadata.write_locks import EVERYTHING, WriteLocks
from testkit.waiting import eventually_async
from tests.quorum_fixtures import active_voter

pytestmark = pytest.mark.timeout(60)

NODE = NodeIdentity(7, 1)
STREAMS = 8
ROUNDS = 5


async def _traffic(streams: StreamMetadata) -> list[int]:
    """Per stream: open, then rounds of prepare + commit continuing it, with KV puts and prepares interleaved,
    all streams at once. Returns every prepared object id."""
    ids = await asyncio.gather(*(streams.create_stream(NODE, (("n", str(i)),)) for i in range(STREAMS)))
    prepared: list[int] = []

    async def one_stream(stream_id: int) -> None:
        await streams.open_stream(NODE, stream_id, 0)
        offset = 0
        for round_ in range(ROUNDS):
            object_id = await streams.prepare_objects(NODE, 1, 60_000)
            prepared.append(object_id)
            ranges = (ObjectStreamRange(stream_id, offset, offset + 10, 0),)
            await streams.commit_stream_set_object(CommitStreamSetObjectRequest(NODE, object_id, 100, ranges))
            await streams.put_kv(f"k/{stream_id}", str(round_).encode())
            offset += 10

    await asyncio.gather(*(one_stream(s) for s in ids))
    return prepared


def _config(tmp_path: Path) -> ServerConfig:
    return ServerConfig.load(None, [f"log.dirs={tmp_path}"])


async def test_concurrent_writes_replay_to_the_same_state(tmp_path: Path) -> None:
    controller = await Controller.start(_config(tmp_path))
    try:
        prepared = await _traffic(controller.stream_metadata)
        assert len(set(prepared)) == len(prepared) == STREAMS * ROUNDS, "an object id was handed out twice"
        streams = await controller.stream_metadata.get_streams(list(range(STREAMS)))
        assert [s.end_offset for s in streams] == [10 * ROUNDS] * STREAMS
        live: list[MetadataRecord] = controller.snapshot_records()
    finally:
        await controller.close()
    restarted = await Controller.start(_config(tmp_path))
    try:
        assert restarted.snapshot_records() == live
    finally:
        await restarted.close()


async def test_two_commits_racing_for_the_same_range_cannot_both_win() -> None:
    meta = StreamMetadataStateMachine()
    stream_id = await meta.create_stream(NODE)
    await meta.open_stream(NODE, stream_id, 0)
    first = await meta.prepare_objects(NODE, 2, 60_000)
    second = first + 1
    ranges = (ObjectStreamRange(stream_id, 0, 10, 0),)
    results = await asyncio.gather(
        meta.commit_stream_set_object(CommitStreamSetObjectRequest(NODE, first, 100, ranges)),
        meta.commit_stream_set_object(CommitStreamSetObjectRequest(NODE, second, 100, ranges)),
        return_exceptions=True,
    )
    assert sum(r is None for r in results) == 1
    assert sum(isinstance(r, OffsetNotMatchedError) for r in results) == 1
    assert (await meta.get_streams([stream_id]))[0].end_offset == 10


class _FlakySink:
    """The metadata log with fault injection: the append of the n-th write fails; writes are held until released,
    so several are in flight together."""

    def __init__(self, fail_on: int) -> None:
        self.fail_on = fail_on
        self.calls = 0
        self.release = asyncio.Event()

    async def __call__(self, records: Sequence[MetadataRecord]) -> None:
        self.calls += 1
        call = self.calls
        await self.release.wait()
        if call == self.fail_on:
            raise OSError("injected append failure")


async def test_a_failed_append_among_concurrent_prepares_gives_no_id_twice() -> None:
    sink = _FlakySink(fail_on=2)
    meta = StreamMetadataStateMachine(sink=sink)
    tasks = [asyncio.create_task(meta.prepare_objects(NODE, 3, 60_000)) for _ in range(4)]
    # All four are in flight at once: none waits for another's append.
    await eventually_async(lambda: sink.calls, until=lambda calls: calls >= 4, timeout=5, interval=0.01,
                           what="four appends in flight together")
    sink.release.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    failed = [r for r in results if isinstance(r, OSError)]
    firsts = [r for r in results if isinstance(r, int)]
    assert len(failed) == 1 and len(firsts) == 3
    assert len({i for f in firsts for i in range(f, f + 3)}) == 9
    later = await meta.prepare_objects(NODE, 1, 60_000)
    assert later >= max(firsts) + 3, "an id of a write still in flight (or failed) was handed out again"
    failed_ids = set(range(12)) - {i for f in firsts for i in range(f, f + 3)}
    assert all(meta.object_state(i) is None for i in failed_ids), "the failed write changed the state"


async def test_write_locks_disjoint_keys_together_everything_alone() -> None:
    locks = WriteLocks()
    order: list[str] = []
    a_in = asyncio.Event()
    a_out = asyncio.Event()

    async def keyed(name: str, keys: tuple[str, ...], hold: asyncio.Event | None = None) -> None:
        async with locks.hold(keys):
            order.append(f"{name}+")
            if hold is not None:
                a_in.set()
                await hold.wait()
            order.append(f"{name}-")

    async def everything() -> None:
        async with locks.hold(EVERYTHING):
            order.append("all")

    first = asyncio.create_task(keyed("a", ("s1",), a_out))
    await a_in.wait()
    await keyed("b", ("s2",))  # disjoint: runs while a holds s1
    assert order == ["a+", "b+", "b-"]
    blocked = asyncio.create_task(keyed("c", ("s1",)))
    sweep = asyncio.create_task(everything())
    late = asyncio.create_task(keyed("d", ("s3",)))  # held back behind the waiting all-keys writer
    await asyncio.sleep(0.05)  # time in which c, the all-keys writer and d would run if they were not held back
    assert order == ["a+", "b+", "b-"]
    a_out.set()
    await asyncio.gather(first, blocked, sweep, late)
    assert order.index("all") < order.index("d+")
    assert order.index("a-") < order.index("c+")


# ------------------------------------------------------------------------------ a quorum of three


async def test_every_voter_reaches_the_proposers_state(voters: list[QuorumController]) -> None:
    leader = await active_voter(voters)
    await _traffic(leader.controller.stream_metadata)
    wanted = leader.controller.stream_metadata.snapshot()
    await eventually_async(lambda: all(q.controller.stream_metadata.snapshot() == wanted for q in voters),
                           timeout=10, what="every voter to reach the proposer's state")
