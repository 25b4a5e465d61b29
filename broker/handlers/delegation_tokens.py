"""CreateDelegationToken (38) v1-3, RenewDelegationToken (39) v1-2, ExpireDelegationToken (40) v1-2 and
DescribeDelegationToken (41) v1-3: KIP-48's tokens, as ``kafka-delegation-tokens.sh``, Kafka's Admin client and
Spark's Kafka connector use them (``metadata.delegation_tokens`` says what a token is).

The broker checks what Kafka's KafkaApis checks before passing a change on to the controller
(``metadata.admin.requests``, which decides and writes it): a token is asked for only over a connection that
authenticated with a credential of its own (SASL other than a token, or a TLS client certificate), never over
PLAINTEXT, one-way TLS or a token's own connection (DELEGATION_TOKEN_REQUEST_NOT_ALLOWED); a token for another
owner (v3) needs CREATE_TOKENS on that ``User`` (DELEGATION_TOKEN_AUTHORIZATION_FAILED); renewers are ``User``
principals (INVALID_PRINCIPAL_TYPE). Descriptions are read from this broker's image: the tokens the principal owns
or may renew, those it may DESCRIBE (a ``DelegationToken`` ACL on the token id) and those of owners it may
DESCRIBE_TOKENS (a ``User`` ACL), filtered by the owners asked, each with its HMAC.
"""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from broker.handlers.context import RequestContext
from metadata.acl.binding import AclOperation, ResourceType
from metadata.admin import requests as admin_requests
from metadata.admin.requests import always
from metadata.delegation_tokens import (
    CREATE,
    EXPIRE,
    RENEW,
    USER_TYPE,
    DelegationToken,
    TokenRequest,
    TokenResult,
    secret_key,
    split_principal,
    token_hmac,
)
from wire import schema


def _at(ms: int) -> datetime.datetime:
    """A millisecond timestamp as kio carries Create/Renew/Expire's (-1, Kafka's "none", included); Describe's are
    plain int64."""
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)


def may_ask_for_tokens(ctx: RequestContext) -> bool:
    """Kafka's allowTokenRequests: the connection authenticated with a credential of its own."""
    sasl = ctx.connection.sasl
    if sasl is not None:
        return sasl.principal is not None and not sasl.token_authenticated
    return ctx.connection.tls_principal is not None


async def _change(ctx: RequestContext, request: TokenRequest) -> TokenResult:
    return await admin_requests.change_delegation_token(request, always(ctx.broker.controller))


# --------------------------------------------------------------------------- CreateDelegationToken (38)


async def handle_create_delegation_token(ctx: RequestContext, request: Any) -> Any:
    requester = ctx.principal
    owner_name = getattr(request, "owner_principal_name", None)  # v3
    owner = f"{request.owner_principal_type or USER_TYPE}:{owner_name}" if owner_name else requester
    renewers = tuple(f"{r.principal_type}:{r.principal_name}" for r in request.renewers)
    if not may_ask_for_tokens(ctx):
        result = TokenResult(ErrorCode.delegation_token_request_not_allowed)
    elif owner != requester and not ctx.allowed(AclOperation.CREATE_TOKENS, ResourceType.USER, owner):
        result = TokenResult(ErrorCode.delegation_token_authorization_failed)
    elif any(split_principal(renewer)[0] != USER_TYPE for renewer in renewers):
        result = TokenResult(ErrorCode.invalid_principal_type)
    else:
        lifetime = schema.millis(request.max_lifetime)
        result = await _change(ctx, TokenRequest(CREATE, requester, owner, renewers, max_lifetime_ms=lifetime))
    token = result.token
    owner_type, owner_name = split_principal(token.owner if token is not None else owner)
    requester_type, requester_name = split_principal(requester)
    fields: dict[str, object] = {}
    if ctx.api_version >= 3:
        fields.update(token_requester_principal_type=requester_type, token_requester_principal_name=requester_name)
    return ctx.build(
        error_code=result.error, principal_type=owner_type, principal_name=owner_name,
        issue_timestamp=_at(token.issue_ms if token is not None else -1),
        expiry_timestamp=_at(token.expiry_ms if token is not None else -1),
        max_timestamp=_at(token.max_ms if token is not None else -1),
        token_id=token.token_id if token is not None else "", hmac=result.token_hmac, throttle_time=0, **fields,
    )


# --------------------------------------------------------------------------- Renew (39) and Expire (40)


async def handle_renew_delegation_token(ctx: RequestContext, request: Any) -> Any:
    return await _renew_or_expire(ctx, RENEW, bytes(request.hmac), schema.millis(request.renew_period))


async def handle_expire_delegation_token(ctx: RequestContext, request: Any) -> Any:
    return await _renew_or_expire(ctx, EXPIRE, bytes(request.hmac), schema.millis(request.expiry_time_period))


async def _renew_or_expire(ctx: RequestContext, kind: str, hmac: bytes, period_ms: int) -> Any:
    if not may_ask_for_tokens(ctx):
        result = TokenResult(ErrorCode.delegation_token_request_not_allowed)
    else:
        result = await _change(ctx, TokenRequest(kind, ctx.principal, token_hmac=hmac, period_ms=period_ms))
    expiry = result.expiry_ms if result.error is ErrorCode.none else -1
    return ctx.build(error_code=result.error, expiry_timestamp=_at(expiry), throttle_time=0)


# --------------------------------------------------------------------------- DescribeDelegationToken (41)


def _visible(ctx: RequestContext, token: DelegationToken, owners: list[str] | None) -> bool:
    """Kafka's DelegationTokenManager.filterToken."""
    if owners is not None and not any(token.owner_or_renewer(owner) for owner in owners):
        return False
    return (
        token.owner_or_renewer(ctx.principal)
        or ctx.allowed(AclOperation.DESCRIBE, ResourceType.DELEGATION_TOKEN, token.token_id, log_denial=False)
        or ctx.allowed(AclOperation.DESCRIBE_TOKENS, ResourceType.USER, token.owner, log_denial=False)
    )


def _described(ctx: RequestContext, secret: str, token: DelegationToken) -> Any:
    cls = ctx.response_class
    owner_type, owner_name = split_principal(token.owner)
    fields: dict[str, object] = {}
    if ctx.api_version >= 3:
        requester_type, requester_name = split_principal(token.requester)
        fields.update(token_requester_principal_type=requester_type, token_requester_principal_name=requester_name)
    entity = schema.field_entity(cls, "tokens")
    return schema.build_nested(
        cls, "tokens", principal_type=owner_type, principal_name=owner_name, issue_timestamp=token.issue_ms,
        expiry_timestamp=token.expiry_ms, max_timestamp=token.max_ms, token_id=token.token_id,
        hmac=token_hmac(secret, token.token_id),
        renewers=tuple(
            schema.build_nested(entity, "renewers", principal_type=kind, principal_name=name)
            for kind, name in map(split_principal, token.renewers)
        ),
        **fields,
    )


async def handle_describe_delegation_token(ctx: RequestContext, request: Any) -> Any:
    secret = secret_key(ctx.broker.config)
    if not may_ask_for_tokens(ctx):
        return ctx.build(error_code=ErrorCode.delegation_token_request_not_allowed, tokens=(), throttle_time=0)
    if secret is None:
        return ctx.build(error_code=ErrorCode.delegation_token_auth_disabled, tokens=(), throttle_time=0)
    owners = None if request.owners is None else [f"{o.principal_type}:{o.principal_name}" for o in request.owners]
    image = ctx.broker.controller.image
    tokens = (
        ()
        if owners == []  # an empty list asks for none (null asks for all)
        else tuple(
            _described(ctx, secret, token)
            for _, token in sorted(image.delegation_tokens.items())
            if _visible(ctx, token, owners)
        )
    )
    return ctx.build(error_code=ErrorCode.none, tokens=tokens, throttle_time=0)
