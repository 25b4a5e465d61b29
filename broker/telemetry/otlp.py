"""The OTLP metrics a client pushes (KIP-714: an OpenTelemetry ``MetricsData`` protobuf message), decoded into the
points the broker exports, sans-I/O.

Only the handful of OTLP messages a client's metrics use are read (``MetricsData`` → ``ResourceMetrics`` →
``ScopeMetrics`` → ``Metric`` with a ``Gauge``, ``Sum`` or ``Histogram`` of data points), straight from the protobuf
wire format: a decoder of a few dozen lines is easier to bound against hostile input than generated code, and needs
no dependency. Unknown fields are skipped, as protobuf requires; anything malformed (a truncated varint or length,
a group wire type, a name that is not UTF-8) raises :class:`OtlpError`, which the broker answers with
INVALID_RECORD, as Kafka answers a payload its exporter cannot read; a payload over one of the bounds below raises
:class:`OtlpTooLarge`, answered TELEMETRY_TOO_LARGE as Kafka (4.3.1+, KAFKA-21076) answers a payload that
decompresses past its bound: the Java client gives up pushing for good on INVALID_RECORD, but retries at its next
interval on TELEMETRY_TOO_LARGE. A histogram becomes its ``_count`` and ``_sum``.

The payload is decompressed with the record batches' codecs (``wire.compression``), never beyond a bound, so a small
compressed push cannot inflate into a large one, and a push holds at most :data:`MAX_POINTS` points and
:data:`MAX_FIELDS` protobuf fields, which bounds the time reading one takes (the broker reads it off its event loop).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

from wire.compression import Compression, CompressionError, DecompressedTooLarge, decompress_bounded

#: The most data points one push may carry: more is refused as TELEMETRY_TOO_LARGE (the exported series are bounded
#: separately, per client; this bounds the work of one request).
MAX_POINTS = 10_000

#: The most protobuf fields one push may hold, however small (a payload of tiny fields costs the most to walk):
#: enough for :data:`MAX_POINTS` points with a few attributes each, and a bound on the time one push takes to read.
MAX_FIELDS = 250_000

#: OTLP's AggregationTemporality.DELTA: a Sum point holding the change since the previous push.
TEMPORALITY_DELTA = 1

_VARINT, _FIXED64, _LEN, _FIXED32 = 0, 1, 2, 5


class OtlpError(ValueError):
    """The payload is not an OTLP metrics message the broker can read."""


class OtlpTooLarge(OtlpError):
    """The payload exceeds a bound on what one push may hold (decompressed size, points, fields), however well
    formed it may be."""


@dataclass(frozen=True, slots=True)
class MetricPoint:
    """One data point: the metric's name, the point's attributes (as key/value text), its value, and whether it is a
    delta to add to the previous value (a Sum with delta temporality) rather than the value itself."""

    name: str
    attributes: tuple[tuple[str, str], ...]
    value: float
    delta: bool


def _varint(buf: memoryview, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise OtlpError("truncated or overlong varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result & 0xFFFFFFFFFFFFFFFF, pos
        shift += 7


class _Budget:
    """The fields a decode may still walk (:data:`MAX_FIELDS`), counted across every message of one payload."""

    def __init__(self) -> None:
        self.remaining = MAX_FIELDS


def _fields(budget: _Budget, buf: memoryview) -> Iterator[tuple[int, int, int | memoryview]]:
    """(field number, wire type, value): an int for varint and fixed fields (fixed ones as raw unsigned bits), a
    view of the bytes for length-delimited ones."""
    pos = 0
    while pos < len(buf):
        budget.remaining -= 1
        if budget.remaining < 0:
            raise OtlpTooLarge(f"more than {MAX_FIELDS} protobuf fields in one push")
        key, pos = _varint(buf, pos)
        number, wire_type = key >> 3, key & 7
        if number == 0:
            raise OtlpError("field number 0")
        value: int | memoryview
        if wire_type == _VARINT:
            value, pos = _varint(buf, pos)
        elif wire_type == _FIXED64:
            if pos + 8 > len(buf):
                raise OtlpError("truncated fixed64")
            value = int.from_bytes(buf[pos : pos + 8], "little")
            pos += 8
        elif wire_type == _LEN:
            size, pos = _varint(buf, pos)
            if pos + size > len(buf):
                raise OtlpError("truncated length-delimited field")
            value = buf[pos : pos + size]
            pos += size
        elif wire_type == _FIXED32:
            if pos + 4 > len(buf):
                raise OtlpError("truncated fixed32")
            value = int.from_bytes(buf[pos : pos + 4], "little")
            pos += 4
        else:
            raise OtlpError(f"unsupported wire type {wire_type}")
        yield number, wire_type, value


def _submessages(budget: _Budget, buf: memoryview, number: int) -> Iterator[memoryview]:
    for field, wire_type, value in _fields(budget, buf):
        if field == number:
            if wire_type != _LEN or not isinstance(value, memoryview):
                raise OtlpError(f"field {number} is not a message")
            yield value


def _text(value: int | memoryview) -> str:
    if not isinstance(value, memoryview):
        raise OtlpError("a string field is not length-delimited")
    try:
        return bytes(value).decode("utf-8")
    except UnicodeDecodeError:
        raise OtlpError("a string field is not UTF-8") from None


def _double(bits: int) -> float:
    return float(struct.unpack("<d", bits.to_bytes(8, "little"))[0])


def _signed64(bits: int) -> int:
    return bits - (1 << 64) if bits >= 1 << 63 else bits


def _any_value(budget: _Budget, buf: memoryview) -> str:
    """An attribute's AnyValue as text (strings, booleans and numbers; arrays, maps and bytes as a placeholder)."""
    for field, wire_type, value in _fields(budget, buf):
        if field == 1:
            return _text(value)
        if field == 2 and isinstance(value, int):
            return "true" if value else "false"
        if field == 3 and isinstance(value, int):
            return str(_signed64(value))
        if field == 4 and wire_type == _FIXED64 and isinstance(value, int):
            return repr(_double(value))
        if field in (5, 6, 7):
            return "<complex>"
    return ""


def _attributes(budget: _Budget, point: memoryview, number: int) -> tuple[tuple[str, str], ...]:
    pairs = []
    for key_value in _submessages(budget, point, number):
        key = ""
        text = ""
        for field, _wire_type, value in _fields(budget, key_value):
            if field == 1:
                key = _text(value)
            elif field == 2 and isinstance(value, memoryview):
                text = _any_value(budget, value)
        pairs.append((key, text))
    return tuple(sorted(pairs))


def _number_point(budget: _Budget, name: str, point: memoryview, delta: bool) -> MetricPoint:
    value = 0.0
    for field, wire_type, raw in _fields(budget, point):
        if field == 4 and wire_type == _FIXED64 and isinstance(raw, int):
            value = _double(raw)
        elif field == 6 and wire_type == _FIXED64 and isinstance(raw, int):
            value = float(_signed64(raw))
    return MetricPoint(name, _attributes(budget, point, 7), value, delta)


def _histogram_points(budget: _Budget, name: str, point: memoryview, delta: bool) -> list[MetricPoint]:
    count = 0.0
    total = 0.0
    for field, wire_type, raw in _fields(budget, point):
        if field == 4 and wire_type == _FIXED64 and isinstance(raw, int):
            count = float(raw)
        elif field == 5 and wire_type == _FIXED64 and isinstance(raw, int):
            total = _double(raw)
    attributes = _attributes(budget, point, 9)
    return [
        MetricPoint(f"{name}_count", attributes, count, delta),
        MetricPoint(f"{name}_sum", attributes, total, delta),
    ]


def _temporality(budget: _Budget, data: memoryview) -> int:
    for field, wire_type, value in _fields(budget, data):
        if field == 2 and wire_type == _VARINT and isinstance(value, int):
            return value
    return 0


def _metric_points(budget: _Budget, metric: memoryview) -> list[MetricPoint]:
    name = ""
    points: list[MetricPoint] = []
    bodies: list[tuple[int, memoryview]] = []
    for field, _wire_type, value in _fields(budget, metric):
        if field == 1:
            name = _text(value)
        elif field in (5, 7, 9) and isinstance(value, memoryview):
            bodies.append((field, value))
    for kind, body in bodies:
        delta = kind != 5 and _temporality(budget, body) == TEMPORALITY_DELTA
        for point in _submessages(budget, body, 1):
            if kind == 9:
                points.extend(_histogram_points(budget, name, point, delta))
            else:
                points.append(_number_point(budget, name, point, delta))
    return points


def decode_metrics(payload: bytes) -> list[MetricPoint]:
    """Every data point of an uncompressed OTLP ``MetricsData`` message; OtlpError when it is malformed or holds
    more than :data:`MAX_POINTS` points."""
    points: list[MetricPoint] = []
    buf = memoryview(payload)
    budget = _Budget()
    for resource_metrics in _submessages(budget, buf, 1):
        for scope_metrics in _submessages(budget, resource_metrics, 2):
            for metric in _submessages(budget, scope_metrics, 2):
                points.extend(_metric_points(budget, metric))
                if len(points) > MAX_POINTS:
                    raise OtlpTooLarge(f"more than {MAX_POINTS} data points in one push")
    return points


def read_push(compression: Compression, payload: bytes, max_uncompressed: int) -> list[MetricPoint]:
    """The points of a push's payload, decompressed with its codec up to ``max_uncompressed`` bytes; OtlpTooLarge
    when it exceeds a bound, OtlpError when it does not decompress or does not decode."""
    try:
        raw = decompress_bounded(compression, payload, max_uncompressed)
    except DecompressedTooLarge as exc:
        raise OtlpTooLarge(str(exc)) from None
    except CompressionError as exc:
        raise OtlpError(str(exc)) from None
    return decode_metrics(raw)
