"""The error codes of Fjord's own controller RPCs and their mapping to and from the storage errors: the voter turns
the exception a call raised into a code for the response (:func:`error_code_for`), the client turns the code back into
the same exception (:func:`raise_for_error`), so the storage engine sees the errors of an embedded quorum either way.
"""

from __future__ import annotations

import enum
from typing import Final

from metadata.errors import NodeFencedError, NotControllerError
from storage.errors import (
    CompactedObjectsNotFoundError,
    NodeEpochExpiredError,
    ObjectNotPreparedError,
    OffsetNotMatchedError,
    OffsetOutOfRangeError,
    StorageError,
    StreamError,
    StreamFencedError,
    StreamNotClosedError,
    StreamNotFoundError,
    StreamNotOpenedError,
)


class RpcError(enum.IntEnum):
    """Error codes of Fjord's own RPCs: Kafka's numbers where Kafka has the error, 1000+ for storage errors."""

    NONE = 0
    UNKNOWN = -1
    INVALID_REQUEST = 42
    NOT_CONTROLLER = 41
    STALE_BROKER_EPOCH = 77
    BROKER_ID_NOT_REGISTERED = 102
    STORAGE_ERROR = 1000
    STREAM_ERROR = 1001
    STREAM_NOT_FOUND = 1002
    STREAM_FENCED = 1003
    STREAM_NOT_CLOSED = 1004
    STREAM_NOT_OPENED = 1005
    NODE_EPOCH_EXPIRED = 1006
    NODE_FENCED = 1007
    OFFSET_NOT_MATCHED = 1008
    OFFSET_OUT_OF_RANGE = 1009
    OBJECT_NOT_PREPARED = 1010
    COMPACTED_OBJECTS_NOT_FOUND = 1011


# Most specific first: the first matching class decides the code.
_ERROR_CODES: Final[tuple[tuple[type[StorageError], RpcError], ...]] = (
    (NotControllerError, RpcError.NOT_CONTROLLER),
    (NodeFencedError, RpcError.NODE_FENCED),
    (NodeEpochExpiredError, RpcError.NODE_EPOCH_EXPIRED),
    (StreamNotFoundError, RpcError.STREAM_NOT_FOUND),
    (StreamFencedError, RpcError.STREAM_FENCED),
    (StreamNotClosedError, RpcError.STREAM_NOT_CLOSED),
    (StreamNotOpenedError, RpcError.STREAM_NOT_OPENED),
    (OffsetNotMatchedError, RpcError.OFFSET_NOT_MATCHED),
    (OffsetOutOfRangeError, RpcError.OFFSET_OUT_OF_RANGE),
    (ObjectNotPreparedError, RpcError.OBJECT_NOT_PREPARED),
    (CompactedObjectsNotFoundError, RpcError.COMPACTED_OBJECTS_NOT_FOUND),
    (StreamError, RpcError.STREAM_ERROR),
    (StorageError, RpcError.STORAGE_ERROR),
)


def error_code_for(exc: BaseException) -> RpcError:
    for cls, code in _ERROR_CODES:
        if isinstance(exc, cls):
            return code
    return RpcError.UNKNOWN


def raise_for_error(code: int, message: str | None, leader_id: int, stream_id: int = -1) -> None:
    """Raises the storage error that ``code`` stands for (nothing for NONE); ``stream_id`` names the stream of a
    STREAM_NOT_FOUND when the request had one."""
    if code == RpcError.NONE:
        return
    text = message or f"controller error {code}"
    try:
        error = RpcError(code)
    except ValueError:
        raise StorageError(f"unknown controller error code {code}: {text}") from None
    if error is RpcError.NOT_CONTROLLER:
        raise NotControllerError(text, leader_id if leader_id >= 0 else None)
    if error is RpcError.STREAM_NOT_FOUND:
        exc = StreamNotFoundError(stream_id)
        exc.args = (text,)
        raise exc
    for cls, mapped in _ERROR_CODES:
        if mapped is error and cls is not NotControllerError and cls is not StreamNotFoundError:
            raise cls(text)
    raise StorageError(text)
