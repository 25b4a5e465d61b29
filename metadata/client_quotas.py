"""Client quotas as metadata (KIP-546): quota entities, the keys Fjord applies, and the controller's decisions on
AlterClientQuotas and the broker's matching of DescribeClientQuotas filters, sans-I/O.

A quota *entity* is a set of (entity type, name) pairs: ``user`` and/or ``client-id`` (a None name is the type's
default entity, ``<default>`` in Kafka's tools), or ``ip``. It is kept as a tuple sorted by type, so an entity has
one spelling whatever order a request listed its parts in. Each entity maps quota keys to values
(``MetadataImage.client_quotas``), replicated as ``ClientQuotaRecord``s.

Keys: ``producer_byte_rate`` and ``consumer_byte_rate`` (bytes/s, whole numbers), ``request_percentage`` (% of
one request thread per quota window) and ``controller_mutation_rate`` (partitions created or deleted per second,
KIP-599) are enforced by the brokers (``broker.quotas``). The ``ip`` entity's ``connection_creation_rate`` is
refused with INVALID_REQUEST naming the key: Fjord does not apply it, and storing a limit nothing enforces would
mislead an operator.
Kafka's rules otherwise (ClientQuotaControlManager): each entry is decided on its own, a removal of a key that is
not set is a success, ``validate_only`` writes nothing.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from kio.schema.errors import ErrorCode

from metadata.cluster_records import ClientQuotaRecord
from storage.metadata.record_codec import MetadataRecord

USER: Final = "user"
CLIENT_ID: Final = "client-id"
IP: Final = "ip"
ENTITY_TYPES: Final = (USER, CLIENT_ID, IP)

PRODUCER_BYTE_RATE: Final = "producer_byte_rate"
CONSUMER_BYTE_RATE: Final = "consumer_byte_rate"
REQUEST_PERCENTAGE: Final = "request_percentage"
CONTROLLER_MUTATION_RATE: Final = "controller_mutation_rate"
#: The keys brokers enforce; ``True``: the value must be a whole number (Kafka's LONG keys).
ENFORCED_KEYS: Final[Mapping[str, bool]] = {
    PRODUCER_BYTE_RATE: True,
    CONSUMER_BYTE_RATE: True,
    REQUEST_PERCENTAGE: False,
    CONTROLLER_MUTATION_RATE: False,
}
_NOT_APPLIED: Final[Mapping[str, str]] = {
    "connection_creation_rate": "Fjord does not apply per-IP connection creation quotas (KIP-612); "
    "max.connection.creation.rate limits the broker",
}

#: An entity: (type, name or None for the default) pairs, sorted by type.
QuotaEntity = tuple[tuple[str, str | None], ...]

#: DescribeClientQuotas match types.
MATCH_EXACT: Final = 0
MATCH_DEFAULT: Final = 1
MATCH_ANY: Final = 2


class QuotaRequestError(ValueError):
    """A request entry or filter that cannot be served; the message is what the client sees (INVALID_REQUEST)."""


def entity_of(parts: Iterable[tuple[str, str | None]]) -> QuotaEntity:
    """The normal form of a requested entity; raises :class:`QuotaRequestError` for an invalid one."""
    listed = list(parts)
    if not listed:
        raise QuotaRequestError("Invalid empty client quota entity")
    types = [t for t, _ in listed]
    for entity_type in types:
        if entity_type not in ENTITY_TYPES:
            raise QuotaRequestError(f"Unhandled client quota entity type: {entity_type}")
    if len(set(types)) != len(types):
        raise QuotaRequestError(f"Duplicate entity type in client quota entity: {sorted(types)}")
    if IP in types and len(types) > 1:
        raise QuotaRequestError(
            "Invalid quota entity combination, IP entity should not be combined with User or ClientId"
        )
    return tuple(sorted(listed))


def describe_entity(entity: QuotaEntity) -> str:
    """Kafka's spelling of an entity for logs and messages: ``user=alice, client-id=<default>``."""
    return ", ".join(f"{t}={'<default>' if n is None else n}" for t, n in entity)


def _check_value(key: str, value: float) -> None:
    reason = _NOT_APPLIED.get(key)
    if reason is not None:
        raise QuotaRequestError(f"Quota key {key} is not supported: {reason}")
    whole = ENFORCED_KEYS.get(key)
    if whole is None:
        raise QuotaRequestError(f"Invalid configuration key {key}")
    if not math.isfinite(value) or value <= 0:
        raise QuotaRequestError(f"Quota {key} must be a finite number greater than 0, not {value}")
    if whole and value != int(value):
        raise QuotaRequestError(f"Configuration {key} must be a Long value")


@dataclass(frozen=True, slots=True)
class QuotaAlteration:
    """One AlterClientQuotas entry: for each key, the value to set, or None to remove it. ``entity`` is as the
    client sent it (checked by :func:`plan_alter_client_quotas`)."""

    entity: tuple[tuple[str, str | None], ...]
    ops: tuple[tuple[str, float | None], ...]


@dataclass(frozen=True, slots=True)
class QuotaAlterResult:
    """One entry's answer to AlterClientQuotas, with the entity as the client sent it."""

    entity: tuple[tuple[str, str | None], ...]
    error: ErrorCode = ErrorCode.none
    message: str | None = None


@dataclass(frozen=True, slots=True)
class QuotaAlterPlan:
    records: list[MetadataRecord]
    results: list[QuotaAlterResult]


def _entry_records(
    current: Mapping[QuotaEntity, Mapping[str, float]], alteration: QuotaAlteration
) -> list[MetadataRecord]:
    entity = entity_of(alteration.entity)
    keys = [key for key, _ in alteration.ops]
    if len(set(keys)) != len(keys):
        raise QuotaRequestError(f"Duplicate quota key in the alteration of {describe_entity(entity)}: {sorted(keys)}")
    existing = current.get(entity, {})
    records: list[MetadataRecord] = []
    for key, value in alteration.ops:
        if value is None:
            if key not in ENFORCED_KEYS and key not in _NOT_APPLIED:
                raise QuotaRequestError(f"Invalid configuration key {key}")
            if key in existing:
                records.append(ClientQuotaRecord(entity, key, 0.0, remove=True))
        else:
            _check_value(key, value)
            records.append(ClientQuotaRecord(entity, key, float(value)))
    return records


def plan_alter_client_quotas(
    current: Mapping[QuotaEntity, Mapping[str, float]], alterations: Sequence[QuotaAlteration]
) -> QuotaAlterPlan:
    """The records (all entries' valid changes) and one result per entry, in order."""
    records: list[MetadataRecord] = []
    results: list[QuotaAlterResult] = []
    for alteration in alterations:
        try:
            records.extend(_entry_records(current, alteration))
        except QuotaRequestError as exc:
            results.append(QuotaAlterResult(alteration.entity, ErrorCode.invalid_request, str(exc)))
        else:
            results.append(QuotaAlterResult(alteration.entity))
    return QuotaAlterPlan(records, results)


# ------------------------------------------------------------------------------------- DescribeClientQuotas


@dataclass(frozen=True, slots=True)
class QuotaFilter:
    """A DescribeClientQuotas filter: per entity type, an exact name (None: the default entity) or any name;
    ``strict``: the entity has no other types. Matching is KRaft's (ClientQuotasImage): ``any`` matches every
    entity with that type, its default included."""

    exact: Mapping[str, str | None]
    any_of: frozenset[str]
    strict: bool

    def matches(self, entity: QuotaEntity) -> bool:
        parts = dict(entity)
        if self.strict and len(parts) != len(self.exact) + len(self.any_of):
            return False
        if any(t not in parts or parts[t] != name for t, name in self.exact.items()):
            return False
        return all(t in parts for t in self.any_of)


def quota_filter(components: Iterable[tuple[str, int, str | None]], strict: bool) -> QuotaFilter:
    """The filter of (entity type, match type, match) components; raises :class:`QuotaRequestError`."""
    exact: dict[str, str | None] = {}
    any_of: set[str] = set()
    for entity_type, match_type, match in components:
        if entity_type in exact or entity_type in any_of:
            raise QuotaRequestError(f"Duplicate {entity_type} filter component entity type")
        if entity_type not in ENTITY_TYPES:
            raise QuotaRequestError(f"Unhandled client quota entity type: {entity_type}")
        if match_type == MATCH_EXACT:
            if match is None:
                raise QuotaRequestError(f"Exact match filter component for {entity_type} has no name")
            exact[entity_type] = match
        elif match_type == MATCH_DEFAULT:
            if match is not None:
                raise QuotaRequestError(f"Default match filter component for {entity_type} has a name")
            exact[entity_type] = None
        elif match_type == MATCH_ANY:
            if match is not None:
                raise QuotaRequestError(f"Any match filter component for {entity_type} has a name")
            any_of.add(entity_type)
        else:
            raise QuotaRequestError(f"Unknown match type {match_type} for entity type {entity_type}")
    types = set(exact) | any_of
    if IP in types and len(types) > 1:
        raise QuotaRequestError(
            "Invalid entity filter component combination, IP filter component should not be "
            "used with User or ClientId filter component"
        )
    return QuotaFilter(exact, frozenset(any_of), strict)
