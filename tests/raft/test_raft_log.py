"""The in-memory Raft log against a naive model: random appends, truncations and snapshots, then every query."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raft.log import LogEntry, LogInvariantError, RaftLog, SnapshotId

# An operation: ("append", epoch bump, count) | ("truncate", fraction) | ("snapshot", fraction)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(0, 2), st.integers(1, 4)),
        st.tuples(st.just("truncate"), st.floats(0, 1), st.just(0)),
        st.tuples(st.just("snapshot"), st.floats(0, 1), st.just(0)),
    ),
    max_size=30,
)


def naive_end_offset_for_epoch(
    base: SnapshotId, entries: list[LogEntry], epoch: int
) -> tuple[int, int] | None:
    """Largest known epoch <= ``epoch`` and the end of its run, by scanning (the definition, not the index)."""
    known = [(base.epoch, base.end_offset)] + [(e.epoch, e.offset + 1) for e in entries]
    candidates = [e for e, _ in known if e <= epoch]
    if not candidates:
        return None
    best = max(candidates)
    end = max(end for e, end in known if e == best)
    if best == base.epoch:
        end = max(end, base.end_offset)
    return best, end


@settings(max_examples=300, deadline=None)
@given(operations)
def test_log_matches_a_naive_model(ops: list[tuple[str, float, int]]) -> None:
    log = RaftLog()
    base = SnapshotId(0, 0)
    model: list[LogEntry] = []
    epoch = 0
    for kind, amount, count in ops:
        if kind == "append":
            epoch += int(amount)
            new = [LogEntry(base.end_offset + len(model) + i, epoch, b"x") for i in range(count)]
            log.append(new)
            model.extend(new)
        elif kind == "truncate":
            keep = int(len(model) * amount)
            log.truncate_to(base.end_offset + keep)
            del model[keep:]
        elif model:
            upto = int(len(model) * amount)
            if upto:
                base = SnapshotId(model[upto - 1].offset + 1, model[upto - 1].epoch)
                log.truncate_prefix(base)
                del model[:upto]
        assert log.start_offset == base.end_offset
        assert log.end_offset == base.end_offset + len(model)
        assert [log.entry(o) for o in range(log.start_offset, log.end_offset)] == model
        assert log.last_epoch == (model[-1].epoch if model else base.epoch)
        for probe in range(-1, epoch + 2):
            assert log.end_offset_for_epoch(probe) == naive_end_offset_for_epoch(base, model, probe), probe


def test_log_refuses_gaps_epoch_regressions_and_mismatched_snapshots() -> None:
    log = RaftLog(entries=[LogEntry(0, 1, b"a"), LogEntry(1, 2, b"b")])
    with pytest.raises(LogInvariantError, match="append at offset 3"):
        log.append([LogEntry(3, 2, b"gap")])
    with pytest.raises(LogInvariantError, match="epoch 1"):
        log.append([LogEntry(2, 1, b"older")])
    with pytest.raises(LogInvariantError, match="does not match"):
        log.truncate_prefix(SnapshotId(2, 1))
    log.truncate_prefix(SnapshotId(1, 1))
    with pytest.raises(LogInvariantError, match="below the log start"):
        log.truncate_to(0)
    assert log.read(1, max_bytes=0) == [LogEntry(1, 2, b"b")]  # at least one entry, however small the budget
