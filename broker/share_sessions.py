"""The broker's share sessions (``Broker.share_sessions``): the sans-I/O cache of ``broker.share_session_cache`` with
what a session's end does to the share partitions.

When a session ends its member's acquired records are released on every partition of the session
(``SharePartition.release_member``), so other consumers get them at once instead of after the lock time-out. A
session ends when its client closes it (epoch -1), or when the connection that opened it closes: Kafka 4.1+ ties
a share session to its connection (a consumer killed with ``kill -9`` has its sockets closed by its kernel), and
keeps no idle timer (``broker.connection_lifetimes`` tells when a connection is gone).

The handlers read the share partitions (``partitions``), the group's record lock duration (the responses'
``AcquisitionLockTimeoutMs``) and whether share groups are enabled (the ``share.version`` feature) from here, so
the broker wires those once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from broker.connection_lifetimes import ConnectionLifetimes
from broker.share.registry import SharePartitions
from broker.share_session_cache import ShareSession, ShareSessionCache
from wire.errors import KafkaError
from wire.log_text import LOG_TEXT_MAX, untrusted

logger = logging.getLogger(__name__)


def _wall_ms() -> int:
    return int(time.time() * 1000)


class ShareSessions:
    """Share sessions of this broker, and the release of a member's records when its session ends."""

    def __init__(
        self,
        partitions: SharePartitions,
        *,
        max_sessions: int,
        record_lock_duration_ms: Callable[[str], int],
        enabled: Callable[[], bool] = lambda: True,
        clock_ms: Callable[[], int] = _wall_ms,
    ) -> None:
        self.partitions = partitions
        self.cache = ShareSessionCache(max_sessions)
        self._lock_duration = record_lock_duration_ms
        self._enabled = enabled
        self.clock_ms = clock_ms
        self._connections = ConnectionLifetimes(self._release_connection)
        self._releases: set[asyncio.Task[None]] = set()

    def enabled(self) -> bool:
        """Whether share groups are served (the ``share.version`` feature at 1 or more)."""
        return self._enabled()

    def record_lock_duration_ms(self, group_id: str) -> int:
        """The group's ``share.record.lock.duration.ms``: how long the records a response hands out stay locked."""
        return self._lock_duration(group_id)

    def connection_key(self, connection: object) -> int:
        """The key the cache knows ``connection`` by; the first call for a connection arranges for its sessions to
        end when it goes. Called on the event loop, with the connection's state object (never kept strongly)."""
        return self._connections.key(connection)

    def _release_connection(self, key: int) -> None:
        gone = self.cache.connection_closed(key)
        if gone:
            logger.debug(
                "connection closed: releasing share sessions %s",
                untrusted(str([s.key for s in gone]), 4 * LOG_TEXT_MAX),
            )
            task = asyncio.get_running_loop().create_task(self._release_all(gone))
            self._releases.add(task)
            task.add_done_callback(self._releases.discard)

    async def _release_all(self, sessions: list[ShareSession]) -> None:
        for session in sessions:
            await self.release(session)

    async def close(self, group_id: str, member_id: str) -> None:
        """Ends the member's session (epoch -1) and releases its records; nothing when it has none."""
        session = self.cache.remove(group_id, member_id)
        if session is not None:
            await self.release(session)

    async def release(self, session: ShareSession) -> None:
        """Releases the session member's acquired records on each of its partitions this broker leads; a partition
        that cannot be reached (moved, deleted) keeps them until their locks time out there."""
        group_id, member_id = session.key
        for topic_id, name, partition in session.partition_keys():
            if name is None:
                continue
            try:
                share_partition = await self.partitions.get(group_id, topic_id, partition)
                await share_partition.release_member(member_id, self.clock_ms())
            except KafkaError as exc:
                logger.debug(
                    "share session %s: no release on %s-%d (%s)", untrusted(str(session.key)), name, partition, exc
                )

    async def drain(self) -> None:
        """Waits for the releases of closed connections still running (tests, and an orderly broker stop)."""
        while self._releases:
            await asyncio.gather(*list(self._releases), return_exceptions=True)
