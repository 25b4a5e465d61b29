"""Client quotas as metadata (KIP-546): quota entities, the keys Fjord applies, and the controller's decisions on
AlterClientQuotas and the broker's matching of DescribeClientQuotas filters, sans-I/O.

A quota *entity* is a set of (entity type, name) pairs: ``user`` and/or ``client-id`` (a None name is the type's
default entity, ``<default>`` in Kafka's tools), or ``ip``. It is kept as a tuple sorted by type, so an entity has
one spelling whatever order a request listed its parts in. Each entity maps quota keys to values
(``MetadataImage.client_quotas``), replicated as ``ClientQuotaRecord``s.

Keys, as Kafka's ClientQuotaControlManager takes them by entity type: a ``user`` and/or ``client-id`` entity takes
``producer_byte_rate`` and ``consumer_byte_rate`` (bytes/s, whole numbers), ``request_percentage`` (% of one
request thread per quota window) and ``controller_mutation_rate`` (partitions created or deleted per second,
KIP-599), which the brokers enforce (``broker.quotas``); an ``ip`` entity takes ``connection_creation_rate`` alone,
and any other key is ``Invalid configuration key``. Fjord refuses ``connection_creation_rate`` all the same, with
INVALID_REQUEST naming the key: it does not apply it, and storing a limit nothing enforces would mislead an operator.
Kafka's rules otherwise: each entry is decided on its own, a removal is not validated (removing a key that is not
set is a success that writes nothing), setting a key to the value it has writes nothing, ``validate_only`` writes
nothing.
"""

from __future__ import annotations

import ipaddress
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
CONNECTION_CREATION_RATE: Final = "connection_creation_rate"
#: The largest whole value of Kafka's INT and LONG quota keys (ConfigDef.Type), by the key's type.
_INT_MAX: Final = 2**31 - 1
_LONG_MAX: Final = 2**63 - 1
#: The keys of a user and/or client-id entity (Kafka's QuotaConfig.userAndClientQuotaConfigs), all enforced by the
#: brokers, with the largest whole value a key takes (None: a DOUBLE, fractions allowed).
ENFORCED_KEYS: Final[Mapping[str, int | None]] = {
    PRODUCER_BYTE_RATE: _LONG_MAX,
    CONSUMER_BYTE_RATE: _LONG_MAX,
    REQUEST_PERCENTAGE: None,
    CONTROLLER_MUTATION_RATE: None,
}
#: The keys of an ip entity (QuotaConfig.ipConfigs): an INT.
_IP_KEYS: Final[Mapping[str, int | None]] = {CONNECTION_CREATION_RATE: _INT_MAX}
_NOT_APPLIED: Final[Mapping[str, str]] = {
    CONNECTION_CREATION_RATE: "Fjord does not apply per-IP connection creation quotas (KIP-612); "
    "max.connection.creation.rate limits the broker",
}

#: An entity: (type, name or None for the default) pairs, sorted by type.
QuotaEntity = tuple[tuple[str, str | None], ...]

#: DescribeClientQuotas match types.
MATCH_EXACT: Final = 0
MATCH_DEFAULT: Final = 1
MATCH_ANY: Final = 2


class QuotaRequestError(ValueError):
    """A request entry or filter that cannot be served; the message is what the client sees, with ``code``."""

    code: ErrorCode = ErrorCode.invalid_request


class UnsupportedEntityType(QuotaRequestError):
    """A DescribeClientQuotas filter naming an entity type Kafka does not know: UNSUPPORTED_VERSION, as
    ClientQuotasImage.describe throws it (a type a later version might add)."""

    code = ErrorCode.unsupported_version


def entity_of(parts: Iterable[tuple[str, str | None]]) -> QuotaEntity:
    """The normal form of a requested entity; raises :class:`QuotaRequestError` for an invalid one, with Kafka's
    message (ClientQuotaControlManager.validateEntity, then configKeysForEntityType)."""
    listed = list(parts)
    if not listed:
        raise QuotaRequestError("Invalid empty client quota entity")
    types = [t for t, _ in listed]
    for entity_type, name in listed:
        if entity_type not in ENTITY_TYPES:
            raise QuotaRequestError(f"Unhandled client quota entity type: {entity_type}")
        if name == "":  # None is the type's default entity; an empty name is no entity at all
            raise QuotaRequestError(f"Empty {entity_type} not supported")
    if len(set(types)) != len(types):
        raise QuotaRequestError(f"Duplicate entity type in client quota entity: {sorted(types)}")
    if IP in types:
        if len(types) > 1:
            raise QuotaRequestError(
                "Invalid quota entity combination, IP entity should not be combined with User or ClientId"
            )
        ip = listed[0][1]
        if ip is not None and not _is_ip(ip):
            raise QuotaRequestError(f"{ip} is not a valid IP or resolvable host.")
    return tuple(sorted(listed))


def _is_ip(name: str) -> bool:
    """Whether ``name`` is an IP address. Kafka's isValidIpEntity also takes a host name that resolves
    (InetAddress.getByName); this decision is sans-I/O and runs on the controller's one event loop, where a DNS
    lookup would be an unbounded blocking call, and a name's address may change after it is checked. So a name that
    is not an IP literal is refused, with Kafka's message, and the operator names the address."""
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def describe_entity(entity: QuotaEntity) -> str:
    """Kafka's spelling of an entity for logs and messages: ``user=alice, client-id=<default>``."""
    return ", ".join(f"{t}={'<default>' if n is None else n}" for t, n in entity)


def _check_value(entity: QuotaEntity, key: str, value: float) -> None:
    """Kafka's validateQuotaKeyValue over the keys of the entity's type, then Fjord's refusal of a key it does not
    apply."""
    keys = _IP_KEYS if IP in dict(entity) else ENFORCED_KEYS
    if key not in keys:
        raise QuotaRequestError(f"Invalid configuration key {key}")
    if not value > 0:
        raise QuotaRequestError(f"Quota {key} must be greater than 0")
    largest = keys[key]
    if largest is not None:
        if value > float(largest):  # as Java compares a double with the type's MAX_VALUE
            kind = "an INT" if largest == _INT_MAX else "a LONG"
            raise QuotaRequestError(f"Proposed value for {key} is too large for {kind}.")
        if abs(math.fmod(value, 1.0)) > 1e-6:
            raise QuotaRequestError(f"{key} cannot be a fractional value.")
    # Kafka takes an infinite DOUBLE; Fjord refuses it, as the brokers' rate arithmetic has no use for it.
    if not math.isfinite(value):
        raise QuotaRequestError(f"Quota {key} must be a finite number greater than 0, not {value}")
    reason = _NOT_APPLIED.get(key)
    if reason is not None:
        raise QuotaRequestError(f"Quota key {key} is not supported: {reason}")


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
            if key in existing:
                records.append(ClientQuotaRecord(entity, key, 0.0, remove=True))
        else:
            _check_value(entity, key, value)
            if existing.get(key) != value:
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
    """The filter of (entity type, match type, match) components; raises :class:`QuotaRequestError` with Kafka's
    code and message (ClientQuotasImage.describe)."""
    exact: dict[str, str | None] = {}
    any_of: set[str] = set()
    for entity_type, match_type, match in components:
        if not entity_type:
            raise QuotaRequestError("Invalid empty entity type.")
        if entity_type in exact or entity_type in any_of:
            raise QuotaRequestError(f"Entity type {entity_type} cannot appear more than once in the filter.")
        if entity_type not in ENTITY_TYPES:
            raise UnsupportedEntityType(f"Unsupported entity type {entity_type}")
        if match_type == MATCH_EXACT:
            if match is None:
                raise QuotaRequestError("Request specified MATCH_TYPE_EXACT, but set match string to null.")
            exact[entity_type] = match
        elif match_type == MATCH_DEFAULT:
            if match is not None:
                raise QuotaRequestError("Request specified MATCH_TYPE_DEFAULT, but also specified a match string.")
            exact[entity_type] = None
        elif match_type == MATCH_ANY:
            if match is not None:
                raise QuotaRequestError("Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.")
            any_of.add(entity_type)
        else:
            raise QuotaRequestError(f"Unknown match type {match_type}")
    types = set(exact) | any_of
    if IP in types and len(types) > 1:
        raise QuotaRequestError(
            "Invalid entity filter component combination. IP filter component should not be used with user or "
            "clientId filter component."
        )
    return QuotaFilter(exact, frozenset(any_of), strict)
