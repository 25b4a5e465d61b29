"""What a peer of the CONTROLLER listener says about itself reaches the controller's log escaped
(``wire.log_text.untrusted``), as a client's names do: three voters in this process over real TCP.

A broker's listeners are whatever its BrokerRegistration said. A host holding a newline, a forged log line and an
ANSI escape used to start a line of the sender's choosing in the controller's log.
"""

from __future__ import annotations

import logging
import uuid

import pytest
from kio.schema.errors import ErrorCode

from controller.quorum import QuorumController
from metadata.rpc.connection import ControllerConnection
from metadata.rpc.kafka_apis import BROKER_REGISTRATION
from tests.quorum_fixtures import active_voter
from wire import codec, schema

FORGED = "2026-01-01 00:00:00.000 CRITICAL controller.controller: broker 1 fenced"


async def test_a_broker_registration_names_its_listeners_escaped(
    voters: list[QuorumController], caplog: pytest.LogCaptureFixture,
) -> None:
    leader = await active_voter(voters)
    host = f"host-{uuid.uuid4().hex[:6]}\n{FORGED}\x1b[31m"
    cls = codec.request_class(BROKER_REGISTRATION, 3)
    listener = schema.build_nested(cls, "listeners", name="EXTERNAL", host=host, port=19092, security_protocol=0)
    request = schema.build(cls, broker_id=77, cluster_id=leader.cluster_id, incarnation_id=uuid.uuid4(),
                           listeners=(listener,), features=(), rack=None)
    address, port = leader.voters[leader.node_id]
    connection = ControllerConnection(address, port, client_id="peer-text")
    await connection.connect(timeout=5)
    try:
        with caplog.at_level(logging.INFO, logger="controller.controller"):
            answer = await connection.request(request)
    finally:
        await connection.close()
    assert answer.error_code == ErrorCode.none
    [line] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("broker 77 registered")]
    escaped = host.replace("\n", "\\n").replace("\x1b", "\\x1b")
    assert f"(EXTERNAL://{escaped}:19092)" in line
    assert "\n" not in line and "\x1b" not in line
