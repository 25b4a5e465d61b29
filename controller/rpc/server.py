"""The CONTROLLER listener: `wire.listener.KafkaListener` with the controller's dispatcher.

One framing implementation serves both kinds of listener; only the dispatcher differs. Requests on a connection
run concurrently and are answered in request order, so a long-polling Raft Fetch delays the responses queued
behind it on that connection only (each voter uses its own connection per peer).

The server knows its voter only as a :class:`~controller.rpc.served_quorum.ServedQuorum`: ``controller.quorum`` builds
it and passes itself in, so the quorum depends on the server and never the other way round.

With ``CONTROLLER:SSL`` in ``listener.security.protocol.map`` the listener serves TLS with its ``ssl.*`` keys
(``ServerConfig.tls``) and reloads renewed certificate files (``wire.tls_reload``); the nodes connecting to it use
``ServerConfig.controller_client_tls``. With CONTROLLER:SASL_PLAINTEXT or SASL_SSL every connection authenticates
first (``controller.rpc.sasl``; settings: ``settings.controller_sasl``), and until it has, its requests are
cut at ``sasl.server.max.receive.size`` as on a client listener. With an authorizer configured (read as the broker's
listeners read it, ``metadata.acl.authorizer.settings_from``), every request's caller is checked
(``controller.rpc.authorization``): on SSL, by its client certificate mapped with the listener's
``ssl.principal.mapping.rules``, remembered per connection.
"""

from __future__ import annotations

import logging

from controller.rpc.authorization import CertificateConnection, ControllerAuthorizer
from controller.rpc.dispatcher import ControllerDispatcher
from controller.rpc.sasl import SaslConnection, SaslGate
from controller.rpc.served_quorum import ServedQuorum
from metadata.acl.authorizer import settings_from
from settings.listeners import Listener
from storage.config import ConfigError
from wire.listener import DEFAULT_MAX_IN_FLIGHT, KafkaListener
from wire.memory_pool import pool_of, seconds_or_never
from wire.metrics import ServerMetrics
from wire.sasl import MAX_TOKEN_BYTES
from wire.tls_reload import CertificateReloader

logger = logging.getLogger(__name__)


class ControllerServer:
    def __init__(
        self, quorum: ServedQuorum, listener: Listener, metrics: ServerMetrics | None = None, *, read_only: bool = False
    ) -> None:
        """``read_only``: serve only the reads of the metadata (an embedded controller; see the dispatcher)."""
        self.listener = listener
        metrics = metrics or ServerMetrics()
        config = quorum.config
        served = config.controller_sasl.served if config.controller_sasl is not None else None
        gate = (
            SaslGate(
                served,
                # Not the bound method: the image is replaced as metadata arrives; each exchange reads the current one.
                lambda user, mechanism: quorum.image.scram_credential(user, mechanism),  # noqa: PLW0108
                metrics,
                reauth_ms=int(config.value("connections.max.reauth.ms")),
            )
            if served is not None and served.listener == listener.name
            else None
        )
        tls = config.tls.get(listener.name)  # CONTROLLER:SSL (or SASL_SSL) in listener.security.protocol.map
        settings = settings_from(config.value)
        authorizer = (
            ControllerAuthorizer(
                settings,
                lambda: quorum.image.acls,  # the image as of each check
                quorum.metadata_loaded,
                metrics,
                mapper=tls.principal_mapper if tls is not None else None,
                sasl=gate,
            )
            if settings is not None
            else None
        )
        self.dispatcher = ControllerDispatcher(quorum, metrics, read_only=read_only, sasl=gate, authorizer=authorizer)
        self._connection_state: type[SaslConnection | CertificateConnection] | None = None
        if gate is not None:
            self._connection_state = SaslConnection
        elif authorizer is not None and tls is not None:
            self._connection_state = CertificateConnection
        self._server = KafkaListener(
            self.dispatcher.metrics,
            host=listener.host or "0.0.0.0",
            port=listener.port,
            listener_name=listener.name,
            max_request_bytes=quorum.config.socket_request_max_bytes_of(listener.name),
            max_request_bytes_key=quorum.config.socket_request_max_bytes_key_of(listener.name),
            max_in_flight=DEFAULT_MAX_IN_FLIGHT,
            ssl_context=tls.context() if tls is not None else None,
            unauthenticated_max_request_bytes=MAX_TOKEN_BYTES if gate is not None else None,
            # The CONTROLLER listener's own pool (a combined node's broker listeners share another).
            memory_pool=pool_of(int(quorum.config.value("queued.max.request.bytes")), "controller"),
            setup_timeout_s=seconds_or_never(int(quorum.config.value("fjord.connections.setup.max.ms"))),
            # Not idle expiry (the nodes keep their connections), but a request half received that long is cut off.
            frame_timeout_s=seconds_or_never(int(quorum.config.value("connections.max.idle.ms"))),
            send_buffer_bytes=int(quorum.config.value("socket.send.buffer.bytes")),
            receive_buffer_bytes=int(quorum.config.value("socket.receive.buffer.bytes")),
        )
        # An SSL CONTROLLER listener picks up renewed certificate files as client listeners do.
        self._reloader = (
            CertificateReloader(self._server, tls.watched_files(), tls.context, tls.reload_interval_ms / 1000)
            if tls is not None
            else None
        )

    @property
    def bound_port(self) -> int:
        return self._server.bound_port

    async def bind(self) -> int:
        try:
            return await self._server.bind()
        except OSError as exc:
            raise ConfigError(
                f"listeners: cannot bind {self.listener.name} to {self.listener.host}:{self.listener.port}: "
                f"{exc.strerror}"
            ) from None

    async def start_serving(self) -> None:
        await self._server.start_serving(self.dispatcher, connection_state=self._connection_state)
        if self._reloader is not None:
            self._reloader.start()

    async def close(self) -> None:
        if self._reloader is not None:
            await self._reloader.stop()
        await self._server.close()
