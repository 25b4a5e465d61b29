"""The one exception → Kafka error code mapping every handler uses."""

from __future__ import annotations

import logging

import pytest
from kio.schema.errors import ErrorCode

from metadata.errors import ControllerError, error_code_for, error_code_logged, error_message_for
from storage import errors as storage_errors
from storage.config import ConfigError
from wire.errors import KafkaError


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (KafkaError(ErrorCode.corrupt_message, "bad CRC in batch at offset 7"), ErrorCode.corrupt_message),
        (ControllerError(ErrorCode.invalid_partitions, "fewer partitions"), ErrorCode.invalid_partitions),
        (storage_errors.OffsetOutOfRangeError("offset 9 outside [0, 5)"), ErrorCode.offset_out_of_range),
        (storage_errors.StreamFencedError("stream 3 epoch 1 < 2"), ErrorCode.not_leader_or_follower),
        (storage_errors.ObjectNotFoundError("abc/_fjord_x/1"), ErrorCode.kafka_storage_error),
        (storage_errors.CorruptObjectError("object 4 footer"), ErrorCode.kafka_storage_error),
        # S3 refused the WAL's writes for too long: the append took no offset, so the producer retries it.
        (storage_errors.WALUnavailableError("S3 WAL unwritable for 30s"), ErrorCode.kafka_storage_error),
        (ConfigError("retention.ms: 'x' is not an integer"), ErrorCode.invalid_config),
        (TimeoutError(), ErrorCode.request_timed_out),
        (RuntimeError("surprise"), ErrorCode.unknown_server_error),
    ],
)
def test_error_code_for(exc: BaseException, code: ErrorCode) -> None:
    assert error_code_for(exc) == code


def test_messages_name_what_failed() -> None:
    assert error_message_for(KafkaError(ErrorCode.corrupt_message, "bad CRC")) == "bad CRC"
    assert error_message_for(KafkaError(ErrorCode.corrupt_message)) == "corrupt_message"
    assert error_message_for(TimeoutError()) == "TimeoutError"


def test_only_exceptions_without_a_code_are_logged_and_the_log_names_the_partition(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = logging.getLogger("fjord.test.errors")
    with caplog.at_level(logging.ERROR, logger=log.name):
        known = error_code_logged(storage_errors.StreamFencedError("stream 3"), log, "fetch from %s-%d failed", "t", 1)
        unknown = error_code_logged(RuntimeError("surprise"), log, "fetch from %s-%d failed", "orders", 3)
    assert (known, unknown) == (ErrorCode.not_leader_or_follower, ErrorCode.unknown_server_error)
    [record] = caplog.records
    assert record.getMessage() == "fetch from orders-3 failed"
    assert record.exc_info is not None and str(record.exc_info[1]) == "surprise"
