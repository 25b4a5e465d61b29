"""An OffsetFetch sees the OffsetCommits its connection sent before it.

Kafka applies a connection's requests in order, so a client that pipelines a commit and then a fetch of the
committed offsets on one connection reads what it just committed. The listener here runs a connection's requests
concurrently (``wire.connection``), and a commit only reaches the group's offsets once it is durable in
``__consumer_offsets``: a fetch that ran meanwhile answered with the previous offset. OffsetCommit registers
itself when it is dispatched (synchronously, so in arrival order) and OffsetFetch waits for the commits of its
connection and group that were registered before it. Commits from other connections are not waited for, as in
Kafka, where a fetch only sees what was durable when it ran. Each connection has its own :class:`PendingCommits`
(``broker.handlers.context.ConnectionState``), so that is by construction.
"""

from __future__ import annotations

import asyncio

#: The group id: the connection's commits to one group.
CommitKey = str


class PendingCommits:
    """The OffsetCommits of one connection that are still being applied, by group."""

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
