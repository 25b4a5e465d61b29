"""ACLs in a cluster: CreateAcls sent to one broker-only node is forwarded to the active controller, committed as
metadata records, replicated to every broker, and enforced by another broker from its own metadata image (the
quorum path of tests/broker/test_acls.py's single node).

The nodes run the StandardAuthorizer with ``allow.everyone.if.no.acl.found=true`` and no SASL, so every client (and
every broker) is ``User:ANONYMOUS`` and may do what no ACL mentions: a DENY on one topic is then what changes."""

from __future__ import annotations

import uuid
from collections.abc import Callable

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from node.local_cluster import LocalCluster
from testkit.waiting import eventually

AUTHORIZER = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
}


def _produce_error(bootstrap: str, topic: str) -> int | None:
    errors: list[KafkaError | None] = []
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 10000})
    producer.produce(topic, b"value", on_delivery=lambda err, _msg: errors.append(err))
    assert producer.flush(30) == 0
    error = errors[0]
    return None if error is None else int(error.code())


def test_acls_are_forwarded_replicated_and_enforced_by_every_broker(
    cluster_factory: Callable[..., LocalCluster],
) -> None:
    cluster = cluster_factory(controllers=1, brokers=2, extra=AUTHORIZER)
    first_spec, second_spec = (b.spec for b in cluster.brokers)
    first, second = (
        AdminClient({"bootstrap.servers": first_spec.address}),
        AdminClient({"bootstrap.servers": second_spec.address}),
    )
    topic = f"acl-cluster-{uuid.uuid4().hex[:8]}"
    first.create_topics([NewTopic(topic, 1)])[topic].result(30)
    assert _produce_error(second_spec.address, topic) is None

    deny = AclBinding(
        ResourceType.TOPIC,
        topic,
        ResourcePatternType.LITERAL,
        "User:ANONYMOUS",
        "*",
        AclOperation.WRITE,
        AclPermissionType.DENY,
    )
    for future in first.create_acls([deny]).values():
        future.result(30)
    acl_filter = AclBindingFilter(
        ResourceType.TOPIC, topic, ResourcePatternType.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY
    )
    eventually(
        lambda: second.describe_acls(acl_filter).result(10) == [deny],
        timeout=30,
        what="the second broker to describe the replicated ACL",
    )
    assert _produce_error(second_spec.address, topic) == KafkaError.TOPIC_AUTHORIZATION_FAILED

    deleted = second.delete_acls([acl_filter])[acl_filter].result(30)
    assert deleted == [deny]
    eventually(
        lambda: first.describe_acls(acl_filter).result(10) == [],
        timeout=30,
        what="the first broker to see the ACL deleted",
    )
    assert _produce_error(first_spec.address, topic) is None
