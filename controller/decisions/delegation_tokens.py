"""Create, renew and expire delegation tokens — the controller's decisions, sans-I/O, with Kafka's rules
(DelegationTokenControlManager): which records a request becomes and what it answers.

- Create: the maximum is now + ``delegation.token.max.lifetime.ms``, or sooner when the request asks a shorter
  lifetime; the first expiry is now + ``delegation.token.expiry.time.ms``, capped by the maximum. The token id is a
  random UUID. Renewers must be ``User`` principals (INVALID_PRINCIPAL_TYPE).
- Renew and expire find the token by its HMAC (DELEGATION_TOKEN_NOT_FOUND), refuse one past its expiry
  (DELEGATION_TOKEN_EXPIRED) and a requester who is neither its owner nor a renewer
  (DELEGATION_TOKEN_OWNER_MISMATCH). Renew moves the expiry to now + the period asked (at most the default expiry
  time), capped by the maximum; expire with a negative period removes the token at once, else moves its expiry to
  now + the period, capped by the maximum.
- Without a secret key tokens are off: DELEGATION_TOKEN_AUTH_DISABLED.

The sweep removes the tokens past their expiry (Kafka's expired-token remover).
"""

from __future__ import annotations

import hmac as hmac_module
import uuid
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from metadata.cluster_records import DelegationTokenRecord, RemoveDelegationTokenRecord
from metadata.delegation_tokens import (
    CREATE,
    EXPIRE,
    RENEW,
    USER_TYPE,
    DelegationToken,
    TokenRequest,
    TokenResult,
    split_principal,
    token_hmac,
)
from metadata.image import MetadataImage
from storage.metadata.record_codec import MetadataRecord


@dataclass(frozen=True, slots=True)
class TokenLimits:
    """The controller's settings: its secret key (None: tokens are off) and Kafka's two default lifetimes."""

    secret: str | None
    max_lifetime_ms: int
    expiry_time_ms: int


@dataclass(frozen=True, slots=True)
class TokenPlan:
    records: list[MetadataRecord]
    result: TokenResult


def _record(token: DelegationToken) -> DelegationTokenRecord:
    return DelegationTokenRecord(token.owner, token.requester, token.renewers, token.issue_ms, token.max_ms,
                                 token.expiry_ms, token.token_id)


def _refused(code: ErrorCode) -> TokenPlan:
    return TokenPlan([], TokenResult(code))


def plan_token_request(image: MetadataImage, limits: TokenLimits, request: TokenRequest, now_ms: int) -> TokenPlan:
    if limits.secret is None:
        return _refused(ErrorCode.delegation_token_auth_disabled)
    if request.kind == CREATE:
        return _create(limits, limits.secret, request, now_ms)
    if request.kind not in (RENEW, EXPIRE):
        raise ValueError(f"unknown delegation token request {request.kind!r}")
    token = _by_hmac(image, limits.secret, request.token_hmac)
    if token is None:
        return _refused(ErrorCode.delegation_token_not_found)
    if token.expired(now_ms):
        return _refused(ErrorCode.delegation_token_expired)
    if not token.owner_or_renewer(request.requester):
        return _refused(ErrorCode.delegation_token_owner_mismatch)
    if request.kind == EXPIRE and request.period_ms < 0:
        return TokenPlan([RemoveDelegationTokenRecord(token.token_id)], TokenResult(expiry_ms=request.period_ms))
    if request.kind == RENEW:
        period = limits.expiry_time_ms if request.period_ms <= 0 else min(limits.expiry_time_ms, request.period_ms)
    else:
        period = request.period_ms
    renewed = DelegationToken(token.token_id, token.owner, token.requester, token.renewers, token.issue_ms,
                              token.max_ms, min(token.max_ms, now_ms + period))
    return TokenPlan([_record(renewed)], TokenResult(token=renewed, expiry_ms=renewed.expiry_ms))


def _create(limits: TokenLimits, secret: str, request: TokenRequest, now_ms: int) -> TokenPlan:
    if any(split_principal(renewer)[0] != USER_TYPE for renewer in request.renewers):
        return _refused(ErrorCode.invalid_principal_type)
    lifetime = limits.max_lifetime_ms
    if request.max_lifetime_ms > 0:
        lifetime = min(lifetime, request.max_lifetime_ms)
    max_ms = now_ms + lifetime
    token_id = str(uuid.uuid4())
    token = DelegationToken(token_id, request.owner or request.requester, request.requester, request.renewers,
                            now_ms, max_ms, min(max_ms, now_ms + limits.expiry_time_ms))
    return TokenPlan([_record(token)], TokenResult(token=token, token_hmac=token_hmac(secret, token_id),
                                                   expiry_ms=token.expiry_ms))


def _by_hmac(image: MetadataImage, secret: str, given: bytes) -> DelegationToken | None:
    for token in image.delegation_tokens.values():
        if hmac_module.compare_digest(token_hmac(secret, token.token_id), given):
            return token
    return None


def plan_token_sweep(image: MetadataImage, now_ms: int) -> list[MetadataRecord]:
    """A removal for each token past its expiry."""
    return [RemoveDelegationTokenRecord(t.token_id) for t in image.delegation_tokens.values() if t.expired(now_ms)]
