"""The lines about admin and coordinator requests' results name what a client sent escaped and capped, with a real
node.

Altering a group's configs, a user's SCRAM credentials, ACLs or client quotas logs one line naming the resource,
user, binding or entity and what changed, and a refused transaction marker one naming its topic; the names and a
config value are whatever the client chose. Names holding
a newline, a forged log line and an ANSI escape must leave no line in the log that does not start with the log's
prefix, while the names still appear, escaped (``wire.log_text.untrusted``).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kio.schema.errors import ErrorCode

from testkit.node_process import BrokerProcess, WireClient, start_broker
from testkit.waiting import eventually
from tests.broker.quota_wire import alter_quotas
from wire import codec, schema

FORGED = "2026-01-01 00:00:00.000 CRITICAL controller.controller: SCRAM credentials of user 'admin' DELETED"
LOG_LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) ")


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    broker = start_broker(tmp_path_factory.mktemp("admin-log-lines"), {  # ACLs on, the test client a super user
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS",
    })
    try:
        yield broker
    finally:
        code = broker.stop()
    assert code == 0, broker.log_text()[-3000:]


def _evil(tag: str) -> str:
    return f"{tag}-{uuid.uuid4().hex[:6]}\n{FORGED}\x1b[31m"


def _escaped(name: str) -> str:
    return name.replace("\n", "\\n").replace("\x1b", "\\x1b")


def _foreign_lines(log: str) -> list[str]:
    return [line for line in log.splitlines() if line and not LOG_LINE.match(line)]


def test_scram_results_name_the_user_escaped(node: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    user, absent = _evil("mallory"), _evil("nobody")
    upsert = UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"pw")
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(timeout=30)
    deletion = UserScramCredentialDeletion(absent, ScramMechanism.SCRAM_SHA_256)
    for future in admin.alter_user_scram_credentials([deletion]).values():
        with pytest.raises(KafkaException) as refused:
            future.result(timeout=30)
        assert refused.value.args[0].code() == KafkaError.RESOURCE_NOT_FOUND

    log = eventually(
        node.log_text,
        timeout=20,
        what="both SCRAM results logged",
        until=lambda log: (
            f"SCRAM credentials of user '{_escaped(user)}' altered" in log
            and f"SCRAM credentials of user '{_escaped(absent)}' not altered: " in log
        ),
    )
    assert _foreign_lines(log) == []


def test_config_results_name_the_group_escaped(node: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    group = _evil("group")
    resource = ConfigResource(
        ResourceType.GROUP,
        group,
        incremental_configs=[
            ConfigEntry("consumer.session.timeout.ms", "50000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)

    changed = f"configs of group '{_escaped(group)}' changed: consumer.session.timeout.ms=50000"
    log = eventually(node.log_text, timeout=20, what="the config change logged", until=lambda log: changed in log)
    assert _foreign_lines(log) == []


def test_acl_and_client_quota_results_name_the_client_strings_escaped(node: BrokerProcess) -> None:
    """An ACL's principal and resource, a quota entity's name and an entity type the controller refuses (whose
    refusal quotes it) are what the admin client sent."""
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    principal, topic = _evil("User:acl"), _evil("topic")
    binding = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, principal, "*", AclOperation.READ,
                         AclPermissionType.ALLOW)
    for future in admin.create_acls([binding]).values():
        future.result(timeout=30)
    user, kind = _evil("user"), _evil("kind")
    with WireClient(node.port) as client:
        done = alter_quotas(client, [([("user", user)], {"consumer_byte_rate": 1024.0}),
                                     ([(kind, "x")], {"consumer_byte_rate": 1024.0})])
    assert done[0] == (ErrorCode.none, None) and done[1][0] != ErrorCode.none

    expected = (f"principal={_escaped(principal)}", f"TOPIC:LITERAL:{_escaped(topic)} created",
                f"client quotas of user={_escaped(user)} altered", f"type: {_escaped(kind)}")
    log = eventually(node.log_text, timeout=20, what="the ACL and quota results logged",
                     until=lambda log: all(text in log for text in expected))
    assert _foreign_lines(log) == []


def test_a_refused_transaction_marker_names_the_senders_topic_escaped(node: BrokerProcess) -> None:
    """WriteTxnMarkers (a coordinator's request, here from a super user) for a topic that does not exist is refused
    per partition, and the refusal's line quotes the name the sender gave."""
    topic = _evil("marker-topic")
    cls = codec.request_class(27, 1)
    marker_cls = schema.field_entity(cls, "markers")
    marker = schema.build(marker_cls, producer_id=42, producer_epoch=0, transaction_result=True, coordinator_epoch=0,
                          topics=(schema.build_nested(marker_cls, "topics", name=topic, partition_indexes=(0,)),))
    with WireClient(node.port) as client:
        answer = client.request(schema.build(cls, markers=(marker,)))
    [partition] = answer.markers[0].topics[0].partitions
    assert partition.error_code == ErrorCode.unknown_topic_or_partition

    refused = f"COMMIT marker of producer 42 epoch 0 on {_escaped(topic)}-0 refused"
    log = eventually(node.log_text, timeout=20, what="the refusal logged", until=lambda log: refused in log)
    assert _foreign_lines(log) == []
