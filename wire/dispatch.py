"""What a listener and the dispatcher it serves exchange: the :class:`Peer` each request comes from, the encoded
:class:`Response` it is answered with, and :class:`ConnectionClosing` to answer nothing and close.

A module of its own, apart from the sockets (``wire.listener``, ``wire.connection``), so that the dispatchers (a
broker's, a controller's, the authentication and quota layers in front of them) and the tests that drive them
directly depend on this contract only, never on asyncio's transports.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from wire.codec import ProtocolError

#: An encoded response frame: one buffer, or several written back to back (large record sets are not joined).
Response = bytes | list[bytes]


class ConnectionClosing(ProtocolError):
    """Raised by dispatch when the request must not be answered and the connection must close."""


@dataclass(frozen=True, slots=True)
class Peer:
    """The far end of one connection, handed to the dispatcher with each of its requests.

    ``state`` is what the dispatcher keeps for this one connection (``wire.listener.KafkaListener``'s
    ``connection_state`` makes it when the connection opens, and the connection lets go of it when it closes). The
    listener never looks inside, so wire stays free of what a broker or a controller remembers per connection; a
    peer built outside a listener (a test driving a dispatcher directly) has none."""

    host: str
    port: int
    listener: str
    state: object = field(default=None, compare=False, repr=False)
    #: Raises the connection's request size limit from the listener's ``unauthenticated_max_request_bytes`` to its
    #: ``max_request_bytes`` (the dispatcher calls it once a SASL client has authenticated); None: nothing to raise.
    lift_request_limit: Callable[[], None] | None = field(default=None, compare=False, repr=False)
    #: On a TLS listener that asks for client certificates: the DER certificate the client presented (verified
    #: against the listener's CAs in the handshake), from which the dispatcher names the principal; else None.
    certificate: bytes | None = field(default=None, compare=False, repr=False)
    #: Mutes the connection for the given seconds from now (a throttled client, KIP-219, ``wire.muting``): no
    #: request is read or dispatched until then; a longer mute extends it. None: a peer outside a listener, nothing
    #: to mute.
    mute: Callable[[float], None] | None = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        return f"{self.host}:{self.port} on listener {self.listener}"


class Dispatcher(Protocol):
    """Turns one request frame into one encoded response frame, or None to send nothing (Produce with acks=0).
    Raising :class:`~wire.codec.ProtocolError` closes the connection after the responses before it."""

    async def dispatch(self, frame: bytes, peer: Peer) -> Response | None: ...
