"""An OffsetFetch sees the OffsetCommits its connection sent before it.

Kafka applies a connection's requests in order, so a client that pipelines a commit and then a fetch of the
committed offsets on one connection reads what it just committed. The server here runs a connection's requests
concurrently (server.py), and a commit only reaches the group's offsets once it is durable in
``__consumer_offsets``: a fetch that ran meanwhile answered with the previous offset. OffsetCommit registers
itself when it is dispatched (synchronously, so in arrival order) and OffsetFetch waits for the commits of its
connection and group that were registered before it. Commits from other connections are not waited for, as in
Kafka, where a fetch only sees what was durable when it ran.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

#: (client host, client port, listener, group id): one connection's commits to one group.
CommitKey = tuple[str, int, str, str]


class PendingCommits:
    """The OffsetCommits of one broker node that are still being applied, by connection and group."""

    def __init__(self) -> None:
        self._pending: dict[CommitKey, set[asyncio.Future[None]]] = {}

    def begin(self, key: CommitKey) -> asyncio.Future[None]:
        """Registers a commit; call before the handler's first suspension and pass the result to ``end``."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.setdefault(key, set()).add(done)
        return done

    def end(self, key: CommitKey, done: asyncio.Future[None]) -> None:
        if not done.done():
            done.set_result(None)
        waiting = self._pending.get(key)
        if waiting is not None:
            waiting.discard(done)
            if not waiting:
                del self._pending[key]

    def earlier(self, key: CommitKey) -> list[asyncio.Future[None]]:
        """The commits registered for ``key`` so far, done once each is applied (or failed); call before the
        fetch handler's first suspension."""
        return list(self._pending.get(key, ()))

    def __len__(self) -> int:
        return len(self._pending)


_pending: weakref.WeakKeyDictionary[Any, PendingCommits] = weakref.WeakKeyDictionary()


def pending_commits(node: Any) -> PendingCommits:
    """The pending commits of a broker node (one per node, created on first use)."""
    commits = _pending.get(node)
    if commits is None:
        commits = PendingCommits()
        _pending[node] = commits
    return commits
