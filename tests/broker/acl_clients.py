"""confluent-kafka helpers of the tests that set up ACLs on a real broker process (test_acls.py, test_mtls.py):
create a topic and grant bindings as a super user, then see what a producer of another principal is told.

Each helper waits for its result (30 s at most), so a test's next step sees the topic or the binding.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

ALICE = "User:alice"


def sasl_acl_overrides(password: str, *users: str) -> dict[str, str]:
    """A node whose PLAINTEXT listener (and ANONYMOUS) is a super user's, with a SASL_PLAINTEXT listener ``SASL``
    logging in ``admin`` and ``users`` by PLAIN, all with ``password``, and Kafka's StandardAuthorizer."""
    accounts = " ".join(f'user_{name}="{password}"' for name in ("admin", *users))
    jaas = (f'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
            f'password="{password}" {accounts};')
    return {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl.plain.sasl.jaas.config": jaas,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin;User:ANONYMOUS",
    }


def new_topic(admin: AdminClient, topic: str) -> None:
    """Creates ``topic`` with one partition."""
    admin.create_topics([NewTopic(topic, 1)])[topic].result(30)


def grant(admin: AdminClient, *bindings: AclBinding) -> None:
    for future in admin.create_acls(list(bindings)).values():
        future.result(30)


def allow(
    resource: ResourceType,
    name: str,
    op: AclOperation,
    *,
    principal: str = ALICE,
    pattern: ResourcePatternType = ResourcePatternType.LITERAL,
    permission: AclPermissionType = AclPermissionType.ALLOW,
) -> AclBinding:
    """A binding from any host: ALLOW ``principal`` (alice unless told) ``op`` on the resource (or ``permission``)."""
    return AclBinding(resource, name, pattern, principal, "*", op, permission)


def produce_error(config: dict[str, Any], topic: str) -> KafkaError | None:
    """Produces one record; the delivery error (None when it was written)."""
    errors: list[KafkaError | None] = []
    producer = Producer({**config, "message.timeout.ms": 15000})
    producer.produce(topic, b"value", on_delivery=lambda err, _msg: errors.append(err))
    assert producer.flush(30) == 0
    return errors[0]
