"""SASL mechanisms as sans-I/O *client* state machines: PLAIN (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802, 7677).

The counterparts of :class:`wire.sasl.plain.PlainServer` and :class:`wire.sasl.scram.ScramServer`, for a node's own
connections to another broker's SASL listener (``wire.client.ClientConnection``). :meth:`SaslClient.first` gives the
first token to send and :meth:`SaslClient.step` the answer to each server token (None: nothing more to send); the
exchange is :attr:`SaslClient.complete` once the server is verified too. SCRAM checks the server's nonce and, in the
server-final message, its signature: a server that does not hold the user's ServerKey cannot pass itself off as the
cluster's broker. Failures raise :class:`wire.sasl.SaslAuthenticationError`, whose messages never hold a password,
a proof or a token.
"""

from __future__ import annotations

import base64
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from wire.sasl import SaslAuthenticationError
from wire.sasl.plain import MECHANISM as PLAIN
from wire.sasl.scram import MAX_ITERATIONS, MECHANISMS, ScramMechanism, b64decode, encode_saslname, parse_attributes

#: The mechanisms a node can authenticate with to another broker.
CLIENT_MECHANISMS = (PLAIN, *MECHANISMS)


class SaslClient(Protocol):
    """One authentication exchange on the client side."""

    @property
    def mechanism(self) -> str: ...

    @property
    def complete(self) -> bool: ...

    def first(self) -> bytes:
        """The client's first token."""
        ...

    def step(self, challenge: bytes) -> bytes | None:
        """The answer to a server token, or None when the exchange is over on the client's side."""
        ...


class PlainClient:
    """PLAIN: one message ``NUL user NUL password``; complete once the server accepted it (an empty answer)."""

    mechanism = PLAIN

    def __init__(self, user: str, password: str) -> None:
        self._user = user
        self._password = password
        self._sent = False
        self._complete = False

    @property
    def complete(self) -> bool:
        return self._complete

    def first(self) -> bytes:
        if self._sent:
            raise SaslAuthenticationError("SASL/PLAIN sends exactly one message", self._user)
        self._sent = True
        return f"\x00{self._user}\x00{self._password}".encode()

    def step(self, challenge: bytes) -> bytes | None:
        if not self._sent or self._complete:
            raise SaslAuthenticationError("unexpected SASL/PLAIN server message", self._user)
        self._complete = True
        return None


def _fields(message: str, what: str) -> dict[str, str]:
    """The attributes of a server message by key; the first of a repeated key counts."""
    return dict(reversed(parse_attributes(message, what)))


class ScramClient:
    """SCRAM: client-first, then client-final in answer to server-first, then server-final is verified.

    ``nonce`` makes the client nonce (tests pass RFC 7677's). The iteration count the server asks for is bounded
    (``max_iterations``, the most a server may store) so that a hostile peer cannot make this node spend seconds in
    PBKDF2. ``salted_password`` computes SaltedPassword for (salt, iterations) in place of the password's PBKDF2,
    for a caller that reconnects often with one password and keeps it (the connection-storm bench)."""

    def __init__(
        self,
        mechanism: ScramMechanism,
        user: str,
        password: str,
        *,
        nonce: Callable[[], str] = lambda: secrets.token_urlsafe(24),
        max_iterations: int = MAX_ITERATIONS,
        salted_password: Callable[[bytes, int], bytes] | None = None,
        token: bool = False,
    ) -> None:
        """``token``: log in with a delegation token (``user`` its id, ``password`` its HMAC in base64), as Kafka's
        client does with ``tokenauth=true`` in its JAAS line."""
        self._token = token
        self._mechanism = mechanism
        self._user = user
        self._password = password
        self._nonce = nonce()
        self._max_iterations = max_iterations
        self._salted_password = salted_password
        self._state = "initial"
        self._client_first_bare = ""
        self._expected_signature = b""

    @property
    def mechanism(self) -> str:
        return self._mechanism.name

    @property
    def complete(self) -> bool:
        return self._state == "complete"

    def first(self) -> bytes:
        if self._state != "initial":
            raise SaslAuthenticationError("SCRAM client-first message already sent", self._user)
        self._state = "server-first"
        self._client_first_bare = f"n={encode_saslname(self._user)},r={self._nonce}" + (
            ",tokenauth=true" if self._token else "")
        return f"n,,{self._client_first_bare}".encode()

    def step(self, challenge: bytes) -> bytes | None:
        state, self._state = self._state, "failed"  # whatever goes wrong below, the exchange is over
        try:
            text = challenge.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslAuthenticationError("Invalid SCRAM server message: not UTF-8", self._user) from None
        if state == "server-first":
            answer = self._server_first(text)
            self._state = "server-final"
            return answer
        if state == "server-final":
            self._server_final(text)
            self._state = "complete"
            return None
        raise SaslAuthenticationError(f"unexpected SCRAM server message in state {state}", self._user)

    def _server_first(self, text: str) -> bytes:
        fields = _fields(text, "server first message")
        if "m" in fields:
            raise SaslAuthenticationError("Invalid SCRAM server first message: mandatory extension", self._user)
        nonce, salt_text, iterations_text = fields.get("r"), fields.get("s"), fields.get("i")
        if nonce is None or salt_text is None or iterations_text is None:
            raise SaslAuthenticationError("Invalid SCRAM server first message: expected r=,s=,i=", self._user)
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise SaslAuthenticationError("Invalid SCRAM server first message: nonce does not extend ours", self._user)
        if not iterations_text.isdigit() or not 1 <= int(iterations_text) <= self._max_iterations:
            raise SaslAuthenticationError(
                f"Invalid SCRAM server first message: iteration count not in 1..{self._max_iterations}", self._user
            )
        salt = b64decode(salt_text, "server first message")
        m = self._mechanism
        iterations = int(iterations_text)
        salted = (
            m.salted_password(self._password, salt, iterations)
            if self._salted_password is None
            else self._salted_password(salt, iterations)
        )
        client_key = m.client_key(salted)
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self._client_first_bare},{text},{without_proof}".encode()
        signature = m.hmac(m.hash(client_key), auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._expected_signature = m.hmac(m.server_key(salted), auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode('ascii')}".encode()

    def _server_final(self, text: str) -> None:
        fields = _fields(text, "server final message")
        if "e" in fields:
            raise SaslAuthenticationError(f"Authentication failed: the server answered error {fields['e']}", self._user)
        verifier = fields.get("v")
        if verifier is None:
            raise SaslAuthenticationError("Invalid SCRAM server final message: no verifier", self._user)
        if not hmac.compare_digest(b64decode(verifier, "server final message"), self._expected_signature):
            raise SaslAuthenticationError(
                "Authentication failed: the server's SCRAM signature does not verify", self._user
            )


def new_client(mechanism: str, user: str, password: str, *, token: bool = False) -> SaslClient:
    """A client exchange for ``mechanism`` (one of :data:`CLIENT_MECHANISMS`); ValueError for any other, and for a
    delegation token (``token``) over anything but SCRAM, as Kafka's client."""
    if mechanism == PLAIN:
        if token:
            raise ValueError("a delegation token (tokenauth=true) logs in with SCRAM, not PLAIN")
        return PlainClient(user, password)
    scram = MECHANISMS.get(mechanism)
    if scram is None:
        raise ValueError(f"SASL mechanism {mechanism} is not implemented (one of {', '.join(CLIENT_MECHANISMS)})")
    return ScramClient(scram, user, password, token=token)


@dataclass(frozen=True, slots=True)
class SaslCredentials:
    """What a node authenticates with to another broker: a mechanism and its own user (from its JAAS config)."""

    mechanism: str
    user: str
    password: str = field(repr=False)
    #: Log in with a delegation token (``user`` its id, ``password`` its HMAC): Kafka's ``tokenauth="true"``.
    token: bool = False

    def client(self) -> SaslClient:
        return new_client(self.mechanism, self.user, self.password, token=self.token)
