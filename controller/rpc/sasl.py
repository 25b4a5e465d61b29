"""SASL on the CONTROLLER listener: every connection authenticates before it is served anything but ApiVersions.

The state machine is the client listeners' (:class:`wire.sasl.session.SaslSession`); this module keeps one per
connection (``KafkaListener``'s ``connection_state``) and answers SaslHandshake v1 and SaslAuthenticate v0-2 from
it. PLAIN users are the listener's JAAS ``user_<name>`` entries; SCRAM credentials are read from the voter's own
metadata image at each exchange (so a fresh quorum has none: see ``settings.controller_sasl``). A failed
exchange is answered SASL_AUTHENTICATION_FAILED (no secret in the message), logged once by the session naming the
peer and the claimed user, and the connection is closed at its next request, as on a client listener.
``connections.max.reauth.ms`` sets the session lifetime (KIP-368).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from settings.security import ListenerSasl
from wire import schema
from wire.dispatch import ConnectionClosing, Peer
from wire.metrics import ServerMetrics
from wire.sasl import SaslAuthenticationError
from wire.sasl.scram import ScramCredential
from wire.sasl.session import SaslSession, SaslStateError

_NOT_SASL = "this listener is not a SASL listener"


class SaslConnection:
    """One connection's SASL session (made at its first request, when the peer is known)."""

    __slots__ = ("session",)

    def __init__(self) -> None:
        self.session: SaslSession | None = None


class SaslGate:
    """The CONTROLLER listener's authentication: makes each connection's session and answers its exchange."""

    def __init__(
        self,
        settings: ListenerSasl,
        credential: Callable[[str, int], ScramCredential | None],
        metrics: ServerMetrics,
        *,
        reauth_ms: int = 0,
    ) -> None:
        self.settings = settings
        self._credential = credential
        self._metrics = metrics
        self._reauth_ms = reauth_ms

    def session(self, peer: Peer) -> SaslSession | None:
        """The connection's session; None for a peer outside a SASL listener's connections."""
        state = peer.state
        if not isinstance(state, SaslConnection):
            return None
        if state.session is None:
            failures, successes = self._metrics.authentication_failures, self._metrics.authentications

            def authenticated(mechanism: str) -> None:
                successes.labels(listener=peer.listener, mechanism=mechanism).inc()
                if peer.lift_request_limit is not None:
                    peer.lift_request_limit()  # sasl.server.max.receive.size no longer applies

            state.session = SaslSession(
                self.settings,
                self._credential,
                peer=str(peer),
                reauth_ms=self._reauth_ms,
                on_failure=lambda mechanism: failures.labels(listener=peer.listener, mechanism=mechanism).inc(),
                on_success=authenticated,
            )
        return state.session

    def check(self, peer: Peer, api_key: int, what: str) -> None:
        """ConnectionClosing unless the connection may send ``api_key`` (``what`` names the request in the log)."""
        session = self.session(peer)
        if session is None:
            raise ConnectionClosing(f"{what} from {peer} is refused: the connection has no SASL session")
        refusal = session.refusal(api_key)
        if refusal is not None:
            raise ConnectionClosing(f"{what} from {peer} is refused: {refusal}")


def handshake(sasl: SaslGate | None, peer: Peer, response_cls: type[Any], body: Any, version: int) -> Any:
    session = sasl.session(peer) if sasl is not None else None
    if session is None:
        return schema.build(response_cls, error_code=ErrorCode.illegal_sasl_state, mechanisms=())
    code = session.handshake(str(body.mechanism), version)
    return schema.build(response_cls, error_code=code, mechanisms=session.listed_mechanisms(code))


def authenticate(sasl: SaslGate | None, peer: Peer, response_cls: type[Any], body: Any) -> Any:
    session = sasl.session(peer) if sasl is not None else None
    if session is None:
        return schema.build(
            response_cls, error_code=ErrorCode.illegal_sasl_state, error_message=_NOT_SASL, auth_bytes=b""
        )
    try:
        answer = session.authenticate(bytes(body.auth_bytes))
    except SaslStateError as exc:
        return schema.build(
            response_cls, error_code=ErrorCode.illegal_sasl_state, error_message=str(exc), auth_bytes=b""
        )
    except SaslAuthenticationError as exc:
        return schema.build(
            response_cls, error_code=ErrorCode.sasl_authentication_failed, error_message=str(exc), auth_bytes=b""
        )
    # v0 has no session_lifetime: schema.build drops it there.
    return schema.build(
        response_cls,
        error_code=ErrorCode.none,
        error_message=None,
        auth_bytes=answer,
        session_lifetime=session.lifetime_ms,
    )
