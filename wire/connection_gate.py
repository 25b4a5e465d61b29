"""The connection gate: Kafka's connection quotas applied to the sockets one node's listeners accept.

A listener given a :class:`ConnectionGate` (a broker's listeners share one) applies Kafka's connection quotas
(``wire.connection_limits``, the counts and decisions, sans-I/O) in its accept loop: before a socket is served the
gate may hold the loop (the creation rate over its quota, or ``max.connections`` reached: the next connections wait
in the kernel's backlog, as behind Kafka's blocked acceptor) or close the socket at once (its address at
``max.connections.per.ip``). While the node is over ``max.connections`` (the inter-broker listener took connections
beyond it, or the limit was lowered) the gate closes the least recently active connections of the other listeners
(KIP-402).

The gate sees a listener only as a :class:`GatedListener` and a connection only as an :class:`Evictable`, so it
depends on neither ``wire.listener`` (which admits through the gate) nor ``wire.connection``.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Iterable
from typing import Protocol

from wire.connection_limits import ConnectionLimits, ConnectionLimitSettings, ip_key
from wire.dispatch import Peer
from wire.metrics import ServerMetrics

#: The listener's logger: operators configure (and tests filter) one logger for all a listener does with its
#: connections, the quotas included, however its code is divided.
logger = logging.getLogger("wire.listener")

#: A refused or delayed connection is logged at most once a minute per address (and a held acceptor once a minute
#: per listener): a flood of connections must not flood the log.
_LOG_EVERY_S = 60.0
_LOG_MEMORY = 4096  # addresses remembered for that; beyond it the oldest are forgotten


class Evictable(Protocol):
    """An open connection, as the gate chooses whom to close to make room (KIP-402)."""

    @property
    def peer(self) -> Peer: ...

    @property
    def holds_slot(self) -> bool:
        """Counted in the gate (not yet released)."""

    def recency(self) -> tuple[bool, float]:
        """Sorts the least recently active connections first."""

    def evict(self) -> None:
        """Gives its slot back at once and closes."""


class GatedListener(Protocol):
    """A listener that admits its connections through the gate."""

    @property
    def listener_name(self) -> str: ...

    @property
    def connections(self) -> Iterable[Evictable]:
        """Its open connections."""


class ConnectionGate:
    """The asyncio shell of :class:`~wire.connection_limits.ConnectionLimits`, shared by one node's listeners.

    :meth:`admit` is awaited by a listener's accept loop for every socket: it returns once the socket may be
    served (the key it is counted under) or must be closed at once (None), holding the loop meanwhile. Every
    admitted connection is released once (:meth:`release`) when it closes, which wakes the held acceptors.
    :meth:`reconfigure` applies new settings (dynamic broker configs) to the connections to come; open ones stay,
    except that an over-full broker closes the least recently active connections of its unprotected listeners
    (KIP-402)."""

    def __init__(self, settings: ConnectionLimitSettings, metrics: ServerMetrics) -> None:
        self.limits = ConnectionLimits(settings)
        self._metrics = metrics
        self._changed = asyncio.Event()
        self._listeners: dict[str, GatedListener] = {}
        #: (what, address or listener) -> when it was last logged, oldest first (the first forgotten).
        self._logged: collections.OrderedDict[tuple[str, str], float] = collections.OrderedDict()

    def add_listener(self, listener: GatedListener) -> None:
        self._listeners[listener.listener_name] = listener
        self.limits.add_listener(listener.listener_name)

    def reconfigure(self, settings: ConnectionLimitSettings) -> None:
        if settings == self.limits.settings:
            return
        self.limits.reconfigure(settings)
        logger.info("connection quotas now %s", settings)
        self._wake()
        self._evict("max.connections was lowered")

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def _refused(self, listener: str, reason: str) -> None:
        self._metrics.connections_refused.labels(listener=listener, reason=reason).inc()

    def _should_log(self, what: str, subject: str, now: float) -> bool:
        key = (what, subject)
        last = self._logged.get(key)
        if last is not None and now - last < _LOG_EVERY_S:
            return False
        self._logged[key] = now
        self._logged.move_to_end(key)
        if len(self._logged) > _LOG_MEMORY:
            self._logged.popitem(last=False)
        return True

    async def admit(self, listener: str, address: str) -> str | None:
        """Kafka's three steps for one accepted socket from ``address`` on ``listener`` (the module docstring of
        ``wire.connection_limits``): waits out the creation-rate throttle and for a free slot, then counts it and
        answers the key it is counted under (:func:`~wire.connection_limits.ip_key`, for :meth:`release`), or None
        (too many connections from that address; the caller closes the socket)."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        delay = self.limits.record_creation(listener, now)
        if delay > 0:
            self._refused(listener, "creation_rate")
            if self._should_log("rate", address, time.monotonic()):
                logger.info("delaying the connection from %s on listener %s by %.0f ms: the connection creation "
                            "rate is over max.connection.creation.rate", address, listener, delay * 1000)
        deadline = now + delay
        held = False
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                if self.limits.slot_available(listener):
                    break
                if not held:
                    held = True
                    self._refused(listener, "max_connections")
                    if self._should_log("slots", listener, time.monotonic()):
                        logger.info("listener %s stops accepting until a connection closes: it has %d connections "
                                    "and the broker %d (max.connections)", listener, self.limits.count(listener),
                                    self.limits.count())
            changed = self._changed
            try:
                await asyncio.wait_for(changed.wait(), remaining if remaining > 0 else None)
            except TimeoutError:
                pass
        key = ip_key(address)
        refusal = self.limits.admit(listener, key)
        if refusal is not None:
            self._refused(listener, "per_ip")
            if self._should_log("ip", refusal.address, time.monotonic()):
                logger.info("refused a connection from %s on listener %s: the address already has the configured "
                            "maximum of %d connections (max.connections.per.ip)", refusal.address, listener,
                            refusal.limit)
            return None
        if self.limits.protected(listener):
            try:
                self._evict(f"the inter-broker listener {listener} took it over")
            except Exception:  # the connection is counted now: a failure to make room must not lose its slot
                logger.exception("connection quotas: could not close connections of other listeners to make room "
                                 "for the connection from %s on the inter-broker listener %s", address, listener)
        return key

    def release(self, listener: str, key: str) -> None:
        """A connection admitted under ``key`` (what :meth:`admit` answered) closed."""
        self.limits.release(listener, key)
        self._wake()

    def _evict(self, cause: str) -> None:
        """Closes the least recently active connections of unprotected listeners while the broker is over
        ``max.connections``: the protected inter-broker listener's connections took it there, or the limit was
        lowered (``cause`` says which; Kafka's processors close one such connection per poll until the total is
        back under it)."""
        excess = self.limits.excess()
        if not excess:
            return
        candidates = sorted(
            (c for name, lst in self._listeners.items() if not self.limits.protected(name) for c in lst.connections
             if c.holds_slot),
            key=lambda c: c.recency(),
        )
        for connection in candidates[:excess]:
            self._refused(connection.peer.listener, "evicted")
            logger.info("closing the least recently active connection, from %s: the broker is over max.connections "
                        "(%d) since %s", connection.peer, self.limits.settings.max_connections, cause)
            connection.evict()
