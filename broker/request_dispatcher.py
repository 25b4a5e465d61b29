"""The broker's request dispatcher: one Kafka request frame in, one response frame out, through the handler table.

Kept free of sockets (``wire.listener`` owns those) so tests can drive it directly. The listener asks it for a
:class:`~broker.handlers.context.ConnectionState` when a connection opens (``connection_state``) and hands that back
on every request of the connection as ``Peer.state``. An API or version the broker
does not serve closes the connection (ApiVersions excepted: KIP-511 answers a newer client with our range); a
handler that fails unexpectedly is answered with the API's top-level error code where it has one.

On a SASL listener (``ServerConfig.sasl``) each connection gets a :class:`~wire.sasl.session.SaslSession` at its
first request; until it has authenticated only ApiVersions, SaslHandshake and SaslAuthenticate are served and
anything else closes the connection, as Kafka does. After SaslHandshake v0 the client's tokens arrive without a
Kafka header and are answered the same way (length and bytes).

On an SSL listener a client that presented a certificate is ``User:<name>``, the name mapped from the certificate's
subject DN by the listener's ``ssl.principal.mapping.rules`` at its first request (``wire.tls_principal``); one no
rule maps closes the connection, as Kafka refuses it. On SASL_SSL the SASL principal is the connection's.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections.abc import Callable, Mapping
from typing import Any

from broker.authorization import BrokerAuthorizer
from broker.handlers.context import ConnectionState, Handler, RequestContext
from broker.handlers.table import HANDLERS, serve_authorized
from broker.metrics import TopicTraffic
from broker.quotas.enforcer import QuotaEnforcer
from broker.quotas.manager import QuotaType, QuotaWindows
from broker.services import BrokerServices
from metadata.client_quotas import QuotaEntity
from metadata.delegation_tokens import secret_key, token_login
from metadata.errors import error_code_for, error_message_for
from storage.objectstore.base import StoreStats
from storage.objectstore.metrics import StoreStatsCollector
from wire import codec, schema
from wire.api_versions import API_VERSIONS_KEY, VersionRange, advertised, api_name, unsupported_version_answer
from wire.certificate_auth import connection_principal
from wire.codec import ProtocolError
from wire.dispatch import ConnectionClosing, Peer, Response
from wire.log_text import LOG_TEXT_MAX, untrusted
from wire.metrics import ServerMetrics
from wire.sasl import SaslAuthenticationError
from wire.sasl.scram import ScramCredential
from wire.sasl.session import SaslSession, SaslStateError
from wire.tls_principal import parse_rules

logger = logging.getLogger(__name__)


class RequestDispatcher:
    """Turns one request frame into one encoded response frame (or None), calling the registered handler.

    ``store_stats`` reads the object store's request counts at scrape time, so they sit next to the request metrics
    on the same endpoint."""

    def __init__(
        self,
        broker: BrokerServices,
        metrics: ServerMetrics,
        handlers: Mapping[int, Handler] | None = None,
        *,
        store_stats: Callable[[], StoreStats | None] = lambda: None,
    ):
        self.broker = broker
        self.metrics = metrics
        self.handlers = dict(handlers if handlers is not None else HANDLERS)
        self.versions: Mapping[int, VersionRange] = advertised(self.handlers)
        # Object-store request counts sit next to the request metrics on the same endpoint, read at scrape time.
        metrics.registry.register(StoreStatsCollector(store_stats))
        self.authorizer = BrokerAuthorizer(
            self._config_value, lambda: self.broker.controller.image.acls, metrics.authorization_denials
        )
        self.traffic = TopicTraffic(metrics.registry, lambda: self.broker.node_id)
        self.quotas = QuotaEnforcer(self._client_quotas, self._quota_windows, self._throttled)

    def _client_quotas(self) -> Mapping[QuotaEntity, Mapping[str, float]]:
        """The cluster's client quotas (none for a dispatcher a test drives without a broker)."""
        broker: BrokerServices | None = self.broker
        return broker.controller.image.client_quotas if broker is not None else {}

    def _quota_windows(self) -> QuotaWindows:
        return QuotaWindows(int(self.broker.config.value("quota.window.num")),
                            float(self.broker.config.value("quota.window.size.seconds")))

    def _throttled(self, kind: QuotaType, user: str, seconds: float) -> None:
        self.metrics.throttle_seconds.labels(quota=kind.name.lower(), user=user).inc(seconds)

    def _config_value(self, key: str) -> object:
        """The node's config, read when first needed (a dispatcher driven by a test may have no node)."""
        return self.broker.config.value(key)

    def connection_state(self) -> ConnectionState:
        """The state of a new connection: ``KafkaListener(connection_state=...)`` calls this as it opens."""
        return ConnectionState()

    def _sasl_session(self, state: ConnectionState, peer: Peer) -> SaslSession | None:
        """The connection's SASL session, made at its first request on a SASL listener; None elsewhere."""
        if state.sasl is None:
            settings = self.broker.config.sasl.get(peer.listener)
            if settings is None:
                return None
            controller = self.broker.controller

            def credential(user: str, mechanism: int) -> ScramCredential | None:
                return controller.image.scram_credential(user, mechanism)  # the image as of each exchange

            secret = secret_key(self.broker.config)

            def token(token_id: str, mechanism: int) -> tuple[ScramCredential, str, int] | None:
                return token_login(controller.image.delegation_tokens, secret, token_id, mechanism,
                                   int(time.time() * 1000))

            failures = self.metrics.authentication_failures
            # The callbacks hold the listener's name and the limit lift, not the peer: the peer holds this state,
            # and a cycle through it would keep a closed connection's state (its share sessions) until a GC pass.
            listener, lift = peer.listener, peer.lift_request_limit
            state.sasl = SaslSession(
                settings,
                credential,
                peer=str(peer),
                reauth_ms=int(self.broker.config.value("connections.max.reauth.ms")),
                failure_delay_ms=int(self.broker.config.value("connection.failed.authentication.delay.ms")),
                on_failure=lambda mechanism: failures.labels(listener=listener, mechanism=mechanism).inc(),
                on_success=lambda mechanism: self._authenticated(listener, lift, mechanism),
                tokens=token,
            )
        return state.sasl

    def _authenticated(self, listener: str, lift: Callable[[], None] | None, mechanism: str) -> None:
        self.metrics.authentications.labels(listener=listener, mechanism=mechanism).inc()
        if lift is not None:
            lift()  # Kafka's sasl.server.max.receive.size no longer applies

    async def _raw_token(self, session: SaslSession, frame: bytes, peer: Peer) -> bytes:
        """A SASL token sent without Kafka framing after SaslHandshake v0; the answer likewise. A failure closes
        the connection (there is no error field to carry it), ``connection.failed.authentication.delay.ms`` after
        it (KIP-306)."""
        try:
            answer = session.authenticate(frame)
        except (SaslAuthenticationError, SaslStateError) as exc:
            await asyncio.sleep(session.failure_delay_s)  # this connection's answer waits; no other one does
            raise ConnectionClosing(f"SASL authentication of {peer} failed: {exc}") from None
        return struct.pack(">i", len(answer)) + answer

    def _certificate_principal(self, state: ConnectionState, peer: Peer, certificate: bytes) -> None:
        """Names the connection by its client certificate (KIP-371), once; a DN no rule maps closes the connection,
        as Kafka refuses it, and counts as an authentication failure."""
        tls = self.broker.config.tls.get(peer.listener)
        mapper = tls.principal_mapper if tls is not None else parse_rules(None)
        state.tls_principal = connection_principal(peer, certificate, mapper, self.metrics)

    async def dispatch(self, frame: bytes, peer: Peer) -> Response | None:
        session = self._sasl_session(peer.state, peer) if isinstance(peer.state, ConnectionState) else None
        if (session is None and peer.certificate is not None and isinstance(peer.state, ConnectionState)
                and peer.state.tls_principal is None):
            self._certificate_principal(peer.state, peer, peer.certificate)
        if session is not None and session.raw_tokens:
            return await self._raw_token(session, frame, peer)
        prefix = codec.read_prefix(frame)
        key, version = prefix.api_key, prefix.api_version
        if session is not None:
            refusal = session.refusal(key)
            if refusal is not None:
                self.metrics.observe_failure(key)
                raise ConnectionClosing(f"{api_name(key)} (correlation id {prefix.correlation_id}) from {peer} is "
                                        f"refused: {refusal}")
        entry = self.versions.get(key)
        if entry is None or version not in entry:
            if key == API_VERSIONS_KEY:
                # KIP-511: a client newer than us learns our range from a v0 response and retries.
                response = unsupported_version_answer(self.versions)
                return codec.encode_response(prefix.correlation_id, response)
            self.metrics.observe_failure(key)
            supported = f"{entry.min_version}-{entry.max_version}" if entry else "none"
            raise ConnectionClosing(
                f"{api_name(key)} v{version} (correlation id {prefix.correlation_id}) from {peer} is not served "
                f"(supported versions: {supported})"
            )
        try:
            request = codec.decode_request(frame)
        except ProtocolError:
            self.metrics.observe_failure(key)
            raise
        ctx = RequestContext(
            api_key=key,
            api_version=version,
            correlation_id=prefix.correlation_id,
            client_id=request.client_id,
            client_host=peer.host,
            client_port=peer.port,
            broker=self.broker,
            listener_name=peer.listener,
            # A peer from outside a listener (a test driving the dispatcher) has no state: nothing to order.
            connection=peer.state if isinstance(peer.state, ConnectionState) else ConnectionState(),
            api_versions=self.versions,
            authorizer=self.authorizer,
            traffic=self.traffic,
        )
        started = time.perf_counter()
        # Client quotas (broker.quotas): None, and nothing to do, while the cluster has none.
        charge = self.quotas.charge(key, ctx.principal, request.client_id)
        ctx.quota_charge = charge
        try:
            if charge is None:
                response = await serve_authorized(ctx, request.body, self.handlers[key])
            else:
                body = charge.admit(request.body, len(frame))
                response = await charge.timed(serve_authorized(ctx, body, self.handlers[key]))
        except asyncio.CancelledError:
            raise
        except ConnectionClosing:
            self.metrics.observe_failure(key)
            raise  # a handler's decision to answer nothing (Produce acks=0 with an error), logged where it closes
        except Exception as exc:
            self.metrics.observe_failure(key)
            response = self._error_response(ctx, exc)
        self.metrics.observe_request(key, time.perf_counter() - started)
        if charge is not None:
            return charge.respond(prefix.correlation_id, response, peer)
        if response is None:
            return None
        return codec.encode_response_parts(prefix.correlation_id, response)

    def _error_response(self, ctx: RequestContext, exc: Exception) -> Any:
        """A response carrying the error when the API has a top-level error code; otherwise the connection is
        closed, which is what a Kafka client sees when a broker cannot answer a request at all."""
        code = error_code_for(exc)
        cls = ctx.response_class
        # One line an operator can grep, naming the API; the traceback is for whoever debugs the handler.
        failure = (
            f"{api_name(ctx.api_key)} handler failed for {ctx.describe()}: "
            f"{type(exc).__name__}: {untrusted(str(exc), 4 * LOG_TEXT_MAX)}"
        )
        logger.debug("%s", failure, exc_info=exc)
        if not schema.has_field(cls, "error_code"):
            logger.error("%s; closing the connection", failure)
            raise ConnectionClosing(f"handler for {api_name(ctx.api_key)} failed: {exc}") from exc
        logger.error("%s; answering %s", failure, code.name)
        fields: dict[str, object] = {"error_code": code}
        if schema.has_field(cls, "error_message"):
            fields["error_message"] = error_message_for(exc)
        return schema.build(cls, **fields)


