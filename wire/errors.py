"""The exception that carries a Kafka error code.

Raised wherever a failure has a definite code (a handler, the group coordinator, the controller), so that
``metadata.errors.error_code_for`` reports it as that code and its message is what the client sees.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode


class KafkaError(Exception):
    """A failure with a definite Kafka error code; the message is what the client sees where a field exists."""

    code: ErrorCode = ErrorCode.unknown_server_error

    def __init__(self, code: ErrorCode | None = None, message: str | None = None) -> None:
        if code is not None:
            self.code = code
        super().__init__(message or self.code.name)

    @property
    def message(self) -> str:
        return str(self)
