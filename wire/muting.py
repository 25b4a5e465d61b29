"""Quota muting of one connection (KIP-219): a client over its quota is not read from for the throttle time, and
from then on its requests are served one at a time.

A dispatcher mutes a connection (:attr:`wire.dispatch.Peer.mute`) when it answers a request of a client over its
quota: for that long no more of its requests are read or dispatched, while the responses already due are written.
From its first mute on, a connection's requests are dispatched one at a time, each once the one before it is
answered, as Kafka serves every connection: each request of a client over its quota is then measured and throttled
on its own, instead of a pipelined burst going through on one measurement.

:class:`Muting` is that state machine, apart from the connection (``wire.connection``) that reads the socket and
dispatches: it keeps the mute's timer and the requests waiting for their turn, and tells the connection when it may
read again and which request is next.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable


class Muting:
    """One connection's mute and, once it has been muted, its requests waiting to be dispatched one at a time."""

    def __init__(self, unmuted: Callable[[], None]) -> None:
        """``unmuted``: called when a mute ends, so the connection reads again and dispatches the next request."""
        self._unmuted = unmuted
        self._until = 0.0  # loop time until which the connection is muted
        self._timer: asyncio.TimerHandle | None = None  # ends the current mute; None: not muted
        self._held: collections.deque[bytes] = collections.deque()  # frames waiting for their turn (serial)
        self._serial = False  # muted once: one request at a time from now on

    @property
    def muted(self) -> bool:
        return self._timer is not None

    @property
    def held(self) -> int:
        """How many requests wait for their turn (which counts against the connection's in-flight limit)."""
        return len(self._held)

    @property
    def waiting_on_broker(self) -> bool:
        """A request held or a mute running: the client is waiting on the broker, so the connection is not idle."""
        return bool(self._held) or self._timer is not None

    def mute(self, seconds: float) -> bool:
        """Mutes for ``seconds`` from now, unless a mute already runs at least that long; True when the mute began
        or was lengthened (the connection stops reading). The connection is served one request at a time from now
        on."""
        if seconds <= 0:
            return False
        loop = asyncio.get_running_loop()
        until = loop.time() + seconds
        if until <= self._until:
            return False
        self._until = until
        self._serial = True
        if self._timer is not None:
            self._timer.cancel()
        self._timer = loop.call_at(until, self._ended)
        return True

    def _ended(self) -> None:
        self._timer = None
        self._unmuted()

    def hold(self, frame: bytes) -> bool:
        """Once muted, keeps ``frame`` until its turn (True); before that, False: the connection dispatches it now."""
        if not self._serial:
            return False
        self._held.append(frame)
        return True

    def next_request(self, *, answered: bool) -> bytes | None:
        """The next waiting request, when the one before it has been ``answered`` and no mute holds; else None."""
        if self._held and self._timer is None and answered:
            return self._held.popleft()
        return None

    def cancel(self) -> None:
        """The connection was lost: the mute's timer goes (the held requests stay; no answer can reach them)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
