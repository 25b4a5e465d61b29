"""KIP-714 client telemetry as Kafka 4.2's ``ClientMetricsManager`` decides it, sans-I/O: client instances, their
subscriptions, push intervals, and the answer (or error code) to each GetTelemetrySubscriptions and PushTelemetry.

- A client asks with the zero uuid and the broker gives it an instance id; each instance is matched against every
  client-metrics subscription (``settings.client_metrics``) once, and again after any subscription changes. The
  matching subscriptions' metric prefixes are merged (``*`` if any asks for every metric), the shortest interval
  wins (five minutes when none matches), and the subscription id is a CRC32C of both XORed with the instance id:
  it changes when the subscriptions do, and another broker computes the same one for the same instance.
- A Get earlier than the interval since the instance's last request is THROTTLING_QUOTA_EXCEEDED, unless the
  previous answer was UNKNOWN_SUBSCRIPTION_ID or UNSUPPORTED_COMPRESSION_TYPE (the client must re-subscribe at once);
  a push is accepted right after a Get (clients jitter their interval) or an interval after the previous push.
- A push is refused, in Kafka's order: INVALID_REQUEST for the zero or a reserved instance id or after a
  terminating push, THROTTLING_QUOTA_EXCEEDED too early (a terminating push never is), UNKNOWN_SUBSCRIPTION_ID,
  UNSUPPORTED_COMPRESSION_TYPE, TELEMETRY_TOO_LARGE over ``telemetry.max.bytes``; its payload is read by the caller
  (INVALID_RECORD when unreadable, TELEMETRY_TOO_LARGE past its bounds, ``broker.telemetry.otlp``).
- Instances are forgotten ``max(60 s, 3 * interval)`` after their last request, and the least recently used one
  first when 16384 are held (Kafka's bounds).

Kafka's ``validateGetRequest`` means to exempt those two errors from the Get throttle but its condition (``!= a ||
!= b``) exempts neither; Fjord exempts them, as the KIP and Kafka's comment describe: a client that must
re-subscribe is never throttled for it.
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final

import crc32c
from kio.schema.errors import ErrorCode

from settings.client_metrics import ALL_METRICS, DEFAULT_INTERVAL_MS, ClientMetricsConfigError, Subscription
from settings.client_metrics import parse_subscription as _parse
from wire.compression import Compression

#: Kafka's bounds of its client instance cache.
MAX_INSTANCES: Final = 16384
MIN_EXPIRY_MS: Final = 60_000

#: Kafka's reserved uuids (``Uuid.RESERVED``): never a client instance id.
RESERVED_IDS: Final = frozenset((uuid.UUID(int=0), uuid.UUID(int=1)))
#: The compression types a client may push with, Kafka's order (zstd, lz4, gzip, snappy).
ACCEPTED_COMPRESSION: Final = (Compression.ZSTD, Compression.LZ4, Compression.GZIP, Compression.SNAPPY)
_RESUBSCRIBE = frozenset((ErrorCode.unknown_subscription_id, ErrorCode.unsupported_compression_type))


@dataclass(frozen=True, slots=True)
class ClientAttributes:
    """What a subscription's ``match`` patterns are matched against, from the connection the request came on."""

    client_id: str
    software_name: str | None
    software_version: str | None
    source_address: str
    source_port: int

    def for_instance(self, instance_id: uuid.UUID) -> dict[str, str | None]:
        return {
            "client_instance_id": str(instance_id),
            "client_id": self.client_id,
            "client_software_name": self.software_name,
            "client_software_version": self.software_version,
            "client_source_address": self.source_address,
            "client_source_port": str(self.source_port),
        }


@dataclass(slots=True)
class ClientInstance:
    instance_id: uuid.UUID
    attributes: ClientAttributes
    subscription_id: int
    subscription_version: int
    metrics: tuple[str, ...]
    push_interval_ms: int
    last_get_ms: float | None = None
    last_push_ms: float | None = None
    terminating: bool = False
    last_error: ErrorCode = ErrorCode.none
    expires_ms: float = 0.0

    def may_get(self, now_ms: float) -> bool:
        last = max((t for t in (self.last_get_ms, self.last_push_ms) if t is not None), default=None)
        if last is None or now_ms - last >= self.push_interval_ms:
            self.last_get_ms = now_ms
            return True
        return False

    def may_push(self, now_ms: float) -> bool:
        after_get = self.last_get_ms is not None and (self.last_push_ms is None or self.last_get_ms > self.last_push_ms)
        accepted = after_get or self.last_push_ms is None or now_ms - self.last_push_ms >= self.push_interval_ms
        if accepted:
            self.last_push_ms = now_ms
        return accepted


@dataclass(frozen=True, slots=True)
class Answer:
    """A request's outcome: ``instance`` is None when it was refused before one was looked up."""

    error: ErrorCode
    message: str | None
    instance: ClientInstance | None


def subscription_id(metrics: tuple[str, ...], interval_ms: int, instance_id: uuid.UUID) -> int:
    """CRC32C of the sorted prefixes and the interval, XORed with the instance id's Java ``hashCode``: a signed
    int32, the same on every broker for the same subscriptions."""
    crc = crc32c.crc32c(f"[{', '.join(metrics)}]{interval_ms}".encode())
    bits = instance_id.int
    hilo = (bits >> 64) ^ (bits & 0xFFFFFFFFFFFFFFFF)
    java_hash = ((hilo >> 32) ^ hilo) & 0xFFFFFFFF
    value = (crc ^ java_hash) & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


@dataclass(slots=True)
class TelemetryManager:
    """One broker's client instances and subscriptions. ``max_bytes``: ``telemetry.max.bytes``."""

    max_bytes: int
    new_id: Callable[[], uuid.UUID] = uuid.uuid4
    _instances: OrderedDict[uuid.UUID, ClientInstance] = field(default_factory=OrderedDict)
    _configs: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    _subscriptions: tuple[Subscription, ...] = ()
    _version: int = 0

    def update_subscriptions(self, configs: Mapping[str, Mapping[str, str]]) -> None:
        """The subscriptions as the metadata image holds them; a change re-evaluates every instance at its next
        request."""
        if configs is self._configs or configs == self._configs:
            self._configs = configs
            return
        parsed = []
        for name, values in sorted(configs.items()):
            try:
                parsed.append(_parse(name, values))
            except (ClientMetricsConfigError, ValueError):  # validated by the controller; never trusted blindly
                continue
        self._configs = configs
        self._subscriptions = tuple(parsed)
        self._version += 1

    @property
    def subscriptions(self) -> tuple[Subscription, ...]:
        return self._subscriptions

    def __len__(self) -> int:
        return len(self._instances)

    def _evaluate(self, instance_id: uuid.UUID, attributes: ClientAttributes) -> ClientInstance:
        interval = DEFAULT_INTERVAL_MS
        metrics: set[str] = set()
        every = False
        matchable = attributes.for_instance(instance_id)
        for subscription in self._subscriptions:
            if subscription.matches(matchable):
                every = every or ALL_METRICS in subscription.metrics
                metrics.update(subscription.metrics)
                interval = min(interval, subscription.interval_ms)
        requested = (ALL_METRICS,) if every else tuple(sorted(metrics))
        return ClientInstance(instance_id, attributes, subscription_id(requested, interval, instance_id),
                              self._version, requested, interval)

    def _instance(self, instance_id: uuid.UUID, attributes: ClientAttributes, now_ms: float) -> ClientInstance:
        instance = self._instances.get(instance_id)
        if instance is None or instance.subscription_version < self._version:
            instance = self._evaluate(instance_id, attributes if instance is None else instance.attributes)
            self._instances[instance_id] = instance
        self._instances.move_to_end(instance_id)
        instance.expires_ms = now_ms + max(MIN_EXPIRY_MS, 3 * instance.push_interval_ms)
        while len(self._instances) > MAX_INSTANCES:
            self._instances.popitem(last=False)
        return instance

    def forget(self, instance_id: uuid.UUID) -> None:
        """The client is gone (its connection closed): a reconnecting client is subscribed afresh, as Kafka's."""
        self._instances.pop(instance_id, None)

    def expire(self, now_ms: float) -> list[uuid.UUID]:
        """Forgets the instances whose last request is too old; returns their ids."""
        gone = [i for i, instance in self._instances.items() if instance.expires_ms <= now_ms]
        for instance_id in gone:
            del self._instances[instance_id]
        return gone

    def get_subscriptions(
        self, instance_id: uuid.UUID | None, attributes: ClientAttributes, now_ms: float
    ) -> Answer:
        if instance_id is None or instance_id == uuid.UUID(int=0):
            instance_id = self.new_id()
            while instance_id in self._instances or instance_id in RESERVED_IDS:
                instance_id = self.new_id()
        instance = self._instance(instance_id, attributes, now_ms)
        if not instance.may_get(now_ms) and instance.last_error not in _RESUBSCRIBE:
            return Answer(ErrorCode.throttling_quota_exceeded,
                          f"Request from the client [{instance_id}] arrived before the next push interval time",
                          instance)
        instance.last_error = ErrorCode.none
        return Answer(ErrorCode.none, None, instance)

    def check_push(
        self,
        instance_id: uuid.UUID | None,
        attributes: ClientAttributes,
        *,
        subscription: int,
        terminating: bool,
        compression: int,
        size: int,
        now_ms: float,
    ) -> Answer:
        """Everything about a push but its payload, which the caller reads when the answer is no error (and then
        reports a refused one with :meth:`payload_refused`)."""
        if instance_id is None or instance_id in RESERVED_IDS:
            return Answer(ErrorCode.invalid_request,
                          f"Invalid request from the client [{instance_id}], invalid client instance id", None)
        instance = self._instance(instance_id, attributes, now_ms)
        error, message = self._refusal(instance, subscription, terminating=terminating, compression=compression,
                                       size=size, now_ms=now_ms)
        instance.terminating = terminating
        instance.last_error = error
        return Answer(error, message, instance)

    def _refusal(
        self, instance: ClientInstance, subscription: int, *, terminating: bool, compression: int, size: int,
        now_ms: float,
    ) -> tuple[ErrorCode, str | None]:
        who = instance.instance_id
        if instance.terminating:
            return ErrorCode.invalid_request, (
                f"Client [{who}] sent the previous request with state terminating to TRUE, can not accept any "
                "requests after that"
            )
        if not instance.may_push(now_ms) and not terminating:
            return ErrorCode.throttling_quota_exceeded, (
                f"Request from the client [{who}] arrived before the next push interval time"
            )
        if subscription != instance.subscription_id:
            return ErrorCode.unknown_subscription_id, f"Unknown client subscription id for the client [{who}]"
        if compression not in tuple(Compression):
            return ErrorCode.unsupported_compression_type, (
                f"Unknown compression type [{compression}] is received in telemetry request from [{who}]"
            )
        if size > self.max_bytes:
            return ErrorCode.telemetry_too_large, (
                f"Telemetry request from [{who}] is larger than the maximum allowed size [{self.max_bytes}]"
            )
        return ErrorCode.none, None

    @staticmethod
    def payload_refused(instance: ClientInstance, error: ErrorCode) -> None:
        instance.last_error = error
