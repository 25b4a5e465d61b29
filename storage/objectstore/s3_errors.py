"""How the S3 store classifies what went wrong: which S3 answers are worth a retry, which mean "no such key", and
the closed sets of error codes and operation names its metrics are labelled with (storage/objectstore/s3.py).

Apart from the store so that the request logic stays one idea and this one can be read on its own.
"""

from __future__ import annotations

import asyncio

import aiohttp
from botocore.exceptions import (
    ClientError,
    ConnectionError,
    ConnectTimeoutError,
    HTTPClientError,
    ReadTimeoutError,
    ResponseStreamingError,
)

from storage.objectstore.base import OPERATIONS

RETRYABLE_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestLimitExceeded",
        "TooManyRequests",
        "TooManyRequestsException",
        "RequestTimeout",
        "RequestTimeoutException",
        "InternalError",
        "ServiceUnavailable",
        "OperationAborted",
        "ConditionalRequestConflict",
    }
)
NOT_FOUND_CODES = frozenset({"NoSuchKey", "NotFound", "404"})


def code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def status(exc: ClientError) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))


def retryable_client_error(exc: ClientError) -> bool:
    http = status(exc)
    return http >= 500 or http == 429 or code(exc) in RETRYABLE_CODES


RESET_ERRORS = (
    ResponseStreamingError,
    aiohttp.ClientPayloadError,
    aiohttp.ServerDisconnectedError,
    ConnectionResetError,
)

ERROR_CODES = (*sorted(RETRYABLE_CODES), "connection", "reset", "timeout", "other")
"""Every value :func:`error_code` returns (a metric label's closed set)."""


def error_code(exc: BaseException) -> str:
    """What an operator acts on: S3's error code when it answered, else what the connection did."""
    if isinstance(exc, ClientError):
        answered = code(exc)
        return answered if answered in RETRYABLE_CODES else "other"
    if isinstance(exc, TimeoutError | ConnectTimeoutError | ReadTimeoutError | asyncio.TimeoutError):
        return "timeout"
    if isinstance(exc, RESET_ERRORS):
        return "reset"
    if isinstance(exc, ConnectionError | aiohttp.ClientConnectionError | OSError | HTTPClientError):
        return "connection"
    return "other"


def operation(what: str) -> str:
    name = "upload_part" if what.startswith("upload part") else what.replace(" ", "_")
    return name if name in OPERATIONS else "other"


def describe(exc: BaseException) -> str:
    if isinstance(exc, ClientError):
        message = exc.response.get("Error", {}).get("Message", "")
        return f"HTTP {status(exc)} {code(exc)}" + (f": {message}" if message else "")
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
