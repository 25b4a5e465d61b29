"""The frames of Fjord's own controller RPCs (:mod:`metadata.rpc.stream_rpcs`): Kafka's framing around a JSON body,
so they share the CONTROLLER listener's connections with the Kafka-protocol RPCs and a voter tells them apart by
the API key alone (:func:`api_key_of`).

Frame of a Fjord request: Kafka request header v1 (``api_key i16 | api_version i16 | correlation_id i32 |
client_id nullable string``) then a UTF-8 JSON body: the request dataclass's fields in declaration order as a JSON
array (the metadata records' codec, ``storage.metadata.record_codec``: nested dataclasses are arrays, bytes base64,
enums their value). A newer version may only add trailing fields with defaults. Response frame: ``correlation_id
i32`` then the JSON array ``[error_code, error_message, leader_id, result]``; ``leader_id`` is the active
controller as this node knows it (-1 unknown), meaningful with ``NOT_CONTROLLER``. Error codes are
:class:`metadata.rpc.error_codes.RpcError`.
"""

from __future__ import annotations

import gc
import json
import struct
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from metadata.rpc.stream_rpcs import STREAM_API_VERSION, STREAM_REQUESTS, StreamRequest, StreamResponse
from storage.metadata.record_codec import from_json, to_json


class StreamCodecError(ValueError):
    """A Fjord RPC frame does not decode; the message says which API and what is wrong."""


_PREFIX = struct.Struct(">hhi")
_CLIENT_ID_LENGTH = struct.Struct(">h")
_CORRELATION = struct.Struct(">i")
_LENGTH = struct.Struct(">i")


def encode_stream_request(request: StreamRequest, correlation_id: int, client_id: str | None = "fjord") -> bytes:
    """A length-prefixed request frame."""
    client = client_id.encode() if client_id is not None else None
    header = _PREFIX.pack(request.API_KEY, STREAM_API_VERSION, correlation_id) + _CLIENT_ID_LENGTH.pack(
        -1 if client is None else len(client)
    ) + (client or b"")
    body = json.dumps(to_json(request), separators=(",", ":")).encode()
    return _LENGTH.pack(len(header) + len(body)) + header + body


#: The largest JSON body of a Fjord RPC request a node parses: far above any real request (a stream-set object's
#: commit of thousands of streams is a few MiB), so that parsing is bounded whatever the frame size allows.
MAX_REQUEST_BODY_BYTES: Final = 32 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class StreamRequestHeader:
    """What a request frame's header says, read before its body so that the caller's right to send this RPC can be
    checked before any of the body is parsed."""

    correlation_id: int
    request: type[StreamRequest]
    body_start: int


def read_stream_header(frame: bytes) -> StreamRequestHeader:
    """The header of a frame without its length prefix; StreamCodecError when it names no RPC this node knows."""
    if len(frame) < _PREFIX.size + _CLIENT_ID_LENGTH.size:
        raise StreamCodecError(f"Fjord RPC frame of {len(frame)} bytes is shorter than its header")
    api_key, version, correlation_id = _PREFIX.unpack_from(frame, 0)
    cls = STREAM_REQUESTS.get(api_key)
    if cls is None:
        raise StreamCodecError(f"unknown Fjord RPC api key {api_key}")
    if version > STREAM_API_VERSION:
        raise StreamCodecError(f"{cls.__name__} v{version} is newer than this node's v{STREAM_API_VERSION}")
    (client_length,) = _CLIENT_ID_LENGTH.unpack_from(frame, _PREFIX.size)
    return StreamRequestHeader(correlation_id, cls, _PREFIX.size + _CLIENT_ID_LENGTH.size + max(client_length, 0))


def decode_stream_body(header: StreamRequestHeader, frame: bytes) -> StreamRequest:
    """The request of ``frame`` whose header is ``header``. A body over :data:`MAX_REQUEST_BODY_BYTES`, or nested
    deeper than the interpreter's recursion limit (no request nests more than a few levels), is a StreamCodecError
    like any malformed body: one line for the log, never a traceback."""
    what = f"{header.request.__name__} (correlation id {header.correlation_id})"
    size = len(frame) - header.body_start
    if size > MAX_REQUEST_BODY_BYTES:
        raise StreamCodecError(f"{what} has a body of {size} bytes, over the {MAX_REQUEST_BODY_BYTES} parsed")
    try:
        request = from_json(header.request, _parse_json(frame[header.body_start :]))
    except RecursionError:
        raise StreamCodecError(f"{what} is nested too deeply to parse") from None
    except (ValueError, TypeError, KeyError, IndexError) as exc:
        raise StreamCodecError(f"{what} is malformed: {exc}") from None
    return typing.cast(StreamRequest, request)


def _parse_json(body: bytes) -> Any:
    """``json.loads`` with the cyclic garbage collector paused. The C parser goes one C level deeper per nesting
    level, up to the interpreter's recursion limit on a hostile body; a collection started by an allocation there
    would run every ``gc.callbacks`` hook (the node's metrics, any library's) at that depth, where a few Python calls
    overflow the stack. The parse holds the GIL throughout, so no other thread notices the pause."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return json.loads(body)
    finally:
        if enabled:
            gc.enable()


def decode_stream_request(
    frame: bytes, check: Callable[[type[StreamRequest], str], None] | None = None
) -> tuple[int, StreamRequest]:
    """(correlation id, request) of a frame without its length prefix. ``check(request class, what)``, when given,
    runs between the header and the body (the listener's authorization: it raises to refuse), so that nothing of
    the body of a refused request is parsed."""
    header = read_stream_header(frame)
    if check is not None:
        check(header.request, f"{header.request.__name__} (correlation id {header.correlation_id})")
    return header.correlation_id, decode_stream_body(header, frame)


def encode_stream_response(correlation_id: int, response: StreamResponse) -> bytes:
    """A length-prefixed response frame."""
    body = json.dumps(
        [response.error_code, response.error_message, response.leader_id, _encode_result(response.result)],
        separators=(",", ":"),
    ).encode()
    return _LENGTH.pack(_CORRELATION.size + len(body)) + _CORRELATION.pack(correlation_id) + body


def decode_stream_response(request_cls: type[StreamRequest], frame: bytes) -> tuple[int, StreamResponse]:
    """(correlation id, response) of a frame without its length prefix; the result typed by ``request_cls``."""
    if len(frame) < _CORRELATION.size:
        raise StreamCodecError(f"{request_cls.__name__} response of {len(frame)} bytes has no correlation id")
    (correlation_id,) = _CORRELATION.unpack_from(frame, 0)
    try:
        code, message, leader_id, raw = json.loads(frame[_CORRELATION.size :])
        result = None if raw is None or request_cls.RESULT is None else from_json(request_cls.RESULT, raw)
    except (ValueError, TypeError, KeyError, IndexError) as exc:
        raise StreamCodecError(f"{request_cls.__name__} response is malformed: {exc}") from None
    return correlation_id, StreamResponse(int(code), message, int(leader_id), result)


def _encode_result(result: Any) -> Any:
    if isinstance(result, list):
        return [to_json(item) for item in result]
    return None if result is None else to_json(result)


def api_key_of(frame: bytes) -> int:
    """The api key of a request frame (without length prefix); raises StreamCodecError when too short."""
    if len(frame) < 2:
        raise StreamCodecError(f"request frame of {len(frame)} bytes has no api key")
    return int(struct.unpack_from(">h", frame, 0)[0])
