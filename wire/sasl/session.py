"""One connection's SASL state on a SASL_PLAINTEXT or SASL_SSL listener: what it may send, and who it is.

Kafka authenticates a SASL connection before it serves anything else: ApiVersions, then SaslHandshake (the client
names a mechanism) and SaslAuthenticate (the mechanism's tokens, as many as it takes); any other request before the
exchange succeeds closes the connection. A client that sent SaslHandshake v0 sends its tokens without Kafka
framing (a length and the bytes: the old, pre-KIP-152 way, still spoken by old clients); :attr:`raw_tokens` tells
the dispatcher to hand such frames here unparsed. With ``connections.max.reauth.ms`` the session lasts that long
(KIP-368): SaslAuthenticate v1+ tells the client, which re-authenticates with the same principal before the end on
the same connection; past the end, anything but a re-authentication closes the connection.

Sans-I/O apart from the clock and the log line, and shared by both kinds of listener: on a client listener
:mod:`broker.request_dispatcher` asks :meth:`SaslSession.refusal` before dispatching and the handlers of
:mod:`broker.handlers.sasl` drive the exchange; on a SASL CONTROLLER listener ``controller.rpc.dispatcher`` does
both. It lives in wire so that the controller layer can use it too; the broker imports it from here. Each
failure is counted (``on_failure``) and logged once, naming the listener, the peer and the user the client
claimed, never a password or a token.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Final, Protocol

from kio.schema.errors import ErrorCode

from wire.api_versions import PRE_AUTHENTICATION_KEYS
from wire.log_text import LOG_TEXT_MAX, untrusted
from wire.sasl import SaslAuthenticationError, SaslServer
from wire.sasl.plain import PlainServer
from wire.sasl.scram import MECHANISMS, ScramCredential, ScramServer

logger = logging.getLogger(__name__)

#: The mechanisms a metric label may name (Kafka's own); any other name a client sends is counted as ``other``.
KNOWN_MECHANISMS: Final = frozenset({"GSSAPI", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"})
OTHER_MECHANISM: Final = "other"


def mechanism_label(mechanism: str | None) -> str:
    """The ``mechanism`` label of a failure: a known mechanism, ``none`` before any, else ``other`` (a client's
    made-up name must not create a series)."""
    if mechanism is None:
        return "none"
    return mechanism if mechanism in KNOWN_MECHANISMS else OTHER_MECHANISM

#: (user, mechanism id) -> the user's SCRAM credential, read from the current metadata image at each exchange.
CredentialLookup = Callable[[str, int], ScramCredential | None]


class SaslSettings(Protocol):
    """A SASL listener's settings as the session reads them (``settings.security.ListenerSasl``)."""

    @property
    def mechanisms(self) -> tuple[str, ...]: ...

    @property
    def plain_users(self) -> Mapping[str, str]: ...


class SaslStateError(Exception):
    """A SASL request out of order (SaslAuthenticate before SaslHandshake, a second handshake mid-exchange)."""


class SaslSession:
    def __init__(
        self,
        settings: SaslSettings,
        credentials: CredentialLookup,
        *,
        peer: str,
        reauth_ms: int = 0,
        failure_delay_ms: int = 0,
        on_failure: Callable[[str], None] = lambda _mechanism: None,
        on_success: Callable[[str], None] = lambda _mechanism: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self._credentials = credentials
        self._peer = peer
        self._reauth_ms = reauth_ms
        #: ``connection.failed.authentication.delay.ms`` (KIP-306): how long the shell holds the answer to a failed
        #: exchange, so a client guessing passwords gets few tries a second; it sleeps, the session does not.
        self.failure_delay_s = failure_delay_ms / 1000
        self._on_failure = on_failure
        self._on_success = on_success
        self._clock = clock
        #: ``User:<name>`` once authenticated (kept through a re-authentication in progress).
        self.principal: str | None = None
        self.raw_tokens = False
        self.failed = False
        self._server: SaslServer | None = None
        self._expires_at: float | None = None

    @property
    def mechanisms(self) -> tuple[str, ...]:
        return self.settings.mechanisms

    @property
    def lifetime_ms(self) -> int:
        """What SaslAuthenticate v1+ reports as ``session_lifetime_ms`` (0: the session does not expire)."""
        return self._reauth_ms

    def refusal(self, api_key: int) -> str | None:
        """Why a request with ``api_key`` must close the connection instead of being served, or None."""
        if self.failed:
            return "its SASL authentication failed"
        if api_key in PRE_AUTHENTICATION_KEYS:
            return None
        if self.principal is None:
            return "it is not authenticated (only ApiVersions, SaslHandshake and SaslAuthenticate are served first)"
        if self._expires_at is not None and self._clock() >= self._expires_at:
            return f"the SASL session of {self.principal} expired (connections.max.reauth.ms={self._reauth_ms})"
        return None

    def handshake(self, mechanism: str, version: int) -> ErrorCode:
        """SaslHandshake: selects the mechanism of the exchange that follows."""
        if self._server is not None and not self._server.complete:
            self._fail(self._server.mechanism, self._server.user, "SaslHandshake in the middle of an exchange")
            return ErrorCode.illegal_sasl_state
        if mechanism not in self.settings.mechanisms:
            self._fail(
                mechanism,
                None,
                f"mechanism '{mechanism}' is not enabled (enabled: {', '.join(self.settings.mechanisms)})",
            )
            return ErrorCode.unsupported_sasl_mechanism
        if mechanism == "PLAIN":
            self._server = PlainServer(self.settings.plain_users)
        else:
            scram = MECHANISMS[mechanism]
            self._server = ScramServer(scram, lambda user: self._credentials(user, scram.type_id))
        self.raw_tokens = version == 0
        return ErrorCode.none

    def authenticate(self, token: bytes) -> bytes:
        """One SaslAuthenticate token; the answer to send back. Raises :class:`SaslAuthenticationError` (the
        connection is refused from then on) or :class:`SaslStateError` when no handshake selected a mechanism."""
        server = self._server
        if server is None or server.complete:
            self._fail(None, None, "SaslAuthenticate without a SaslHandshake")
            raise SaslStateError("SaslAuthenticate must follow a SaslHandshake")
        try:
            answer = server.step(token)
        except SaslAuthenticationError as exc:
            self._fail(server.mechanism, exc.user or server.user, str(exc))
            raise
        if server.complete:
            principal = f"User:{server.user}"
            if self.principal is not None and principal != self.principal:
                error = SaslAuthenticationError(
                    f"Cannot change principals during re-authentication from {self.principal} to {principal}",
                    server.user,
                )
                self._fail(server.mechanism, server.user, str(error))
                raise error
            reauthenticated = self.principal is not None
            self.principal = principal
            self.raw_tokens = False
            self._expires_at = self._clock() + self._reauth_ms / 1000 if self._reauth_ms > 0 else None
            self._on_success(server.mechanism)
            logger.debug(
                "%s %sauthenticated as %s with %s",
                self._peer,
                "re-" if reauthenticated else "",
                principal,
                server.mechanism,
            )
        return answer

    def _fail(self, mechanism: str | None, user: str | None, reason: str) -> None:
        self.failed = True
        self.raw_tokens = False
        self._on_failure(mechanism_label(mechanism))
        logger.warning(
            "SASL authentication failed for %s (mechanism %s, user %s): %s",
            self._peer,
            untrusted(mechanism or "none"),
            f"'{untrusted(user)}'" if user is not None else "not given",
            untrusted(reason, 4 * LOG_TEXT_MAX),
        )
