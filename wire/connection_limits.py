"""Kafka's connection quotas (``ConnectionQuotas``, KIP-402, KIP-612), sans-I/O: counts and decisions, no sockets.

Each socket a listener accepts goes through Kafka's three steps, in Kafka's order:

1. **Creation rate** (``max.connection.creation.rate``, ``listener.name.<l>.max.connection.creation.rate``): the new
   connection is recorded in the broker-wide rate and in its listener's; when either is over its quota the acceptor
   waits the longer throttle time (bounded by one quota window) before it goes on. Waiting rather than refusing is
   Kafka's choice: a burst of reconnecting clients is spread out, none is turned away.
2. **Slots** (``listener.name.<l>.max.connections``, ``max.connections``): while the listener, or the broker as a
   whole, has as many connections as allowed, the acceptor stops accepting until one closes. The connections beyond
   it wait in the kernel's backlog, so a flood of them costs the broker nothing.
3. **Per IP** (``max.connections.per.ip``, ``max.connections.per.ip.overrides``): a connection from an address that
   already has its maximum is closed at once (Kafka's ``TooManyConnectionsException``); other addresses are served.

The inter-broker listener is *protected* (KIP-402) when the node has more than one listener: it is neither held by
the broker-wide limit nor counted in the broker-wide rate, so clients exhausting ``max.connections`` cannot cut the
brokers off from each other. Its connections still count in the total, and while the total is over
``max.connections`` the other listeners close their least recently active connections (:meth:`excess`) to make
room, as Kafka's processors do.

:class:`ConnectionLimits` keeps the counts; the asyncio shell (``wire.connection_gate.ConnectionGate``) waits and
closes. Rates are ``wire.sampled_rate``'s, over the client quotas' windows (``quota.window.num`` x
``quota.window.size.seconds``).
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from wire.sampled_rate import SampledRate

logger = logging.getLogger(__name__)

#: Kafka's "no limit" (Integer.MAX_VALUE), the default of every connection quota key.
UNLIMITED = 2**31 - 1


def ip_key(host: str) -> str:
    """The address ``host`` is counted under: its canonical text (so ``0:0:0:0:0:0:0:1`` in the overrides matches a
    client on ``::1``), an IPv4-mapped IPv6 address as the IPv4 one it stands for, or ``host`` itself when it is not
    an address."""
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


def parse_ip_overrides(text: str) -> dict[str, int]:
    """``max.connections.per.ip.overrides``: ``host:count,...`` (an IPv6 address as ``[addr]:count`` or with its
    last colon before the count) -> {host: count}; ValueError saying which item is wrong."""
    out: dict[str, int] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        host, colon, count = item.rpartition(":")
        host = host.strip().removeprefix("[").removesuffix("]")
        if not colon or not host or not count.strip().isdigit():
            raise ValueError(f"{item!r} is not host:count")
        out[host] = int(count)
    return out


@dataclass(frozen=True, slots=True)
class ConnectionLimitSettings:
    """One node's connection quota settings, resolved (hosts of the overrides already turned into addresses)."""

    max_connections: int = UNLIMITED
    max_connections_per_ip: int = UNLIMITED
    #: Address (:func:`ip_key`) -> its own maximum, instead of ``max_connections_per_ip``.
    per_ip_overrides: Mapping[str, int] = field(default_factory=dict)
    max_connection_creation_rate: int = UNLIMITED
    listener_max_connections: Mapping[str, int] = field(default_factory=dict)
    listener_max_connection_creation_rate: Mapping[str, int] = field(default_factory=dict)
    #: The listener KIP-402 protects (brokers' own connections); None: none.
    inter_broker_listener: str | None = None
    #: The rates' windows: ``quota.window.num`` of ``quota.window.size.seconds``; the longest wait is one window.
    quota_window_num: int = 11
    quota_window_s: float = 1.0


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a connection was closed at once: its address already has ``limit`` connections."""

    address: str
    limit: int


class ConnectionLimits:
    """The connection counts of one node's listeners and Kafka's decisions on them (see the module docstring)."""

    def __init__(self, settings: ConnectionLimitSettings, listeners: Iterable[str] = ()) -> None:
        self.settings = settings
        self._per_ip: dict[str, int] = {}
        self._per_listener: dict[str, int] = {name: 0 for name in listeners}
        self.total = 0
        self._broker_rate = self._new_rate()
        self._listener_rates: dict[str, SampledRate] = {}

    def _new_rate(self) -> SampledRate:
        return SampledRate(self.settings.quota_window_num, self.settings.quota_window_s)

    def add_listener(self, listener: str) -> None:
        self._per_listener.setdefault(listener, 0)

    def reconfigure(self, settings: ConnectionLimitSettings) -> None:
        """New settings (a dynamic config change); counts and rates are kept (the rates' windows are static)."""
        self.settings = settings

    def protected(self, listener: str) -> bool:
        """Whether ``listener`` is the inter-broker listener KIP-402 protects (only when there is another one)."""
        return listener == self.settings.inter_broker_listener and len(self._per_listener) > 1

    def count(self, listener: str | None = None, address: str | None = None) -> int:
        """Open (admitted) connections: of ``address`` (:func:`ip_key`), else of ``listener``, else in all."""
        if address is not None:
            return self._per_ip.get(ip_key(address), 0)
        if listener is not None:
            return self._per_listener.get(listener, 0)
        return self.total

    # -- step 1: the creation rate ------------------------------------------------------------------------------

    def record_creation(self, listener: str, now: float) -> float:
        """Records a new connection on ``listener`` at ``now`` (seconds) and answers how long the acceptor waits
        before going on with it: the longer of the broker's and the listener's throttle (the broker's does not
        apply to a protected listener), at most one quota window; 0 within both rates."""
        window = self.settings.quota_window_s
        delay = 0.0
        broker_quota = self.settings.max_connection_creation_rate
        if broker_quota < UNLIMITED and not self.protected(listener):
            self._broker_rate.record(1.0, now)
            delay = self._broker_rate.throttle_s(float(broker_quota), now, window)
        listener_quota = self.settings.listener_max_connection_creation_rate.get(listener, UNLIMITED)
        if listener_quota < UNLIMITED:
            rate = self._listener_rates.get(listener)
            if rate is None:
                rate = self._listener_rates[listener] = self._new_rate()
            rate.record(1.0, now)
            delay = max(delay, rate.throttle_s(float(listener_quota), now, window))
        return delay

    # -- step 2: slots ------------------------------------------------------------------------------------------

    def slot_available(self, listener: str) -> bool:
        """Whether ``listener`` may accept one more connection now (else its acceptor waits for a close)."""
        listener_max = self.settings.listener_max_connections.get(listener, UNLIMITED)
        if self._per_listener.get(listener, 0) >= listener_max:
            return False
        return self.protected(listener) or self.total < self.settings.max_connections

    # -- step 3: per IP, then counted ---------------------------------------------------------------------------

    def max_for(self, key: str) -> int:
        """The most connections address ``key`` (:func:`ip_key`) may have."""
        return self.settings.per_ip_overrides.get(key, self.settings.max_connections_per_ip)

    def admit(self, listener: str, key: str) -> Refusal | None:
        """Counts a connection from address ``key`` (:func:`ip_key`, worked out once per connection by the caller,
        which keeps it for :meth:`release`) on ``listener``, or answers why it must be closed at once."""
        limit = self.max_for(key)
        count = self._per_ip.get(key, 0)
        if count >= limit:
            return Refusal(key, limit)
        self._per_ip[key] = count + 1
        self._per_listener[listener] = self._per_listener.get(listener, 0) + 1
        self.total += 1
        return None

    def release(self, listener: str, key: str) -> None:
        """A connection admitted from address ``key`` on ``listener`` closed. A release that was never admitted (a
        bug: counts must never go wrong silently) is logged and changes nothing."""
        count = self._per_ip.get(key, 0)
        if count <= 0 or self._per_listener.get(listener, 0) <= 0 or self.total <= 0:
            logger.error("connection quotas: released a connection from %s on listener %s that is not counted "
                         "(a double release)", key, listener)
            return
        if count == 1:
            del self._per_ip[key]
        else:
            self._per_ip[key] = count - 1
        self._per_listener[listener] -= 1
        self.total -= 1

    def excess(self) -> int:
        """How many connections of unprotected listeners must close: the total over ``max.connections``, which only
        a protected listener's connections can push it to (Kafka's ``maxConnectionsExceeded``)."""
        return max(0, self.total - self.settings.max_connections)
