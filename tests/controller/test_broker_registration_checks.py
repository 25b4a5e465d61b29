"""A BrokerRegistration is what its sender says about itself: the active controller checks it before it registers
anything, and logs it escaped (``wire.log_text.untrusted``), as a client's names. Three voters in this process over
real TCP.

A negative broker id (-1 is "no broker" to every client) is refused INVALID_REGISTRATION and registers nothing. A
host holding a newline, a forged log line and an ANSI escape used to start a line of the sender's choosing in the
controller's log.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from controller.quorum import QuorumController
from metadata.rpc.connection import ControllerConnection
from metadata.rpc.kafka_apis import BROKER_REGISTRATION
from tests.quorum_fixtures import active_voter
from wire import codec, schema

FORGED = "2026-01-01 00:00:00.000 CRITICAL controller.controller: broker 1 fenced"


def _registration(cluster_id: str, broker_id: int, host: str) -> Any:
    cls = codec.request_class(BROKER_REGISTRATION, 3)
    listener = schema.build_nested(cls, "listeners", name="EXTERNAL", host=host, port=19092, security_protocol=0)
    return schema.build(cls, broker_id=broker_id, cluster_id=cluster_id, incarnation_id=uuid.uuid4(),
                        listeners=(listener,), features=(), rack=None)


async def _ask(quorum: QuorumController, request: Any) -> Any:
    address, port = quorum.voters[quorum.node_id]
    connection = ControllerConnection(address, port, client_id="registration-checks")
    await connection.connect(timeout=5)
    try:
        return await connection.request(request)
    finally:
        await connection.close()


async def test_a_negative_broker_id_is_refused_and_registers_nothing(voters: list[QuorumController]) -> None:
    leader = await active_voter(voters)
    answer = await _ask(leader, _registration(leader.cluster_id, -1, "127.0.0.1"))
    assert (answer.error_code, answer.broker_epoch) == (ErrorCode.invalid_registration, -1)
    assert -1 not in leader.image.brokers


async def test_a_broker_registration_names_its_listeners_escaped(
    voters: list[QuorumController], caplog: pytest.LogCaptureFixture,
) -> None:
    leader = await active_voter(voters)
    host = f"host-{uuid.uuid4().hex[:6]}\n{FORGED}\x1b[31m"
    with caplog.at_level(logging.INFO, logger="controller.controller"):
        answer = await _ask(leader, _registration(leader.cluster_id, 77, host))
    assert answer.error_code == ErrorCode.none
    [line] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("broker 77 registered")]
    escaped = host.replace("\n", "\\n").replace("\x1b", "\\x1b")
    assert f"(EXTERNAL://{escaped}:19092)" in line
    assert "\n" not in line and "\x1b" not in line
