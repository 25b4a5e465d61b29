"""THE mapping from exceptions to Kafka error codes, and the controller's own refusals (:class:`ControllerError`,
:class:`NotControllerError`, :class:`NodeFencedError`).

Every handler, the broker's and the controller's alike, turns failures into protocol errors through
``error_code_for`` so the same storage, controller or broker failure is reported with the same code everywhere. It
lives here, not in ``wire``, because it knows storage's exceptions (``wire`` knows nothing of ours).
"""

from __future__ import annotations

import asyncio
import logging

from kio.schema.errors import ErrorCode

from storage import errors as storage_errors
from storage.config import ConfigError
from wire.errors import KafkaError

logger = logging.getLogger(__name__)


class ControllerError(KafkaError):
    """A request the controller refuses; carries the Kafka error code the broker answers with.

    A :class:`~wire.errors.KafkaError`, so :func:`error_code_for` reports its code like any other. It lives here,
    next to that mapping, so that the pure decision modules (``controller.decisions.topics``,
    ``controller.decisions.brokers``, ...), the controller that runs them and the clients that report its refusals all
    share it without importing each other.
    """

    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(error, message)

    @property
    def error(self) -> ErrorCode:
        """The code under the name the controller's results use (``CreateTopicResult.error`` and the like)."""
        return self.code


class NotControllerError(storage_errors.StorageError):
    """The node asked is not the active controller (or lost leadership before the write committed).

    A StorageError so the storage engine treats it like any failed metadata call and retries; ``leader_id`` is
    where to retry, None when no leader is known yet.
    """

    def __init__(self, message: str, leader_id: int | None = None) -> None:
        super().__init__(message)
        self.leader_id = leader_id


class NodeFencedError(storage_errors.NodeEpochExpiredError):
    """The caller's node is fenced (missed its session timeout) or its epoch is not its current registration."""


_STORAGE_CODES: tuple[tuple[type[BaseException], ErrorCode], ...] = (
    (storage_errors.OffsetOutOfRangeError, ErrorCode.offset_out_of_range),
    (storage_errors.StreamFencedError, ErrorCode.not_leader_or_follower),
    (storage_errors.NodeEpochExpiredError, ErrorCode.not_leader_or_follower),
    (storage_errors.StreamNotOpenedError, ErrorCode.not_leader_or_follower),
    (storage_errors.StreamNotClosedError, ErrorCode.not_leader_or_follower),
    (storage_errors.WALFencedError, ErrorCode.not_leader_or_follower),
    (storage_errors.CorruptObjectError, ErrorCode.kafka_storage_error),
    (storage_errors.StorageError, ErrorCode.kafka_storage_error),
)


def error_code_for(exc: BaseException) -> ErrorCode:
    """The Kafka error code for any exception; unknown exceptions are UNKNOWN_SERVER_ERROR (and should be logged
    by the caller with the topic/partition they concern)."""
    if isinstance(exc, KafkaError):
        return exc.code
    # Other components' errors may carry their code as an attribute rather than subclassing KafkaError.
    code = getattr(exc, "code", None) or getattr(exc, "error_code", None) or getattr(exc, "error", None)
    if isinstance(code, ErrorCode):
        return code
    for cls, mapped in _STORAGE_CODES:
        if isinstance(exc, cls):
            return mapped
    if isinstance(exc, ConfigError):
        return ErrorCode.invalid_config
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError)):
        return ErrorCode.request_timed_out
    return ErrorCode.unknown_server_error


def error_code_logged(exc: BaseException, log: logging.Logger, failed: str, *args: object) -> ErrorCode:
    """``error_code_for(exc)``, logging the traceback (on the caller's logger, with ``failed % args`` naming the
    topic/partition or resource) when no code covers the exception: the client only sees UNKNOWN_SERVER_ERROR, so
    the broker log is the one place that says what broke."""
    code = error_code_for(exc)
    if code == ErrorCode.unknown_server_error:
        log.error(failed, *args, exc_info=exc)
    return code


def error_message_for(exc: BaseException) -> str:
    """A one-line message for response ``error_message`` fields."""
    text = str(exc)
    return text if text else type(exc).__name__
