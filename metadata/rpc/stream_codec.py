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

import json
import struct
import typing
from typing import Any

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


def decode_stream_request(frame: bytes) -> tuple[int, StreamRequest]:
    """(correlation id, request) of a frame without its length prefix."""
    if len(frame) < _PREFIX.size + _CLIENT_ID_LENGTH.size:
        raise StreamCodecError(f"Fjord RPC frame of {len(frame)} bytes is shorter than its header")
    api_key, version, correlation_id = _PREFIX.unpack_from(frame, 0)
    cls = STREAM_REQUESTS.get(api_key)
    if cls is None:
        raise StreamCodecError(f"unknown Fjord RPC api key {api_key}")
    if version > STREAM_API_VERSION:
        raise StreamCodecError(f"{cls.__name__} v{version} is newer than this node's v{STREAM_API_VERSION}")
    (client_length,) = _CLIENT_ID_LENGTH.unpack_from(frame, _PREFIX.size)
    start = _PREFIX.size + _CLIENT_ID_LENGTH.size + max(client_length, 0)
    try:
        body = json.loads(frame[start:])
        request = from_json(cls, body)
    except (ValueError, TypeError, KeyError, IndexError) as exc:
        raise StreamCodecError(f"{cls.__name__} (correlation id {correlation_id}) is malformed: {exc}") from None
    return correlation_id, typing.cast(StreamRequest, request)


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
