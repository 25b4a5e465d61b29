"""Incremental fetch sessions (KIP-227), sans-I/O.

A consumer fetching many partitions sends the full partition list once; the broker remembers it under a session
id, and later requests carry only what changed (new fetch offsets, forgotten topics) while responses carry only
partitions with news (records, a moved high watermark / log start, an error). ``FetchSessionCache.resolve``
turns a request's session fields into the partition set to serve; ``FetchContext.filter`` picks what goes into
the response and remembers what was sent.

As in Kafka's ``FetchSession``: a partition that returned records goes to the end of its session's order, so with a
response byte budget filled by the first partitions the others are read first next time (none is starved); a full
cache makes room only by evicting a session idle past the timeout or one smaller than the new one, and otherwise
answers the new request without a session (session id 0: the client goes on with full fetches), so a flood of
small sessions cannot push out the consumers' sessions. From Fetch v13 a partition is known in its session by its
topic id alone (the name is looked up at each read), so a topic the broker learns of later, a topic deleted and
created again, and forgetting a topic that no longer exists all behave as in Kafka.
"""

from __future__ import annotations

import itertools
import random
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from wire.errors import KafkaError

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1

#: Partition identity in a session: (topic id, "", partition) from Fetch v13; (zero UUID, topic name, partition)
#: before.
PartitionKey = tuple[object, str, int]


@dataclass(slots=True)
class SessionPartition:
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    # What the last response told the client, to decide whether an incremental response must include it.
    high_watermark: int = -1
    log_start_offset: int = -1
    last_stable_offset: int = -1


@dataclass(frozen=True, slots=True)
class PartitionRequest:
    key: PartitionKey
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class PartitionOutcome:
    """What a fetch produced for one partition, as the session bookkeeping needs it."""

    key: PartitionKey
    error: ErrorCode
    high_watermark: int
    log_start_offset: int
    last_stable_offset: int
    has_records: bool


@dataclass(slots=True)
class FetchSession:
    session_id: int
    epoch: int  # the epoch the next request must carry
    partitions: OrderedDict[PartitionKey, SessionPartition] = field(default_factory=OrderedDict)
    last_used: float = field(default_factory=time.monotonic)


@dataclass(slots=True)
class FetchContext:
    """The partitions to serve for one request, and how to shape the response."""

    session_id: int
    incremental: bool
    partitions: list[tuple[PartitionKey, SessionPartition]]
    session: FetchSession | None = None

    def filter(self, outcomes: Iterable[PartitionOutcome]) -> list[PartitionKey]:
        """Keys to include in the response (all for full fetches, changed ones for incremental), updating the
        session's memory of what the client was told."""
        keep: list[PartitionKey] = []
        for outcome in outcomes:
            state = self.session.partitions.get(outcome.key) if self.session is not None else None
            changed = (
                state is None
                or outcome.error != ErrorCode.none
                or outcome.has_records
                or outcome.high_watermark != state.high_watermark
                or outcome.log_start_offset != state.log_start_offset
                or outcome.last_stable_offset != state.last_stable_offset
            )
            if state is not None:
                state.high_watermark = outcome.high_watermark
                state.log_start_offset = outcome.log_start_offset
                state.last_stable_offset = outcome.last_stable_offset
            if changed or not self.incremental:
                keep.append(outcome.key)
            if self.incremental and outcome.has_records and self.session is not None:
                self.session.partitions.move_to_end(outcome.key)  # the others go first next time
        return keep


class FetchSessionCache:
    """Sessions of this broker, bounded in number (the module docstring says which one a new session may evict)
    and idle time."""

    def __init__(self, max_sessions: int = 1000, idle_timeout_s: float = 120.0) -> None:
        self.max_sessions = max_sessions
        self.idle_timeout_s = idle_timeout_s
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()
        self._ids = itertools.count(random.randint(1, 1 << 30))

    def __len__(self) -> int:
        return len(self._sessions)

    def _new_id(self) -> int:
        while True:
            sid = next(self._ids) & 0x7FFFFFFF
            if sid != INVALID_SESSION_ID and sid not in self._sessions:
                return sid

    def _make_room(self, now: float, size: int) -> bool:
        """Whether a new session of ``size`` partitions fits, after evicting the idle sessions and, if the cache is
        still full, the smallest session when it is smaller than the new one."""
        for sid in [s for s, sess in self._sessions.items() if now - sess.last_used > self.idle_timeout_s]:
            del self._sessions[sid]
        if len(self._sessions) < self.max_sessions:
            return True
        if not self._sessions:
            return False  # max.incremental.fetch.session.cache.slots=0: every fetch goes without a session
        smallest = min(self._sessions.values(), key=lambda s: (len(s.partitions), s.last_used))
        if len(smallest.partitions) >= size:
            return False
        del self._sessions[smallest.session_id]
        return True

    def resolve(
        self,
        session_id: int,
        epoch: int,
        requested: Iterable[PartitionRequest],
        forgotten: Iterable[PartitionKey],
    ) -> FetchContext:
        """Applies a request's session fields; raises KafkaError FETCH_SESSION_ID_NOT_FOUND or
        INVALID_FETCH_SESSION_EPOCH (a top-level error) when the session cannot be used."""
        now = time.monotonic()
        if epoch == FINAL_EPOCH:
            # Sessionless full fetch (closing the named session, if any).
            if session_id != INVALID_SESSION_ID:
                self._sessions.pop(session_id, None)
            return FetchContext(INVALID_SESSION_ID, False, [(r.key, _state(r)) for r in requested])
        if epoch == INITIAL_EPOCH:
            if session_id != INVALID_SESSION_ID:
                self._sessions.pop(session_id, None)
            requested = list(requested)
            if not self._make_room(now, len(requested)):
                return FetchContext(INVALID_SESSION_ID, False, [(r.key, _state(r)) for r in requested])
            session = FetchSession(self._new_id(), 1)
            for r in requested:
                session.partitions[r.key] = _state(r)
            self._sessions[session.session_id] = session
            return FetchContext(session.session_id, False, list(session.partitions.items()), session)
        if session_id == INVALID_SESSION_ID:
            # Kafka's answer to an incremental fetch naming no session.
            raise KafkaError(ErrorCode.fetch_session_id_not_found, f"fetch epoch {epoch} without a session id")
        found = self._sessions.get(session_id)
        if found is None:
            raise KafkaError(ErrorCode.fetch_session_id_not_found, f"fetch session {session_id} not found")
        if epoch != found.epoch:
            raise KafkaError(
                ErrorCode.invalid_fetch_session_epoch,
                f"fetch session {session_id} expected epoch {found.epoch}, got {epoch}",
            )
        for key in forgotten:
            found.partitions.pop(key, None)
        for r in requested:
            state = found.partitions.get(r.key)
            if state is None:
                found.partitions[r.key] = _state(r)
            else:
                state.fetch_offset = r.fetch_offset
                state.max_bytes = r.max_bytes
                state.current_leader_epoch = r.current_leader_epoch
        found.epoch = epoch + 1 if epoch < 0x7FFFFFFF else 1
        found.last_used = now
        self._sessions.move_to_end(session_id)
        return FetchContext(session_id, True, list(found.partitions.items()), found)


def _state(r: PartitionRequest) -> SessionPartition:
    return SessionPartition(r.fetch_offset, r.max_bytes, r.current_leader_epoch)
