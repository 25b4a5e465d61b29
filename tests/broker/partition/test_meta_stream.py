"""Meta-stream record codec, replay/compaction bookkeeping, and when a partition's open and close compact."""

from __future__ import annotations

import pytest

from broker.partition.meta_stream import (
    COMPACT_MIN_RECORDS,
    MetaFormatError,
    MetaState,
    MetaStream,
    decode_entry,
    encode_entry,
)
from storage.engine import StorageEngine
from storage.metadata.state_machine import StreamMetadataStateMachine
from testkit.waiting import eventually_async


def test_entry_layout_matches_design() -> None:
    data = encode_entry("PARTITION", b'{"s":0}')
    assert data[:5] == b"\x00\x00\x00\x00\x09" and data[5:14] == b"PARTITION"
    assert decode_entry(data) == ("PARTITION", b'{"s":0}')


@pytest.mark.parametrize("bad", [b"", b"\x01\x00\x00\x00\x01k", b"\x00\x00\x00\x00\x09PART"])
def test_malformed_entries_raise(bad: bytes) -> None:
    with pytest.raises(MetaFormatError):
        decode_entry(bad)


def test_replay_keeps_last_value_and_asks_for_compaction_when_mostly_superseded() -> None:
    state = MetaState.empty()
    state.apply(0, "LOG", b"a")
    for i in range(COMPACT_MIN_RECORDS):
        state.apply(i + 1, "PARTITION", str(i).encode())
        if i < COMPACT_MIN_RECORDS - 2:
            assert not state.should_compact()
    assert state.get("PARTITION") == str(COMPACT_MIN_RECORDS - 1).encode()
    assert state.get("LOG") == b"a"
    assert state.should_compact()


async def test_an_open_compacts_after_it_serves_and_a_closing_put_leaves_only_live_entries(
    engine: tuple[StorageEngine, StreamMetadataStateMachine],
) -> None:
    """The puts a moved partition's producer waits for (the open's and the close's) do no compaction of their own:
    the open's runs in the background right after, and trims once an upload has the re-appended entries (a reader
    of the bucket finds the LOG entry uploaded all along); the close's rewrites every live entry behind its own so
    the stream can be trimmed to them, leaving the next opener a handful of records to replay."""
    eng, _ = engine
    stream = await eng.open_stream(await eng.create_stream(), 0)
    meta = MetaStream(stream, "orders-0")
    eng.add_upload_listener(lambda ends: meta.trim_if_due() if stream.stream_id in ends else None)
    await meta.put({"LOG": b"log"})
    for i in range(COMPACT_MIN_RECORDS):
        await meta.put({"PARTITION": str(i).encode()}, compact=False)
    assert stream.start_offset == 0 and meta.state.should_compact()
    await eng.force_upload()
    meta.compact_later()
    await eventually_async(lambda: meta.state.records == 2, timeout=10, what="the background compaction")
    assert meta.get("LOG") == b"log"
    assert stream.start_offset == 0  # the re-appended entries are only in the WAL yet
    await eng.force_upload()
    await eventually_async(lambda: stream.start_offset or None, timeout=10, what="the trim after the upload")
    assert stream.start_offset == stream.next_offset - 2

    for i in range(3):
        await meta.put({"PARTITION": b"again %d" % i}, compact=False)
    trim_to = await meta.put_last({"PARTITION": b"closed", "PRODUCER_SNAPSHOTS": b"snap"})
    assert trim_to == stream.next_offset - 3  # LOG, PARTITION and PRODUCER_SNAPSHOTS, the stream's last records
    meta.compact_later()  # nothing follows the closing entries, not even a compaction
    await stream.trim(trim_to)
    await stream.close()
    reopened = MetaStream(await eng.open_stream(stream.stream_id, 1), "orders-0")
    await reopened.replay()
    assert reopened.state.records == 3
    assert (reopened.get("LOG"), reopened.get("PARTITION"), reopened.get("PRODUCER_SNAPSHOTS")) == (
        b"log", b"closed", b"snap")
    await reopened.stream.close()


async def test_a_replays_trim_runs_once_uploaded_though_a_compaction_followed_it(
    engine: tuple[StorageEngine, StreamMetadataStateMachine],
) -> None:
    """A restarted partition's replay finds superseded entries and trims them once an upload has what it keeps; its
    open then compacts, whose trim waits for a later upload of the re-appended entries. In a crash loop the only
    upload is each restart's recovered tail, which holds the replay's entries but not the compaction's: the replay's
    trim must still run then, or the stream grows by every restart's entries."""
    eng, _ = engine
    stream = await eng.open_stream(await eng.create_stream(), 0)
    writer = MetaStream(stream, "orders-0")
    for i in range(COMPACT_MIN_RECORDS):
        await writer.put({"PARTITION": str(i).encode()}, compact=False)
    await writer.put({"LOG": b"log"}, compact=False)
    opener = MetaStream(stream, "orders-0")
    await opener.replay()  # its trim: up to the last PARTITION entry, due once everything replayed is uploaded
    first_live = stream.next_offset - 2
    await eng.force_upload()  # the recovered tail's upload
    await opener.put({"PARTITION": b"opened"})  # compacts: its own trim waits for an upload of what it re-appended
    assert stream.uploaded_offset < stream.next_offset
    opener.trim_if_due()  # what the upload's listener calls
    await eventually_async(lambda: stream.start_offset or None, timeout=10, what="the replay's trim")
    assert stream.start_offset == first_live
    assert (opener.get("LOG"), opener.get("PARTITION")) == (b"log", b"opened")
