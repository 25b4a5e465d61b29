"""Share sessions (KIP-932), sans-I/O: which partitions a share consumer fetches, across its ShareFetch requests.

A share session belongs to one member of one share group on this broker, keyed ``(group id, member id)`` (no
session id, unlike KIP-227's fetch sessions). Its epoch drives it, as Kafka's ``SharePartitionManager.newContext``
and ``acknowledgeSessionUpdate`` do:

- ShareFetch epoch 0 opens it with the request's full partition list (an older session of the member is dropped,
  its records stay with the member until acknowledged or timed out); acknowledgements in it are INVALID_REQUEST,
  as there is nothing acquired yet in a new session; a full cache is SHARE_SESSION_LIMIT_REACHED
  (``group.share.max.share.sessions``).
- ShareFetch epoch n > 0 must be the session's epoch (INVALID_SHARE_SESSION_EPOCH otherwise, SHARE_SESSION_NOT_FOUND
  without a session): the request's partitions are added, its forgotten topics removed, the epoch moves on.
- epoch -1 closes it: ShareFetch then fetches nothing and only acknowledges; ShareAcknowledge too. The session must
  exist (SHARE_SESSION_NOT_FOUND). Closing, like the session's connection going away, releases the member's
  acquired records; the cache only says which session went, its owner (``broker.share_sessions``) releases them.
- ShareAcknowledge never opens one: epoch 0 is INVALID_SHARE_SESSION_EPOCH, n > 0 moves the epoch as a fetch does.

An incremental response carries only the partitions with news: records, an error, or a partition just added
(Kafka's ``CachedSharePartition.maybeUpdateResponseData``); a partition that answered an error is sent again once
the error is gone. A session lives as long as its client's connection, as in Kafka 4.1+: there is no idle
eviction; ``connection_closed`` drops the sessions opened on a connection that closed.
"""

from __future__ import annotations

import uuid
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from enum import Enum

from kio.schema.errors import ErrorCode

from wire.errors import KafkaError

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
_MAX_EPOCH = 0x7FFFFFFF

#: A share partition as a session knows it: (topic id, topic name or None when the id is unknown, partition).
#: Two keys are the same partition when id and partition match (the name only travels with it).
PartitionKey = tuple[uuid.UUID, str | None, int]
#: A session's identity: (group id, member id).
SessionKey = tuple[str, str]


def next_epoch(epoch: int) -> int:
    """Kafka's ``ShareRequestMetadata.nextEpoch``: -1 stays -1, the largest epoch wraps to 1."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == _MAX_EPOCH else epoch + 1


def _identity(key: PartitionKey) -> tuple[uuid.UUID, int]:
    return key[0], key[2]


@dataclass(slots=True)
class CachedPartition:
    key: PartitionKey
    #: Must appear in the next response even without records or an error (added incrementally, or its last
    #: answer was an error the client must see cleared).
    requires_update: bool = False


@dataclass(slots=True, eq=False)
class ShareSession:
    key: SessionKey
    #: The epoch the next request must carry.
    epoch: int
    #: The connection that opened it (opaque to the cache); when it closes, the session goes.
    connection: Hashable
    partitions: dict[tuple[uuid.UUID, int], CachedPartition] = field(default_factory=dict)

    def partition_keys(self) -> list[PartitionKey]:
        return [cached.key for cached in self.partitions.values()]


class ContextKind(Enum):
    INITIAL = "initial"  # epoch 0: a new session, full response
    SUBSEQUENT = "subsequent"  # epoch n: incremental response
    FINAL = "final"  # epoch -1: nothing fetched, the session closes after the acknowledgements


@dataclass(frozen=True, slots=True)
class ShareFetchContext:
    """What one ShareFetch request serves: the partitions to fetch, and how its response is shaped."""

    kind: ContextKind
    #: The epoch the request carried.
    epoch: int
    #: The partitions to fetch, in the session's order (none for a FINAL context).
    partitions: tuple[PartitionKey, ...]
    session: ShareSession | None = None

    def include(self, key: PartitionKey, *, has_records: bool, error: int) -> bool:
        """Whether the partition's answer goes into the response, remembering for the next incremental response
        that an error was sent (so its clearing is sent too)."""
        if self.kind is not ContextKind.SUBSEQUENT or self.session is None:
            return True
        cached = self.session.partitions.get(_identity(key))
        if cached is None:
            return has_records or error != 0
        must = has_records or cached.requires_update or error != 0
        cached.requires_update = error != 0
        return must


class ShareSessionCache:
    """This broker's share sessions, at most ``max_sessions`` of them (``group.share.max.share.sessions``)."""

    def __init__(self, max_sessions: int) -> None:
        self.max_sessions = max_sessions
        self._sessions: dict[SessionKey, ShareSession] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, group_id: str, member_id: str) -> ShareSession | None:
        return self._sessions.get((group_id, member_id))

    def partitions_count(self) -> int:
        """Partitions over all sessions (Kafka's SharePartitionsCount gauge)."""
        return sum(len(s.partitions) for s in self._sessions.values())

    def new_context(
        self,
        group_id: str,
        member_id: str,
        epoch: int,
        requested: Iterable[PartitionKey],
        forgotten: Iterable[PartitionKey],
        *,
        acknowledging: bool,
        connection: Hashable,
    ) -> ShareFetchContext:
        """Applies a ShareFetch's session fields. Raises ``KafkaError`` (a top-level error of the response):
        SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH, INVALID_REQUEST (acknowledgements when opening) or
        SHARE_SESSION_LIMIT_REACHED. Nothing changes when it raises."""
        key = (group_id, member_id)
        if epoch == FINAL_EPOCH:
            if key not in self._sessions:
                raise KafkaError(ErrorCode.share_session_not_found, f"no share session for {key}")
            return ShareFetchContext(ContextKind.FINAL, epoch, ())
        if epoch == INITIAL_EPOCH:
            if acknowledging:
                raise KafkaError(ErrorCode.invalid_request, "acknowledgements in the request opening a share session")
            if key not in self._sessions and len(self._sessions) >= self.max_sessions:
                raise KafkaError(
                    ErrorCode.share_session_limit_reached, f"{len(self._sessions)} share sessions: the broker's limit"
                )
            self._sessions.pop(key, None)
            session = ShareSession(key, next_epoch(INITIAL_EPOCH), connection)
            for part in requested:
                session.partitions.setdefault(_identity(part), CachedPartition(part))
            self._sessions[key] = session
            return ShareFetchContext(ContextKind.INITIAL, epoch, tuple(session.partition_keys()), session)
        session = self._current(key, epoch)
        for part in requested:
            if _identity(part) not in session.partitions:
                session.partitions[_identity(part)] = CachedPartition(part, requires_update=True)
        for part in forgotten:
            session.partitions.pop(_identity(part), None)
        session.epoch = next_epoch(epoch)
        return ShareFetchContext(ContextKind.SUBSEQUENT, epoch, tuple(session.partition_keys()), session)

    def acknowledge_update(self, group_id: str, member_id: str, epoch: int) -> None:
        """Applies a ShareAcknowledge's session epoch: 0 is INVALID_SHARE_SESSION_EPOCH (it cannot open one), an
        unknown session SHARE_SESSION_NOT_FOUND, -1 leaves the session for the caller to close, n moves it on."""
        key = (group_id, member_id)
        if epoch == INITIAL_EPOCH:
            raise KafkaError(ErrorCode.invalid_share_session_epoch, "ShareAcknowledge cannot open a share session")
        if epoch == FINAL_EPOCH:
            if key not in self._sessions:
                raise KafkaError(ErrorCode.share_session_not_found, f"no share session for {key}")
            return
        session = self._current(key, epoch)
        session.epoch = next_epoch(epoch)

    def still_current(self, context: ShareFetchContext) -> bool:
        """Whether the session a subsequent request used is still at the epoch it moved to: a duplicate request
        that raced it makes Kafka answer INVALID_SHARE_SESSION_EPOCH rather than a response the client would
        misread."""
        session = context.session
        if context.kind is not ContextKind.SUBSEQUENT or session is None:
            return True
        return self._sessions.get(session.key) is session and session.epoch == next_epoch(context.epoch)

    def remove(self, group_id: str, member_id: str) -> ShareSession | None:
        return self._sessions.pop((group_id, member_id), None)

    def connection_closed(self, connection: Hashable) -> list[ShareSession]:
        """Drops the sessions the connection opened (a later re-open on another connection keeps its session);
        the caller releases their members' records."""
        gone = [s for s in self._sessions.values() if s.connection == connection]
        for session in gone:
            del self._sessions[session.key]
        return gone

    def _current(self, key: SessionKey, epoch: int) -> ShareSession:
        session = self._sessions.get(key)
        if session is None:
            raise KafkaError(ErrorCode.share_session_not_found, f"no share session for {key}")
        if session.epoch != epoch:
            raise KafkaError(
                ErrorCode.invalid_share_session_epoch,
                f"share session {key} expected epoch {session.epoch}, got {epoch}",
            )
        return session
