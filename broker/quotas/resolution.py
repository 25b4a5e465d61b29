"""Which client quota applies to a request: Kafka's precedence of quota entities (KIP-55, ``DefaultQuotaCallback``).

For a user ``u`` (the principal's name, ``ANONYMOUS`` without authentication) and a client id ``c``, the first of
these entities that sets the quota key wins::

    /users/u/clients/c  >  /users/u/clients/<default>  >  /users/u
    >  /users/<default>/clients/c  >  /users/<default>/clients/<default>  >  /users/<default>
    >  /clients/c  >  /clients/<default>

Each key is resolved on its own (a user's producer quota may come from one entity and its request quota from
another). The entity also decides who shares the measured rate, Kafka's metric tags: a user-level quota is shared
by every client id of that user, a client-level one by every user of that client id, a user+client one by that
pair only; a default entity measures each user/client separately, as if it had been set for each.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from metadata.client_quotas import CLIENT_ID, USER, QuotaEntity


@dataclass(frozen=True, slots=True)
class QuotaTags:
    """Who shares one measured rate: a user name and a client id, "" for a part the quota does not depend on."""

    user: str
    client_id: str


@dataclass(frozen=True, slots=True)
class ResolvedQuota:
    tags: QuotaTags
    limit: float
    entity: QuotaEntity


def _candidates(user: str, client_id: str) -> tuple[tuple[QuotaEntity, QuotaTags], ...]:
    both = QuotaTags(user, client_id)
    user_only = QuotaTags(user, "")
    return (
        (((CLIENT_ID, client_id), (USER, user)), both),
        (((CLIENT_ID, None), (USER, user)), both),
        (((USER, user),), user_only),
        (((CLIENT_ID, client_id), (USER, None)), both),
        (((CLIENT_ID, None), (USER, None)), both),
        (((USER, None),), user_only),
        (((CLIENT_ID, client_id),), QuotaTags("", client_id)),
        (((CLIENT_ID, None),), QuotaTags("", client_id)),
    )


def resolve(
    quotas: Mapping[QuotaEntity, Mapping[str, float]], key: str, user: str, client_id: str
) -> ResolvedQuota | None:
    """The quota ``key`` that applies to ``user`` with ``client_id``, or None: unlimited."""
    if not quotas:
        return None
    for entity, tags in _candidates(user, client_id):
        values = quotas.get(entity)
        if values is not None and key in values:
            return ResolvedQuota(tags, values[key], entity)
    return None
