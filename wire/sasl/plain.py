"""SASL/PLAIN on the server (RFC 4616): one client message ``[authzid] NUL authcid NUL passwd``, checked against
the users of the listener's JAAS config (``user_<name>="<password>"``), as Kafka's PlainServerCallbackHandler does.

PLAIN sends the password itself, so it belongs on SASL_SSL listeners; the comparison is constant-time all the same.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping

from wire.sasl import SaslAuthenticationError, check_token_size

MECHANISM = "PLAIN"
_INVALID = "Authentication failed: Invalid username or password"


def parse_plain(token: bytes) -> tuple[str, str, str]:
    """(authorization id, user, password) of a PLAIN message; :class:`SaslAuthenticationError` if malformed."""
    try:
        text = token.decode("utf-8")
    except UnicodeDecodeError:
        raise SaslAuthenticationError("Invalid SASL/PLAIN response: not UTF-8") from None
    parts = text.split("\x00")
    if len(parts) != 3:
        raise SaslAuthenticationError("Invalid SASL/PLAIN response: expected 3 tokens separated by NUL")
    authzid, user, password = parts
    if not user:
        raise SaslAuthenticationError("Authentication failed: username not specified")
    if not password:
        raise SaslAuthenticationError("Authentication failed: password not specified", user)
    if authzid and authzid != user:
        raise SaslAuthenticationError(
            "Authentication failed: Client requested an authorization id that is different from username", user
        )
    return authzid, user, password


class PlainServer:
    """One PLAIN exchange: a single step, then complete (or failed)."""

    mechanism = MECHANISM

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = users
        self._user: str | None = None
        self._complete = False
        self._used = False

    @property
    def complete(self) -> bool:
        return self._complete

    @property
    def user(self) -> str | None:
        return self._user

    def step(self, token: bytes) -> bytes:
        if self._used:
            raise SaslAuthenticationError("Authentication failed: SASL/PLAIN takes exactly one message", self._user)
        self._used = True
        check_token_size(token)
        _authzid, user, password = parse_plain(token)
        self._user = user
        expected = self._users.get(user)
        # Compare against something even for an unknown user, so the time taken does not tell which users exist.
        matches = hmac.compare_digest(password.encode(), (expected if expected is not None else "\x00").encode())
        if expected is None or not matches:
            raise SaslAuthenticationError(_INVALID, user)
        self._complete = True
        return b""
