"""SaslHandshake (key 17) v0-1 and SaslAuthenticate (key 36) v0-2: a SASL listener's authentication exchange.

The connection's :class:`~wire.sasl.session.SaslSession` holds the state; these handlers only translate. On a
listener that is not SASL both are answered ILLEGAL_SASL_STATE, as Kafka's request handler does. A failed
exchange is answered (SASL_AUTHENTICATION_FAILED with a message that names no secret)
``connection.failed.authentication.delay.ms`` after it failed (KIP-306: a client guessing passwords gets few tries a
second; only this connection's answer waits), and the session refuses everything after it, so the connection closes
on the client's next request. SaslAuthenticate v1+ reports the session lifetime (``connections.max.reauth.ms``,
KIP-368). Once authenticated, a SaslHandshake that begins no re-authentication, and a SaslAuthenticate outside an
exchange, are answered ILLEGAL_SASL_STATE at once and the connection goes on, as Kafka's KafkaApis answers them.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.errors import ErrorCode

from broker.handlers.context import RequestContext
from wire.sasl import SaslAuthenticationError
from wire.sasl.session import SaslStateError

_NOT_SASL = "this listener is not a SASL listener"


async def handle_sasl_handshake(ctx: RequestContext, request: Any) -> Any:
    session = ctx.connection.sasl
    if session is None:
        return ctx.build(error_code=ErrorCode.illegal_sasl_state, mechanisms=())
    code = session.handshake(str(request.mechanism), ctx.api_version)
    if session.failed:
        await asyncio.sleep(session.failure_delay_s)
    return ctx.build(error_code=code, mechanisms=session.listed_mechanisms(code))


async def handle_sasl_authenticate(ctx: RequestContext, request: Any) -> Any:
    session = ctx.connection.sasl
    if session is None:
        return ctx.build(error_code=ErrorCode.illegal_sasl_state, error_message=_NOT_SASL, auth_bytes=b"")
    try:
        answer = session.authenticate(bytes(request.auth_bytes))
    except SaslStateError as exc:
        if session.failed:  # a stray SaslAuthenticate on an authenticated connection is no failed exchange
            await asyncio.sleep(session.failure_delay_s)
        return ctx.build(error_code=ErrorCode.illegal_sasl_state, error_message=str(exc), auth_bytes=b"")
    except SaslAuthenticationError as exc:
        await asyncio.sleep(session.failure_delay_s)
        return ctx.build(error_code=ErrorCode.sasl_authentication_failed, error_message=str(exc), auth_bytes=b"")
    return ctx.build(
        error_code=ErrorCode.none,
        error_message=None,
        auth_bytes=answer,
        **({"session_lifetime": session.lifetime_ms} if ctx.api_version >= 1 else {}),
    )
