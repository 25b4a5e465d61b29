"""What the transaction handlers share: Kafka's down-mapping of PRODUCER_FENCED for clients older than KIP-588."""

from __future__ import annotations

from kio.schema.errors import ErrorCode


def fenced_for_version(error: ErrorCode, api_version: int, first_fenced_version: int) -> ErrorCode:
    """PRODUCER_FENCED exists from the given version of each API on (KIP-588); older clients get
    INVALID_PRODUCER_EPOCH, which they treat the same way."""
    if error is ErrorCode.producer_fenced and api_version < first_fenced_version:
        return ErrorCode.invalid_producer_epoch
    return error
