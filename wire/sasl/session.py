"""One connection's SASL state on a SASL_PLAINTEXT or SASL_SSL listener: what it may send, and who it is.

Kafka authenticates a SASL connection before it serves anything else: ApiVersions, then SaslHandshake (the client
names a mechanism) and SaslAuthenticate (the mechanism's tokens, as many as it takes); any other request before the
exchange succeeds closes the connection. A client that sent SaslHandshake v0 sends its tokens without Kafka
framing (a length and the bytes: the old, pre-KIP-152 way, still spoken by old clients); :attr:`raw_tokens` tells
the dispatcher to hand such frames here unparsed. With ``connections.max.reauth.ms`` the session lasts that long
(KIP-368): SaslAuthenticate v1+ tells the client, which re-authenticates with the same principal and the same
mechanism before the end on the same connection; past the end, anything but a re-authentication closes the
connection.

Once authenticated, as Kafka's SocketServer and KafkaApis answer: a SaslHandshake begins a re-authentication only
when sessions expire (``connections.max.reauth.ms`` > 0) and the last one began at least a second ago
(KafkaChannel.maybeBeginServerReauthentication); otherwise it is answered ILLEGAL_SASL_STATE, whatever mechanism it
names, and so is a SaslAuthenticate outside an exchange, and the connection goes on. A re-authentication naming an
enabled mechanism other than the session's is answered NONE, and the connection is closed, unanswered, at the next
request (Kafka's REAUTH_BAD_MECHANISM).

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

from wire.api_versions import PRE_AUTHENTICATION_KEYS, SASL_HANDSHAKE_KEY
from wire.log_text import LOG_TEXT_MAX, untrusted
from wire.sasl import SaslAuthenticationError, SaslServer
from wire.sasl.plain import PlainServer
from wire.sasl.scram import MECHANISMS, ScramCredential, ScramServer

logger = logging.getLogger(__name__)

#: The mechanisms a metric label may name (Kafka's own); any other name a client sends is counted as ``other``.
KNOWN_MECHANISMS: Final = frozenset({"GSSAPI", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"})
OTHER_MECHANISM: Final = "other"


#: Kafka's KafkaChannel.MIN_REAUTH_INTERVAL_ONE_SECOND_NANOS: the shortest time between two re-authentications.
MIN_REAUTH_INTERVAL_S: Final = 1.0


def mechanism_label(mechanism: str | None) -> str:
    """The ``mechanism`` label of a failure: a known mechanism, ``none`` before any, else ``other`` (a client's
    made-up name must not create a series)."""
    if mechanism is None:
        return "none"
    return mechanism if mechanism in KNOWN_MECHANISMS else OTHER_MECHANISM

#: (user, mechanism id) -> the user's SCRAM credential, read from the current metadata image at each exchange.
CredentialLookup = Callable[[str, int], ScramCredential | None]
#: (token id, mechanism id) -> a delegation token's credential, owner and expiry (``wire.sasl.scram.TokenLookup``).
TokenCredentialLookup = Callable[[str, int], tuple[ScramCredential, str, int] | None]


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
        tokens: TokenCredentialLookup | None = None,
    ) -> None:
        self.settings = settings
        self._credentials = credentials
        self._tokens = tokens
        #: Whether the connection logged in with a delegation token (it may then not ask for tokens itself).
        self.token_authenticated = False
        #: This session's lifetime: ``connections.max.reauth.ms``, or less when a token expires sooner.
        self._lifetime_ms = reauth_ms
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
        #: The mechanism the connection authenticated with; a re-authentication must use it.
        self._mechanism: str | None = None
        self._reauth_started_at: float | None = None
        #: Why the re-authentication under way is refused (it named another mechanism): the next request fails.
        self._bad_mechanism: str | None = None

    @property
    def lifetime_ms(self) -> int:
        """What SaslAuthenticate v1+ reports as ``session_lifetime_ms`` (0: the session does not expire)."""
        return self._lifetime_ms

    def refusal(self, api_key: int) -> str | None:
        """Why a request with ``api_key`` must close the connection instead of being served, or None."""
        reason = self._fail_bad_mechanism()
        if reason is not None:
            return reason
        if self.failed:
            return "its SASL authentication failed"
        if self.principal is None or self._exchanging:
            if api_key in PRE_AUTHENTICATION_KEYS:
                return None
            if self.principal is not None:  # Kafka's authenticator takes every request until the exchange ends
                return f"{self.principal} is re-authenticating (only SaslAuthenticate completes it)"
            return "it is not authenticated (only ApiVersions, SaslHandshake and SaslAuthenticate are served first)"
        if api_key == SASL_HANDSHAKE_KEY and self._may_reauthenticate():
            return None  # a re-authentication begins, even past the end of the session
        if self._expires_at is not None and self._clock() >= self._expires_at:
            return (f"the SASL session of {self.principal} expired (connections.max.reauth.ms={self._reauth_ms}"
                    + (", or its delegation token expired)" if self.token_authenticated else ")"))
        return None

    def handshake(self, mechanism: str, version: int) -> ErrorCode:
        """SaslHandshake: selects the mechanism of the exchange that follows."""
        server = self._server
        if server is not None and not server.complete:
            self._fail(server.mechanism, server.user, "SaslHandshake in the middle of an exchange")
            return ErrorCode.illegal_sasl_state
        if self.principal is not None:
            if not self._may_reauthenticate():
                # Kafka's KafkaApis answers it: the connection is authenticated and stays so.
                return ErrorCode.illegal_sasl_state
            self._reauth_started_at = self._clock()
        if mechanism not in self.settings.mechanisms:
            self._fail(
                mechanism,
                None,
                f"mechanism '{mechanism}' is not enabled (enabled: {', '.join(self.settings.mechanisms)})",
            )
            return ErrorCode.unsupported_sasl_mechanism
        self.raw_tokens = version == 0
        if self._mechanism is not None and mechanism != self._mechanism:
            self._bad_mechanism = (f"SASL mechanism '{mechanism}' requested by client is not supported for "
                                   f"re-authentication of mechanism '{self._mechanism}'")
            return ErrorCode.none
        if mechanism == "PLAIN":
            self._server = PlainServer(self.settings.plain_users)
        else:
            scram = MECHANISMS[mechanism]
            tokens = self._tokens
            self._server = ScramServer(scram, lambda user: self._credentials(user, scram.type_id),
                                       tokens=None if tokens is None else lambda token: tokens(token, scram.type_id))
        return ErrorCode.none

    def listed_mechanisms(self, code: ErrorCode) -> tuple[str, ...]:
        """The mechanisms a SaslHandshake answer with ``code`` lists: the enabled ones, but none with
        ILLEGAL_SASL_STATE, which Kafka answers from the request's error response (or KafkaApis) without them."""
        return () if code is ErrorCode.illegal_sasl_state else self.settings.mechanisms

    def authenticate(self, token: bytes) -> bytes:
        """One SaslAuthenticate token; the answer to send back. Raises :class:`SaslAuthenticationError` (the
        connection is refused from then on) or :class:`SaslStateError` when no handshake selected a mechanism."""
        reason = self._fail_bad_mechanism()  # a raw token after a v0 handshake naming another mechanism
        if reason is not None:
            raise SaslAuthenticationError(reason, self._user)
        server = self._server
        if server is None or server.complete:
            if self.principal is not None:
                # Kafka's KafkaApis answers it; the connection stays authenticated.
                raise SaslStateError("SaslAuthenticate request received after successful authentication")
            self._fail(None, None, "SaslAuthenticate without a SaslHandshake")
            raise SaslStateError("SaslAuthenticate must follow a SaslHandshake")
        try:
            answer = server.step(token)
        except SaslAuthenticationError as exc:
            self._fail(server.mechanism, exc.user or server.user, str(exc))
            raise
        if server.complete:
            principal = server.principal if isinstance(server, ScramServer) else f"User:{server.user}"
            if self.principal is not None and principal != self.principal:
                error = SaslAuthenticationError(
                    f"Cannot change principals during re-authentication from {self.principal} to {principal}",
                    server.user,
                )
                self._fail(server.mechanism, server.user, str(error))
                raise error
            reauthenticated = self.principal is not None
            self.principal = principal
            self._mechanism = server.mechanism
            self.raw_tokens = False
            self.token_authenticated = isinstance(server, ScramServer) and server.token_authenticated
            self._lifetime_ms = self._reauth_ms
            expiry_ms = server.token_expiry_ms if isinstance(server, ScramServer) else None
            if expiry_ms is not None:  # Kafka: the session of a token ends with it (min with the re-auth time)
                left = max(1, expiry_ms - int(time.time() * 1000))
                self._lifetime_ms = left if self._reauth_ms <= 0 else min(left, self._reauth_ms)
            self._expires_at = self._clock() + self._lifetime_ms / 1000 if self._lifetime_ms > 0 else None
            self._on_success(server.mechanism)
            logger.debug(
                "%s %sauthenticated as %s with %s%s",
                self._peer,
                "re-" if reauthenticated else "",
                principal,
                server.mechanism,
                f" (delegation token {untrusted(server.user)})" if self.token_authenticated else "",
            )
        return answer

    @property
    def _exchanging(self) -> bool:
        """Whether an exchange (an authentication or a re-authentication) is under way."""
        return self._server is not None and not self._server.complete

    @property
    def _user(self) -> str | None:
        """The authenticated user's name, for the log."""
        return self.principal.removeprefix("User:") if self.principal is not None else None

    def _may_reauthenticate(self) -> bool:
        """Whether a SaslHandshake on this authenticated connection begins a re-authentication: only when sessions
        expire, and not within a second of the last one's start (KafkaChannel.maybeBeginServerReauthentication)."""
        if self._lifetime_ms <= 0:
            return False
        started = self._reauth_started_at
        return started is None or self._clock() - started >= MIN_REAUTH_INTERVAL_S

    def _fail_bad_mechanism(self) -> str | None:
        """The reason a re-authentication naming another mechanism is refused, failing the session, at the first
        request after its handshake (Kafka's REAUTH_BAD_MECHANISM: closed, unanswered); None without one."""
        reason, self._bad_mechanism = self._bad_mechanism, None
        if reason is not None:
            self._fail(self._mechanism, self._user, reason)
        return reason

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
