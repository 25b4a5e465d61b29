"""The dispatcher's side of client quotas: per request, what to charge and how the answer is throttled.

:meth:`QuotaEnforcer.charge` returns None when the image holds no quota at all (the common case costs one
lookup), else a :class:`RequestCharge` that the dispatcher runs the request through:

- ``admit``: a Produce is charged its request size before it is handled (Kafka's count); a Fetch's ``max_bytes``
  is capped at what the quota allows over ``quota.window.num - 1`` windows (Kafka's cap), so one response cannot
  be many seconds' worth of quota;
- ``timed``: the handler's own event-loop time, charged to ``request_percentage`` (``busy_time``);
- ``mutations``: CreateTopics, DeleteTopics and CreatePartitions take the request's controller mutation quota
  (``mutations``) to the admin code that charges it per topic;
- ``respond``: a Fetch is charged its response size; the longest throttle of the request's quotas goes into the
  response's ``throttle_time_ms`` and the connection is muted for that long (KIP-219: answer at once, then read
  nothing more from the client until the time has passed).

Fjord departs from Kafka in one way: a Fetch that goes over its quota is answered with its data (and the throttle),
where Kafka sends an empty response; the mute holds the client back just the same, and no fetch-session state is
thrown away. ApiVersions, the SASL requests and WriteTxnMarkers are never charged to ``request_percentage``, as in
Kafka.
"""

from __future__ import annotations

import dataclasses
import datetime
import struct
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, Final

from kio.static.primitive import i32Timedelta

from broker.quotas.busy_time import BusyTime, timed
from broker.quotas.manager import ClientQuotas, QuotaType, QuotaWindows
from broker.quotas.mutations import RequestMutations
from broker.quotas.resolution import ResolvedQuota, resolve
from metadata.client_quotas import QuotaEntity
from wire import codec, schema
from wire.api_versions import PRE_AUTHENTICATION_KEYS, WRITE_TXN_MARKERS_KEY
from wire.dispatch import Peer, Response

_PRODUCE: Final = 0
_FETCH: Final = 1
_SHARE_FETCH: Final = 78
#: The reads charged to consumer_byte_rate by their response's size, their max_bytes capped by it (Kafka's
#: handleFetchRequest and handleShareFetchRequest alike).
_READS: Final = frozenset({_FETCH, _SHARE_FETCH})
#: Never charged to request_percentage, as Kafka exempts them: a client must be able to connect and authenticate
#: (SaslHandshake, ApiVersions, SaslAuthenticate), and a broker's own WriteTxnMarkers are cluster actions.
_EXEMPT: Final = PRE_AUTHENTICATION_KEYS | {WRITE_TXN_MARKERS_KEY}
_PERCENT: Final = 100.0
_THROTTLE = struct.Struct(">i")  # throttle_time_ms, an int32 in every response that has it


def quota_user(principal: str) -> str:
    """The ``user`` entity name of a principal: ``User:alice`` -> ``alice`` (``ANONYMOUS`` unauthenticated)."""
    kind, colon, name = principal.partition(":")
    return name if colon and kind == "User" else principal


class QuotaEnforcer:
    """One per broker: the rates of every client with a quota (``manager``), the image's quotas read per request."""

    def __init__(
        self,
        quotas_of: Callable[[], Mapping[QuotaEntity, Mapping[str, float]]],
        windows_of: Callable[[], QuotaWindows],
        on_throttle: Callable[[QuotaType, str, float], None] | None = None,
    ) -> None:
        self._quotas_of = quotas_of
        self._windows_of = windows_of
        self._on_throttle = on_throttle
        self._manager: ClientQuotas | None = None

    def charge(self, api_key: int, principal: str, client_id: str | None) -> RequestCharge | None:
        quotas = self._quotas_of()
        if not quotas:
            return None
        if self._manager is None:
            self._manager = ClientQuotas(self._windows_of(), self._on_throttle)
        return RequestCharge(self._manager, quotas, api_key, quota_user(principal), client_id or "")


class RequestCharge:
    """One request's use of its quotas, from admission to the encoded response."""

    def __init__(
        self,
        manager: ClientQuotas,
        quotas: Mapping[QuotaEntity, Mapping[str, float]],
        api_key: int,
        user: str,
        client_id: str,
    ) -> None:
        self._manager = manager
        self._quotas = quotas
        self._api_key = api_key
        self._user = user
        self._client_id = client_id
        self._throttle = 0.0
        self._busy: BusyTime | None = None
        self._mutations: RequestMutations | None = None
        # Each quota this request can be charged to, resolved once here (None: the client has none of that kind).
        self._request = (
            None if api_key in _EXEMPT else resolve(quotas, QuotaType.REQUEST.value, user, client_id)
        )
        self._bytes: ResolvedQuota | None = None
        if api_key == _PRODUCE:
            self._bytes = resolve(quotas, QuotaType.PRODUCE.value, user, client_id)
        elif api_key in _READS:
            self._bytes = resolve(quotas, QuotaType.FETCH.value, user, client_id)

    def _record(self, resolved: ResolvedQuota | None, kind: QuotaType, value: float) -> None:
        if resolved is None:
            return
        throttle = self._manager.record_resolved(
            resolved, kind, user=self._user, client_id=self._client_id, value=value, now=time.monotonic()
        )
        self._throttle = max(self._throttle, throttle)

    def admit(self, body: Any, frame_bytes: int) -> Any:
        """The request to handle: charged (Produce) or capped (Fetch, ShareFetch)."""
        if self._api_key == _PRODUCE:
            self._record(self._bytes, QuotaType.PRODUCE, frame_bytes)
            if getattr(body, "acks", -1) == 0:
                # As Kafka: an acks=0 produce gets no answer to carry a request-time throttle, so it is not charged
                # to request_percentage; its bytes (above) may still mute the connection.
                self._request = None
        elif self._api_key in _READS:
            resolved = self._bytes
            if resolved is not None and schema.has_field(type(body), "max_bytes"):
                windows = self._manager.windows
                cap = max(1, int(resolved.limit * max(1, windows.samples - 1) * windows.window_s))
                if body.max_bytes > cap:
                    body = dataclasses.replace(body, max_bytes=cap)
        return body

    def mutations(self, strict: bool) -> RequestMutations | None:
        """The request's controller mutation quota, strict or permissive as its version asks (None: unlimited);
        its throttle goes into the response."""
        resolved = resolve(self._quotas, QuotaType.CONTROLLER_MUTATION.value, self._user, self._client_id)
        if resolved is None:
            return None
        self._mutations = RequestMutations(
            self._manager, resolved, user=self._user, client_id=self._client_id, strict=strict
        )
        return self._mutations

    async def timed(self, handling: Coroutine[Any, Any, Any]) -> Any:
        """Awaits the handler, timing its own steps when the client has a ``request_percentage`` quota."""
        if self._request is None:
            return await handling
        self._busy = BusyTime()
        return await timed(handling, self._busy)

    def respond(self, correlation_id: int, response: Any, peer: Peer) -> Response | None:
        """The encoded response, carrying the throttle time; the connection is muted when there is one.

        Encoded once: a Fetch is charged its encoded size, so its throttle time is written over the encoded
        field; any other response is charged before it is encoded, with the throttle time already in it."""
        if self._busy is not None:
            self._record(self._request, QuotaType.REQUEST, self._busy.seconds * _PERCENT)
        if self._mutations is not None:
            self._throttle = max(self._throttle, self._mutations.throttle_s())
        if self._api_key in _READS:
            parts = None if response is None else codec.encode_response_parts(correlation_id, response)
            if parts is not None:
                self._record(self._bytes, QuotaType.FETCH, sum(len(p) for p in parts))
            throttle_ms = self._throttle_ms()
            if throttle_ms and parts is not None and schema.has_field(type(response), "throttle_time"):
                parts[1] = _with_throttle(parts[1], _throttle_offset(type(response)), throttle_ms)
        else:
            throttle_ms = self._throttle_ms()
            if throttle_ms and response is not None and schema.has_field(type(response), "throttle_time"):
                response = dataclasses.replace(
                    response, throttle_time=i32Timedelta.parse(datetime.timedelta(milliseconds=throttle_ms))
                )
            parts = None if response is None else codec.encode_response_parts(correlation_id, response)
        if throttle_ms and peer.mute is not None:
            peer.mute(throttle_ms / 1000)
        return parts

    def _throttle_ms(self) -> int:
        """The request's throttle in whole milliseconds, at least 1 when there is one (0: none)."""
        return max(1, round(self._throttle * 1000)) if self._throttle > 0 else 0


_header_sizes: dict[type[Any], int] = {}


def _throttle_offset(response_cls: type[Any]) -> int:
    """Where throttle_time_ms starts in the first buffer after the length prefix of an encoded response: right after
    the response header, as it is the first field of every Fetch version that has it (v1 on) and of ShareFetch."""
    header_cls = response_cls.__header_schema__
    size = _header_sizes.get(header_cls)
    if size is None:
        size = _header_sizes[header_cls] = len(codec.encode_entity(header_cls(correlation_id=0)))
    return size


def _with_throttle(head: bytes, offset: int, throttle_ms: int) -> bytes:
    """``head`` (the header and the fields before the first record set, a few bytes) with the throttle written."""
    out = bytearray(head)
    _THROTTLE.pack_into(out, offset, throttle_ms)
    return bytes(out)
