"""SASL mechanisms as sans-I/O server state machines: PLAIN (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802, 7677).

A broker's SaslAuthenticate handler feeds each client token to :meth:`SaslServer.step` and sends back what it
returns; the machine knows nothing about sockets, Kafka frames or where credentials live (PLAIN gets a map of
users, SCRAM a lookup function), so the same code serves a live connection and a test with RFC vectors. A failed
exchange raises :class:`SaslAuthenticationError`, whose message is safe to send to the client and to log: it never
holds a password, a proof or a token.
"""

from __future__ import annotations

from typing import Protocol

#: The largest token a client may send before it is authenticated (Kafka's ``sasl.server.max.receive.size``
#: default): an unauthenticated peer must not make the broker hold more than this. A SASL listener also cuts its
#: unauthenticated connections' request frames at this size (``wire.listener``'s ``unauthenticated_max_request_bytes``).
MAX_TOKEN_BYTES = 524288


class SaslAuthenticationError(Exception):
    """The exchange failed: wrong credentials, a malformed, replayed or out-of-order message. The message is what
    the client is told (no secret in it); :attr:`user` is the name the client claimed, if it got that far."""

    def __init__(self, message: str, user: str | None = None) -> None:
        super().__init__(message)
        self.user = user


class SaslServer(Protocol):
    """One authentication exchange on the server side."""

    @property
    def mechanism(self) -> str: ...

    @property
    def complete(self) -> bool:
        """True once the client is authenticated (:attr:`user` is then its name)."""
        ...

    @property
    def user(self) -> str | None:
        """The name the client claimed so far (authenticated only once :attr:`complete`)."""
        ...

    def step(self, token: bytes) -> bytes:
        """The server's answer to one client token; :class:`SaslAuthenticationError` ends the exchange."""
        ...


def check_token_size(token: bytes, user: str | None = None) -> None:
    if len(token) > MAX_TOKEN_BYTES:
        raise SaslAuthenticationError(
            f"Authentication failed: SASL token of {len(token)} bytes exceeds the limit of {MAX_TOKEN_BYTES}", user
        )
