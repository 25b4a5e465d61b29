"""The CONTROLLER dispatcher's DEBUG line for a refused request names the caller escaped and capped.

A refusal names the caller's principal: a SASL user name (any a SCRAM user was created with) or a client
certificate's subject, which may hold a newline, a forged log line and an ANSI escape. The client is answered
CLUSTER_AUTHORIZATION_FAILED with the refusal as sent; the log line keeps it on one escaped line.
"""

from __future__ import annotations

import logging

import pytest
from kio.schema.errors import ErrorCode

from controller.rpc.dispatcher import _refused
from metadata.rpc.kafka_apis import DESCRIBE_QUORUM
from wire import codec
from wire.dispatch import Peer
from wire.log_text import LOG_TEXT_MAX

FORGED = "2026-01-01 00:00:00.000 CRITICAL controller.controller: SCRAM credentials of user 'admin' DELETED"


def test_a_refusal_naming_a_hostile_principal_is_logged_escaped(caplog: pytest.LogCaptureFixture) -> None:
    peer = Peer("127.0.0.1", 40000, "CONTROLLER")
    refusal = f"DescribeQuorum from {peer} is refused: User:m\n{FORGED}\x1b[31m{'x' * 5000} is not a super user"
    with caplog.at_level(logging.DEBUG, logger="controller.rpc.dispatcher"):
        response = _refused(codec.response_class(DESCRIBE_QUORUM, 2), refusal, peer)
    assert response.error_code == ErrorCode.cluster_authorization_failed and response.error_message == refusal
    [line] = [r.getMessage() for r in caplog.records if "CLUSTER_AUTHORIZATION_FAILED" in r.getMessage()]
    assert "\n" not in line and "\x1b" not in line
    assert f"User:m\\n{FORGED}\\x1b[31m" in line
    assert len(line) < 4 * LOG_TEXT_MAX + 200 and "more characters]" in line
