"""Meta-stream record codec and replay/compaction bookkeeping."""

from __future__ import annotations

import pytest

from broker.partition.meta_stream import (
    COMPACT_MIN_RECORDS,
    MetaFormatError,
    MetaState,
    decode_entry,
    encode_entry,
)


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
