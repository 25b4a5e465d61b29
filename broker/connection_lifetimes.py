"""Connections a part of the broker keeps state for, and a call on the event loop once each is gone.

Kafka ties some state to the connection that made it: a share session (Kafka 4.1+) and a client's telemetry instance
(``ClientMetricsManager``'s disconnect listener) end when their connection closes, with no idle timer to wait for.
Fjord sees a connection go when the broker lets go of its ``ConnectionState`` (the listener drops it as the
connection closes; requests still running hold it until they finish): a weak-reference finalizer on it hands the
key the connection was known by to the event loop, never running the owner's clean-up inside whatever code the
collection interrupted.
"""

from __future__ import annotations

import asyncio
import itertools
import weakref
from collections.abc import Callable


class ConnectionLifetimes:
    """Keys for connections, and ``on_gone(key)`` on the event loop once a keyed connection is gone."""

    def __init__(self, on_gone: Callable[[int], None]) -> None:
        self._on_gone = on_gone
        self._keys: weakref.WeakKeyDictionary[object, int] = weakref.WeakKeyDictionary()
        self._ids = itertools.count(1)

    def key(self, connection: object) -> int:
        """The key ``connection`` is known by; the first call for it arranges the call when it goes. Called on the
        event loop, with the connection's state object (never kept strongly)."""
        key = self._keys.get(connection)
        if key is None:
            key = next(self._ids)
            self._keys[connection] = key
            finalizer = weakref.finalize(connection, self._gone, asyncio.get_running_loop(), key)
            finalizer.atexit = False
        return key

    def _gone(self, loop: asyncio.AbstractEventLoop, key: int) -> None:
        # Runs wherever the collector ran: only hands the work to the loop.
        if not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self._on_gone, key)
            except RuntimeError:  # the loop closed meanwhile: the broker is stopping, nothing to clean up
                pass
