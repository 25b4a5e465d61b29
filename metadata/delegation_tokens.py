"""Delegation tokens (KIP-48): what a token is, its HMAC, and the SCRAM credential a client logs in with.

A token lets a process that holds no password (a Spark executor, a job a scheduler starts) act as the user who
asked for it: the user creates it over an authenticated connection (CreateDelegationToken), hands the token id and
its HMAC to the process, and the process logs in with SCRAM, the token id as user name, the base64 HMAC as password
and the ``tokenauth=true`` extension; the connection then acts as the token's owner. The token lasts until its
expiry (pushed forward by RenewDelegationToken up to its maximum, cut short by ExpireDelegationToken).

Tokens are metadata records (``DelegationTokenRecord``, ``RemoveDelegationTokenRecord``), written by the
controller. The HMAC is never stored: as on Kafka, every node computes it from the token id with the cluster's
``delegation.token.secret.key`` (HMAC-SHA512), so the key must be the same on every node; a node without it has the
feature off and answers DELEGATION_TOKEN_AUTH_DISABLED.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Final

from kio.schema.errors import ErrorCode

from settings.server import ServerConfig
from wire.sasl.scram import MECHANISMS_BY_ID, MIN_ITERATIONS, ScramCredential, new_credential

#: Kafka's keys (``delegation.token.master.key`` is the deprecated name of the secret).
SECRET_KEY: Final = "delegation.token.secret.key"
SECRET_KEY_ALIAS: Final = "delegation.token.master.key"
MAX_LIFETIME: Final = "delegation.token.max.lifetime.ms"
EXPIRY_TIME: Final = "delegation.token.expiry.time.ms"
EXPIRY_CHECK_INTERVAL: Final = "delegation.token.expiry.check.interval.ms"

#: The only principal type a token's owner and renewers may have (Kafka's KafkaPrincipal.USER_TYPE).
USER_TYPE: Final = "User"


def secret_key(config: ServerConfig) -> str | None:
    """The node's token secret, or None when tokens are off (no key, or an empty one, as Kafka reads it)."""
    value = config.value(SECRET_KEY) or config.value(SECRET_KEY_ALIAS)
    return str(value) if value else None


@dataclass(frozen=True, slots=True)
class DelegationToken:
    """One token as the metadata image holds it. Principals are ``Type:name`` (``User:alice``)."""

    token_id: str
    owner: str
    requester: str
    renewers: tuple[str, ...]
    issue_ms: int
    max_ms: int
    expiry_ms: int

    def owner_or_renewer(self, principal: str) -> bool:
        return principal == self.owner or principal in self.renewers

    def expired(self, now_ms: int) -> bool:
        """Kafka's test: past its expiry or its maximum (the expiry never passes the maximum, but an old record
        might)."""
        return self.expiry_ms < now_ms or self.max_ms < now_ms


def split_principal(principal: str) -> tuple[str, str]:
    """``User:alice`` -> ("User", "alice"), as the responses carry it."""
    kind, _, name = principal.partition(":")
    return kind, name


def token_hmac(secret: str, token_id: str) -> bytes:
    """HMAC-SHA512 of the token id under the secret key (Kafka's DelegationTokenManager.createHmac)."""
    return hmac.new(secret.encode("utf-8"), token_id.encode("utf-8"), hashlib.sha512).digest()


def token_password(secret: str, token_id: str) -> str:
    """What a client gives as its SCRAM password: the HMAC in base64 (Kafka's tokens tool prints this)."""
    return base64.b64encode(token_hmac(secret, token_id)).decode("ascii")


@lru_cache(maxsize=1024)
def token_credential(secret: str, token_id: str, mechanism_id: int) -> ScramCredential:
    """The SCRAM credential a token logs in with, at Kafka's iteration count for tokens (the mechanism's floor).
    Its salt is derived from the HMAC, so each token has its own and a node computes the same one each time (the
    salting is 4096 rounds of PBKDF2: cached, not redone at every login)."""
    password = token_password(secret, token_id)
    salt = hashlib.sha256(b"fjord delegation token salt:" + password.encode("ascii")).digest()
    return new_credential(MECHANISMS_BY_ID[mechanism_id], password, MIN_ITERATIONS, salt)


def token_login(
    tokens: Mapping[str, DelegationToken], secret: str | None, token_id: str, mechanism_id: int, now_ms: int
) -> tuple[ScramCredential, str, int] | None:
    """What a SCRAM login with ``tokenauth=true`` checks (``wire.sasl.scram.TokenLookup``): the token's credential,
    owner and expiry, or None when tokens are off, the token does not exist or has expired."""
    token = tokens.get(token_id)
    if secret is None or token is None or token.expired(now_ms):
        return None
    return token_credential(secret, token_id, mechanism_id), token.owner, token.expiry_ms


# ------------------------------------------------------------------ the controller's calls (metadata.controller_api)

CREATE: Final = "create"
RENEW: Final = "renew"
EXPIRE: Final = "expire"


@dataclass(frozen=True, slots=True)
class TokenRequest:
    """CreateDelegationToken, RenewDelegationToken or ExpireDelegationToken (``kind``) as a broker passes it to the
    controller, once it checked the connection may ask and who the owner is: ``requester`` is the principal of the
    connection, ``owner`` the token's (create), ``token_hmac`` names the token (renew, expire), ``period_ms`` is the
    renewal or expiry period asked (negative: the default; for expire, at once) and ``max_lifetime_ms`` the
    creation's (0 or less: the default)."""

    kind: str
    requester: str
    owner: str = ""
    renewers: tuple[str, ...] = ()
    max_lifetime_ms: int = -1
    token_hmac: bytes = field(default=b"", repr=False)
    period_ms: int = -1


@dataclass(frozen=True, slots=True)
class TokenResult:
    """The controller's answer: the new token and its HMAC (create), or the token's new expiry (renew, expire)."""

    error: ErrorCode = ErrorCode.none
    token: DelegationToken | None = None
    token_hmac: bytes = field(default=b"", repr=False)
    expiry_ms: int = -1
