"""The sans-I/O state of one share partition: which records of one topic partition one share group has in flight.

Kafka's SharePartition keeps, from the share-partition start offset (SPSO) on, the state of every record the group
has fetched: AVAILABLE, ACQUIRED by one member under a time-limited lock, ACKNOWLEDGED or ARCHIVED. Records below the
SPSO are done; records at or beyond the window's end (:attr:`end_offset`, one past Kafka's SPEO) have never been
handed out. This class holds that window and every rule of it, without I/O: the async facade
(``share_partition.py``) reads the log and passes the batches in, and writes the changes this class reports
(:meth:`take_update`) to the share stream.

The window is kept per offset in compact parallel arrays (state byte, delivery count, lock deadline, owner): it is
bounded by ``partition_max_record_locks`` for fresh acquisitions, and per-offset state is what acknowledgements of
single records, releases of parts of batches and lock time-outs need without splitting ranges.

What is persisted (``state_batches``, :meth:`take_update`) is Kafka's: terminal states and AVAILABLE records with
their delivery count. Acquisitions themselves are not written (as in Kafka: a fetch costs no durable write); an
update carries the records an acknowledgement, release, time-out or SPSO move changed, and a snapshot writes an
ACQUIRED record as AVAILABLE with the count of its current delivery. After a broker's death every record that was
acquired is AVAILABLE again.
"""

from __future__ import annotations

import re
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from broker.share.record_states import ACK_TARGET, TERMINAL, AcknowledgeType, RecordState

_AVAILABLE = int(RecordState.AVAILABLE)
_ACQUIRED = int(RecordState.ACQUIRED)
_ACKNOWLEDGED = int(RecordState.ACKNOWLEDGED)
_ARCHIVED = int(RecordState.ARCHIVED)
_TERMINAL = frozenset(int(s) for s in TERMINAL)
_MAX_COUNT = 0x7FFF
_ACQUIRED_BYTE = bytes((_ACQUIRED,))
_AVAILABLE_RUN = re.compile(re.escape(bytes((_AVAILABLE,))) + b"+")
#: The window's acknowledged-and-archived prefix, which the SPSO moves past.
_TERMINAL_RUN = re.compile(b"[" + b"".join(re.escape(bytes((t,))) for t in sorted(_TERMINAL)) + b"]*")


@dataclass(frozen=True, slots=True)
class AckBatch:
    """One acknowledgement batch of ShareFetch/ShareAcknowledge: one type for the whole range, or one per offset."""

    first_offset: int
    last_offset: int
    types: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class AcquiredRange:
    """Offsets handed to one member, all at the same delivery count (ShareFetch's AcquiredRecords)."""

    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class LogBatch:
    """A batch of the partition's log as acquisition sees it: ``skip`` for what no consumer may get (a control
    batch; under read_committed, a batch of an aborted transaction), which is archived instead."""

    first_offset: int
    last_offset: int
    skip: bool = False


@dataclass(frozen=True, slots=True)
class StateBatch:
    """A persisted range of records with one state and delivery count (Kafka's ``StateBatches`` entry)."""

    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class Limits:
    """The group's effective settings the state machine applies (from ``ShareGroupConfig``)."""

    record_lock_duration_ms: int = 30_000
    delivery_count_limit: int = 5
    max_record_locks: int = 2_000


@dataclass(frozen=True, slots=True)
class StateUpdate:
    """What changed since the last :meth:`PartitionShareState.take_update`: the new SPSO and the records whose
    persisted state changed (Kafka's ShareUpdateValue)."""

    start_offset: int
    batches: tuple[StateBatch, ...]


class AckError(Exception):
    """An acknowledgement Kafka refuses; ``code`` is its error code. Raised before anything changed."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class PartitionShareState:
    """In-flight records of one (group, topic partition) from the SPSO on. Offsets are Kafka offsets; times are
    milliseconds of the caller's clock (injected, so lock time-outs are testable)."""

    def __init__(self, start_offset: int, limits: Limits | None = None) -> None:
        self.limits = limits or Limits()
        self.start_offset = start_offset
        self._states = bytearray()
        self._counts = array("H")
        self._deadlines = array("q")
        self._owners: list[str | None] = []
        self._acquired = 0
        #: No lock runs out before this (an early bound: a record acknowledged since may have held it), so the
        #: timer's tick scans the window only when something may be due.
        self._earliest_deadline: int | None = None
        #: Offset ranges (first, last) changed since the last write, overlapping or not, in no order: a fetch's
        #: acknowledgement adds one range, not its thousands of offsets (and most of it is below the SPSO by the
        #: time it is written, which drops it without expanding it).
        self._dirty: list[tuple[int, int]] = []
        self._start_moved = False
        self.state_epoch = 0
        self.leader_epoch = -1

    # ------------------------------------------------------------------ reading
    @property
    def end_offset(self) -> int:
        """One past the last offset ever handed out (Kafka's SPEO + 1): the next fresh record."""
        return self.start_offset + len(self._states)

    @property
    def acquired_count(self) -> int:
        return self._acquired

    def in_flight(self) -> int:
        return len(self._states)

    @property
    def delivery_complete_count(self) -> int:
        """Records at or past the start offset whose delivery is complete (acknowledged or archived): what
        DescribeShareGroupOffsets leaves out of lag (KIP-1226)."""
        return sum(self._states.count(state) for state in _TERMINAL)

    def state_of(self, offset: int) -> tuple[RecordState, int, str | None] | None:
        """(state, delivery count, owner) of an offset inside the window; None outside it."""
        i = offset - self.start_offset
        if not 0 <= i < len(self._states):
            return None
        return RecordState(self._states[i]), self._counts[i], self._owners[i]

    def fetch_offset(self) -> int:
        """Where acquisition would start: the first AVAILABLE record of the window, else the window's end."""
        i = self._states.find(_AVAILABLE)
        return self.start_offset + i if i >= 0 else self.end_offset

    def can_acquire(self, log_end: int) -> bool:
        """Something could be acquired now: an AVAILABLE record in the window, or fresh records below ``log_end``
        (the high watermark, or the LSO under read_committed) while the window has room."""
        if self._states.find(_AVAILABLE) >= 0:
            return True
        return self.end_offset < log_end and len(self._states) < self.limits.max_record_locks

    def next_deadline(self) -> int | None:
        """When the timer should look again: no lock runs out before it (None: nothing is acquired)."""
        if not self._acquired:
            return None
        if self._earliest_deadline is None:
            self._earliest_deadline = min(
                (d for d, s in zip(self._deadlines, self._states, strict=True) if s == _ACQUIRED), default=None
            )
        return self._earliest_deadline

    def _lock_until(self, deadline: int) -> None:
        if self._earliest_deadline is None or deadline < self._earliest_deadline:
            self._earliest_deadline = deadline

    def member_acquired(self, member_id: str) -> int:
        return sum(1 for o, s in zip(self._owners, self._states, strict=True) if s == _ACQUIRED and o == member_id)

    # ------------------------------------------------------------------ acquisition
    def acquire(
        self, member_id: str, batches: Iterable[LogBatch], max_records: int, now_ms: int, *,
        whole_batches: bool = False, batch_size: int = 0, taken: list[AcquiredRange] | None = None,
    ) -> list[AcquiredRange]:
        """Acquires for ``member_id`` the AVAILABLE records of ``batches`` (in offset order, as read from the log
        from :meth:`fetch_offset` on): records of the window again, fresh ones after it while the window holds
        fewer than ``max_record_locks``, at most ``max_records`` in all. Skipped batches and offsets the log has no
        batch for are archived. Returns the acquired ranges, each with one delivery count.

        ``whole_batches`` is ShareFetch's batch-optimized mode (Kafka's default): the limits are checked between
        log batches only, so the batch that reaches ``max_records`` (or fills the window) is acquired to its end
        and the fetch may exceed both, as Kafka completes the batch holding the limit rather than splitting it;
        fresh ranges are then cut at batch boundaries every ``batch_size`` records (Kafka's AcquiredRecords per
        BatchSize). Without it (record-limit mode, and this class's own default) the limits are exact.

        ``taken``: the ranges an earlier read of the same fetch acquired, continued (the new ones appended, merged
        into its last range as one acquisition would) and returned.

        Runs of records change as slices (fresh records, the bulk of a fetch, are one ``extend``); only records
        acquired again go one by one, as each carries its own delivery count."""
        deadline = now_ms + self.limits.record_lock_duration_ms
        taken = [] if taken is None else taken
        remaining = max_records
        split = batch_size if whole_batches and batch_size > 0 else 0
        for batch in batches:
            if remaining <= 0:
                break
            # What this batch may give: all of it in batch-optimized mode, else what the limit leaves.
            allowed = batch.last_offset - batch.first_offset + 1 if whole_batches else remaining
            first = max(batch.first_offset, self.start_offset)
            if first > self.end_offset and not self._skip_gap(first):
                break  # a gap wider than the window's room: it waits until the records before it are done
            i = first - self.start_offset
            stop = min(batch.last_offset + 1, self.end_offset) - self.start_offset
            while allowed > 0 and i < stop:  # records of the window, AVAILABLE again
                i = self._states.find(_AVAILABLE, i, stop)
                if i < 0:
                    break
                run = _run_end(self._states, i, stop) - i
                if batch.skip:
                    self._fill(i, run, _ARCHIVED)
                else:
                    run = min(run, allowed)
                    self._take_again(i, run, member_id, deadline, taken)
                    remaining -= run
                    allowed -= run
                i += run
            fresh = max(first, self.end_offset)
            wanted = batch.last_offset + 1 - fresh
            if allowed <= 0 or wanted <= 0:
                continue
            room = max(self.limits.max_record_locks - len(self._states), 0)
            if batch.skip:
                n = min(wanted, room)
            elif whole_batches:
                # The window's bound is soft too: the batch is completed, up to a second window (a batch claiming
                # more records than that is cut as a record-limit fetch cuts it: per-offset state stays bounded).
                n = min(wanted, room + self.limits.max_record_locks) if room else 0
            else:
                n = min(wanted, room, allowed)
            if n > 0 and batch.skip:
                self._extend(n, _ARCHIVED)
            elif n > 0:
                self._extend_acquired(n, member_id, deadline)
                _add_range(taken, fresh, fresh + n - 1, 1, split)
                remaining -= n
            if n < wanted:
                break  # the window is full (or max_records reached)
        self._advance_start()
        return taken

    def _skip_gap(self, first: int) -> bool:
        """Offsets from the window's end up to ``first`` that the log holds no batch for (compaction, deleted
        records) are archived; False when they do not fit the window's room. With nothing in flight the SPSO moves
        past them without holding their state: a compacted log's gap may span millions of offsets."""
        gap = first - self.end_offset
        if not self._states:
            self.start_offset = first
            self._start_moved = True
            return True
        if gap > max(self.limits.max_record_locks - len(self._states), 0):
            return False
        self._extend(gap, _ARCHIVED)
        return True

    def _take_again(self, i: int, n: int, member_id: str, deadline: int, taken: list[AcquiredRange]) -> None:
        """Acquires the AVAILABLE window records ``[i, i + n)``, each at its next delivery count."""
        counts = self._counts
        for k in range(i, i + n):
            count = min(counts[k] + 1, _MAX_COUNT)
            counts[k] = count
            _add_range(taken, self.start_offset + k, self.start_offset + k, count)
        self._states[i:i + n] = _ACQUIRED_BYTE * n
        self._deadlines[i:i + n] = array("q", [deadline]) * n
        self._owners[i:i + n] = [member_id] * n
        self._acquired += n
        self._lock_until(deadline)

    def _extend_acquired(self, n: int, member_id: str, deadline: int) -> None:
        """Fresh records at the window's end, acquired at their first delivery."""
        self._states.extend(_ACQUIRED_BYTE * n)
        self._counts.extend(array("H", [1]) * n)
        self._deadlines.extend(array("q", [deadline]) * n)
        self._owners.extend([member_id] * n)
        self._acquired += n
        self._lock_until(deadline)

    # ------------------------------------------------------------------ acknowledgement
    def check_acknowledge(self, member_id: str, acks: Sequence[AckBatch]) -> None:
        """Raises :class:`AckError` for acknowledgements Kafka refuses, in Kafka's order batch by batch: malformed,
        unsorted or overlapping batches (INVALID_REQUEST), offsets past the end of the window while it holds
        records (INVALID_REQUEST, Kafka's "past acquired records"), or records this member does not hold acquired
        (INVALID_RECORD_STATE). A batch may start on the previous batch's last offset (Kafka's request check lets
        it through); that record was settled by the previous batch, so it is no longer acquired
        (INVALID_RECORD_STATE), unless that batch only renewed its lock."""
        previous_last = -1
        previous_renews = False
        for ack in acks:
            span = ack.last_offset - ack.first_offset + 1
            if ack.first_offset < 0 or span <= 0:
                bad = f"{ack.first_offset}-{ack.last_offset}"
                raise AckError(ErrorCode.invalid_request, f"bad acknowledgement range {bad}")
            if ack.first_offset < previous_last:
                raise AckError(ErrorCode.invalid_request, "acknowledgement batches overlap or are not in order")
            if len(ack.types) not in (1, span):
                raise AckError(ErrorCode.invalid_request, f"{len(ack.types)} acknowledge types for {span} offsets")
            if any(t not in ACK_TARGET for t in ack.types):
                raise AckError(ErrorCode.invalid_request, f"unknown acknowledge type in {ack.types}")
            if self._states and ack.first_offset >= self.start_offset and ack.last_offset >= self.end_offset:
                raise AckError(ErrorCode.invalid_request, f"offset {ack.last_offset} is past the acquired records")
            if ack.first_offset == previous_last and not previous_renews:
                raise AckError(ErrorCode.invalid_record_state, f"offset {ack.first_offset} is acknowledged twice")
            i, stop = ack.first_offset - self.start_offset, ack.last_offset + 1 - self.start_offset
            if i < 0 or stop > len(self._states) or self._states.count(_ACQUIRED, i, stop) != span:
                offset = next(o for o in range(ack.first_offset, ack.last_offset + 1) if self._not_acquired(o))
                raise AckError(ErrorCode.invalid_record_state, f"offset {offset} is not acquired")
            if self._owners[i:stop].count(member_id) != span:
                offset = next(o for o in range(ack.first_offset, ack.last_offset + 1)
                              if self._owners[o - self.start_offset] != member_id)
                raise AckError(ErrorCode.invalid_record_state, f"offset {offset} is acquired by another member")
            previous_last = ack.last_offset
            previous_renews = ack.types[-1] == AcknowledgeType.RENEW

    def _not_acquired(self, offset: int) -> bool:
        i = offset - self.start_offset
        return not 0 <= i < len(self._states) or self._states[i] != _ACQUIRED

    def acknowledge(self, member_id: str, acks: Sequence[AckBatch], now_ms: int = 0) -> dict[AcknowledgeType, int]:
        """Applies the acknowledgements atomically (nothing changes when one is refused, :class:`AckError`).
        Returns how many records each type settled (RELEASE at the delivery limit counts as REJECT: archived).
        RENEW keeps the record acquired with a lock from ``now_ms``."""
        self.check_acknowledge(member_id, acks)
        counted: dict[AcknowledgeType, int] = {}
        for ack in acks:
            if len(ack.types) == 1 and ack.types[0] not in (AcknowledgeType.RENEW, AcknowledgeType.RELEASE):
                # One terminal type for the whole range (what consumers send for records they processed): slices.
                kind = AcknowledgeType(ack.types[0])
                i, n = ack.first_offset - self.start_offset, ack.last_offset - ack.first_offset + 1
                self._acquired -= n
                self._owners[i:i + n] = [None] * n
                self._fill(i, n, int(ACK_TARGET[kind]))
                counted[kind] = counted.get(kind, 0) + n
                continue
            for n, offset in enumerate(range(ack.first_offset, ack.last_offset + 1)):
                kind = AcknowledgeType(ack.types[0] if len(ack.types) == 1 else ack.types[n])
                i = offset - self.start_offset
                if kind == AcknowledgeType.RENEW:
                    self._deadlines[i] = now_ms + self.limits.record_lock_duration_ms
                    self._earliest_deadline = None  # the renewed lock may have been the earliest
                elif kind == AcknowledgeType.RELEASE:
                    kind = AcknowledgeType.RELEASE if self._release(i) == _AVAILABLE else AcknowledgeType.REJECT
                else:
                    self._acquired -= 1
                    self._owners[i] = None
                    self._set(i, int(ACK_TARGET[kind]))
                counted[kind] = counted.get(kind, 0) + 1
        self._advance_start()
        return counted

    def release_member(self, member_id: str) -> tuple[int, int]:
        """Every record ``member_id`` holds goes back (AVAILABLE, or ARCHIVED at the delivery limit): its session
        closed or it left. Returns (released, archived)."""
        released = archived = 0
        for i, owner in enumerate(self._owners):
            if owner == member_id and self._states[i] == _ACQUIRED:
                if self._release(i) == _AVAILABLE:
                    released += 1
                else:
                    archived += 1
        self._advance_start()
        return released, archived

    def expire_locks(self, now_ms: int) -> tuple[int, int]:
        """Releases every acquisition whose lock ran out by ``now_ms``. Returns (released, archived)."""
        released = archived = 0
        due = self.next_deadline()
        if due is None or due > now_ms:
            return 0, 0
        earliest: int | None = None
        for i, state in enumerate(self._states):
            if state != _ACQUIRED:
                continue
            deadline = self._deadlines[i]
            if deadline <= now_ms:
                if self._release(i) == _AVAILABLE:
                    released += 1
                else:
                    archived += 1
            elif earliest is None or deadline < earliest:
                earliest = deadline
        self._earliest_deadline = earliest
        self._advance_start()
        return released, archived

    # ------------------------------------------------------------------ start offset
    def move_start(self, offset: int) -> None:
        """Moves the SPSO forward to ``offset`` (the log start moved past it: those records are gone), dropping the
        window below it. A move backwards is ignored."""
        if offset <= self.start_offset:
            return
        drop = min(offset - self.start_offset, len(self._states))
        self._acquired -= self._states.count(_ACQUIRED, 0, drop)
        self._drop(drop)
        self.start_offset = offset
        self._start_moved = True

    def reset(self, offset: int) -> None:
        """AlterShareGroupOffsets: a new start, nothing in flight, a new state epoch."""
        self._drop(len(self._states))
        self._acquired = 0
        self._earliest_deadline = None
        self.start_offset = offset
        self.state_epoch += 1
        self._dirty.clear()
        self._start_moved = True

    # ------------------------------------------------------------------ persistence
    def take_update(self) -> StateUpdate | None:
        """The changes since the last call (None: nothing to persist), and forgets them."""
        if not self._dirty and not self._start_moved:
            return None
        start = self.start_offset
        dirty = sorted({o for first, last in self._dirty if last >= start for o in range(max(first, start), last + 1)})
        self._dirty.clear()
        self._start_moved = False
        return StateUpdate(self.start_offset, tuple(self._batches(dirty)))

    def state_batches(self) -> tuple[StateBatch, ...]:
        """The whole window as persisted batches (a snapshot): every record not AVAILABLE at count 0."""
        offsets = [
            self.start_offset + i
            for i, s in enumerate(self._states)
            if s != _AVAILABLE or self._counts[i] > 0
        ]
        self._dirty.clear()
        self._start_moved = False
        return tuple(self._batches(offsets))

    def apply(self, start_offset: int, batches: Iterable[StateBatch]) -> None:
        """Replays a persisted snapshot's or update's content: the records' states, then the start offset. A
        persisted ACQUIRED record (never written by Fjord) is taken as AVAILABLE."""
        if start_offset > self.start_offset:
            self.move_start(start_offset)
        for batch in batches:
            state = batch.delivery_state if batch.delivery_state in _TERMINAL else _AVAILABLE
            for offset in range(max(batch.first_offset, self.start_offset), batch.last_offset + 1):
                i = offset - self.start_offset
                if i >= len(self._states):
                    self._extend(i + 1 - len(self._states), _AVAILABLE)
                if self._states[i] == _ACQUIRED:
                    self._acquired -= 1
                self._states[i] = state
                self._counts[i] = min(max(batch.delivery_count, 0), _MAX_COUNT)
                self._owners[i] = None
        self._advance_start()
        self._dirty.clear()
        self._start_moved = False

    # ------------------------------------------------------------------ internals
    def _release(self, i: int) -> int:
        """An ACQUIRED record goes back: ARCHIVED once delivered ``delivery_count_limit`` times, else AVAILABLE."""
        self._acquired -= 1
        self._owners[i] = None
        state = _ARCHIVED if self._counts[i] >= self.limits.delivery_count_limit else _AVAILABLE
        self._set(i, state)
        return state

    def _set(self, i: int, state: int) -> None:
        self._states[i] = state
        self._dirty.append((self.start_offset + i, self.start_offset + i))

    def _fill(self, i: int, n: int, state: int) -> None:
        """Window records ``[i, i + n)`` take ``state`` (and are persisted with the next update)."""
        self._states[i:i + n] = bytes((state,)) * n
        self._dirty.append((self.start_offset + i, self.start_offset + i + n - 1))

    def _extend(self, n: int, state: int) -> None:
        self._states.extend(bytes((state,)) * n)
        self._counts.extend(array("H", [0]) * n)
        self._deadlines.extend(array("q", [0]) * n)
        self._owners.extend([None] * n)
        if state != _AVAILABLE:
            self._dirty.append((self.end_offset - n, self.end_offset - 1))

    def _drop(self, n: int) -> None:
        del self._states[:n]
        del self._counts[:n]
        del self._deadlines[:n]
        del self._owners[:n]

    def _advance_start(self) -> None:
        """The SPSO follows the acknowledged and archived prefix of the window."""
        match = _TERMINAL_RUN.match(self._states)
        n = match.end() if match is not None else 0
        if n:
            self._drop(n)
            self.start_offset += n
            self._start_moved = True

    def _batches(self, offsets: Sequence[int]) -> Iterable[StateBatch]:
        """Coalesces sorted window offsets into runs of one persisted state and count.

        An ACQUIRED record is persisted as it was before its delivery (AVAILABLE, the count less this delivery), as
        Kafka's share coordinator holds it, since Kafka writes nothing on acquisition: a broker that dies during a
        delivery gives the record out again at the count of that delivery, never past the delivery limit."""
        run: list[int] | None = None
        for offset in offsets:
            i = offset - self.start_offset
            state = self._states[i]
            count = self._counts[i]
            if state == _ACQUIRED:
                state, count = _AVAILABLE, count - 1
            if run is not None and run[1] == offset - 1 and run[2] == state and run[3] == count:
                run[1] = offset
                continue
            if run is not None:
                yield StateBatch(run[0], run[1], run[2], run[3])
            run = [offset, offset, state, count]
        if run is not None:
            yield StateBatch(run[0], run[1], run[2], run[3])


def _add_range(taken: list[AcquiredRange], first: int, last: int, count: int, split: int = 0) -> None:
    """Appends ``[first, last]`` at ``count``, merged into the last range when it continues it at the same count
    (unless ``split`` is set and that range already reaches ``split`` records by ``first``)."""
    if (taken and taken[-1].last_offset == first - 1 and taken[-1].delivery_count == count
            and not (split and first - taken[-1].first_offset >= split)):
        taken[-1] = AcquiredRange(taken[-1].first_offset, last, count)
    else:
        taken.append(AcquiredRange(first, last, count))


def _run_end(states: bytearray, i: int, stop: int) -> int:
    """The end of the run of AVAILABLE records starting at ``i`` (at most ``stop``)."""
    match = _AVAILABLE_RUN.match(states, i, stop)
    return match.end() if match is not None else i
