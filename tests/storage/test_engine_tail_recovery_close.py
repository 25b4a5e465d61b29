"""Closing the streams a restart recovered, when the controller applies a close but its answer is lost (a timeout,
a controller failover): the close is retried (a repeated close at the stream's epoch is answered as done), the
other recovered streams are closed all the same, the background task and shutdown do not fail, and a stream left
recovering opens here even after another broker has opened it at a higher epoch."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from storage import stream_client
from storage.config import BucketURL
from storage.engine import StorageEngine
from storage.errors import StorageError
from storage.metadata.api import NodeIdentity
from storage.metadata.state_machine import StreamMetadataStateMachine
from storage.tail_recovery import upload_recovered_tail
from tests.storage.engine_support import make_engine, payload, small_config
from tests.storage.test_engine_recovery import read_all
from tests.storage.test_engine_tail_recovery import TAIL, UPLOADED, crashed_with_a_tail


def lose_close_answers(
    monkeypatch: pytest.MonkeyPatch, metadata: StreamMetadataStateMachine, stream_id: int, times: int
) -> list[int]:
    """Makes the first ``times`` closes of ``stream_id`` apply at the controller and then fail as if their answer
    was lost; returns the epochs of the closes whose answer was lost."""
    real = metadata.close_stream
    lost: list[int] = []

    async def close_then_lose_the_answer(node: NodeIdentity, closing: int, epoch: int) -> None:
        await real(node, closing, epoch)
        if closing == stream_id and len(lost) < times:
            lost.append(epoch)
            raise StorageError(f"injected: close of stream {closing} applied, its answer lost")

    monkeypatch.setattr(metadata, "close_stream", close_then_lose_the_answer)
    return lost


def other_broker(tmp_path: Path, metadata: StreamMetadataStateMachine) -> StorageEngine:
    return make_engine(small_config(tmp_path, node_id=2, wal_url=BucketURL(0, "file", str(tmp_path / "other-wal"))),
                       metadata)


async def test_a_recovered_close_whose_answer_was_lost_is_retried_and_the_others_are_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first recovered stream's close is applied but answered with an error: it is retried (the controller
    answers a repeated close at the same epoch as done), the other streams are closed too, neither the background
    task nor shutdown fails, and another broker opens all three."""
    metadata = StreamMetadataStateMachine()
    crashed, ids = await crashed_with_a_tail(tmp_path, metadata)
    lost = lose_close_answers(monkeypatch, metadata, ids[0], times=2)
    restarted = make_engine(small_config(tmp_path, node_epoch=crashed.node.node_epoch + 1), metadata)
    await restarted.start()
    other = other_broker(tmp_path, metadata)
    try:
        await asyncio.wait_for(restarted.recovered_tail_uploaded(), 30)
        assert lost == [1, 1]
        assert await metadata.get_opening_streams(restarted.node) == []
        await asyncio.wait_for(restarted.shutdown(), 30)
        await other.start()
        for stream_id in ids:
            moved = await other.open_stream(stream_id, epoch=2)
            assert await read_all(moved) == [payload(stream_id, n) for n in range(UPLOADED + TAIL)]
    finally:
        await other.shutdown()
        await restarted.shutdown()


async def test_a_recovered_stream_whose_close_answer_never_came_opens_after_another_broker_led_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every answer to the first stream's close is lost, past the retry bound: the stream stays recovering here
    though the controller closed it. Another broker opens it at a higher epoch and appends; when it comes back
    here, the take-over at the old recovered epoch is refused as fenced, so it is opened at the epoch asked, read
    from its objects (not from the old cached tail), and the other recovered streams were closed all along."""
    monkeypatch.setattr(stream_client, "CLOSE_RETRY_S", 0.3)
    metadata = StreamMetadataStateMachine()
    crashed, ids = await crashed_with_a_tail(tmp_path, metadata)
    first, *others = ids
    lose_close_answers(monkeypatch, metadata, first, times=1_000)
    restarted = make_engine(small_config(tmp_path, node_epoch=crashed.node.node_epoch + 1), metadata)
    await restarted.start()
    other = other_broker(tmp_path, metadata)
    try:
        await asyncio.wait_for(restarted.recovered_tail_uploaded(), 30)
        assert await metadata.get_opening_streams(restarted.node) == []  # all closed at the controller
        await other.start()
        for stream_id in others:
            await other.open_stream(stream_id, epoch=2)
        elsewhere = await other.open_stream(first, epoch=2)
        end = UPLOADED + TAIL + 3
        for n in range(UPLOADED + TAIL, end):
            await elsewhere.append(payload(first, n), 1)
        await other.close_streams([(elsewhere, -1)])

        back = await asyncio.wait_for(restarted.open_stream(first, epoch=3), 10)
        assert (back.epoch, back.start_offset, back.confirm_offset) == (3, 0, end)
        assert await read_all(back) == [payload(first, n) for n in range(end)]
        await back.append(b"led here again", 1)
        await asyncio.wait_for(restarted.shutdown(), 30)
        assert (await metadata.get_streams([first]))[0].end_offset == end + 1
    finally:
        await other.shutdown()
        await restarted.shutdown()


async def test_the_background_task_logs_a_failed_close_instead_of_dying(caplog: pytest.LogCaptureFixture) -> None:
    """Whatever ``close_recovered`` raises, the background task ends normally (shutdown awaits it, and would raise
    it, stopping before it uploads and closes), logging the failure with the node named."""

    async def drained() -> None:
        return None

    async def close_fails() -> list[int]:
        raise StorageError("injected: the controller is gone")

    await upload_recovered_tail(drained, close_fails, "node 7")
    assert any("node 7" in r.getMessage() and r.exc_info for r in caplog.records)
