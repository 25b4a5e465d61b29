"""ACLs with a real broker process and real clients (Kafka's StandardAuthorizer semantics, ``metadata.acl``).

One broker serves the module with ``authorizer.class.name`` set: a SASL_PLAINTEXT listener with PLAIN users admin
(a super user), alice and bob, and the PLAINTEXT listener ``start_broker`` waits on, whose ``User:ANONYMOUS`` is a
super user too, as the inter-broker listener's principal must be (README). confluent-kafka's AdminClient manages
the bindings; producers, consumers and admin calls as alice show, API by API, that without the ACL the request is
refused with Kafka's code and nothing changes, and that with it the request works; Metadata hides the topics a
principal may not describe; DENY beats ALLOW; prefixed patterns cover the names they start.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import (
    Consumer,
    ElectionType,
    KafkaError,
    KafkaException,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kafka import KafkaAdminClient
from kafka.admin import (
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    ConfigResourceType,
    ResourcePatternFilter,
)
from kafka.admin import ConfigResource as KafkaPythonConfigResource
from kafka.admin import ResourceType as KafkaPythonResourceType
from kafka.errors import ClusterAuthorizationFailedError
from kio.schema.errors import ErrorCode

from broker import authorized_operations
from testkit.node_process import BrokerProcess, WireClient, start_broker
from testkit.waiting import eventually
from tests.broker.acl_clients import allow, grant, new_topic, produce_error, sasl_acl_overrides
from tests.broker.java_requests import wait_for_leader
from tests.broker.kafka_clients import call, entity, topic_name
from tests.broker.sasl_wire import authenticate, handshake
from wire import codec, schema

PASSWORD = "acl-pass-never-logged"


@dataclass(frozen=True)
class AclBroker:
    broker: BrokerProcess

    def config(self, user: str) -> dict[str, Any]:
        host, port = self.broker.endpoints["SASL"]
        return {
            "bootstrap.servers": f"{host}:{port}",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": user,
            "sasl.password": PASSWORD,
        }

    def admin(self, user: str = "admin") -> AdminClient:
        return AdminClient(self.config(user))


@pytest.fixture(scope="module")
def acls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AclBroker]:
    overrides = sasl_acl_overrides(PASSWORD, "alice", "bob") | {
        "group.initial.rebalance.delay.ms": "0",
    }
    broker = start_broker(tmp_path_factory.mktemp("acl-broker"), overrides)
    try:
        yield AclBroker(broker)
    finally:
        code = broker.stop()
    assert code == 0, broker.log_text()
    assert PASSWORD not in broker.log_text()


def _kafka_python_admin(acls: AclBroker, user: str) -> KafkaAdminClient:
    host, port = acls.broker.endpoints["SASL"]
    return KafkaAdminClient(
        bootstrap_servers=f"{host}:{port}",
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_plain_username=user,
        sasl_plain_password=PASSWORD,
    )


def _describe(admin: AdminClient, principal: str | None = None) -> list[AclBinding]:
    acl_filter = AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, principal, None, AclOperation.ANY, AclPermissionType.ANY
    )
    result: list[AclBinding] = admin.describe_acls(acl_filter).result(30)
    return result


def _poll_outcome(consumer: Consumer) -> bytes | KafkaError | None:
    """One poll: the next record's value, the error the consumer reports, or None (nothing yet, or end of a
    partition)."""
    message = consumer.poll(1.0)
    if message is None:
        return None
    error = message.error()
    if error is not None:
        return None if error.code() == KafkaError._PARTITION_EOF else error
    value: bytes = message.value()
    return value


def _consume(config: dict[str, Any], topic: str, group: str) -> bytes | KafkaError:
    """The first record of ``topic`` read in ``group``, or the first error the consumer reports."""
    consumer = Consumer({**config, "group.id": group, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    try:
        result: bytes | KafkaError = eventually(
            lambda: _poll_outcome(consumer), timeout=60, what=f"a record or an error of {topic}"
        )
        return result
    finally:
        consumer.close()


def test_only_a_principal_with_cluster_alter_creates_and_deletes_acls(acls: AclBroker) -> None:
    topic = topic_name("acl-admin")
    binding = allow(ResourceType.TOPIC, topic, AclOperation.READ, principal="User:bob")
    with pytest.raises(KafkaException) as refused:
        grant(acls.admin("alice"), binding)
    assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    assert _describe(acls.admin(), "User:bob") == []
    # librdkafka drops DescribeAcls' top-level error; kafka-python reports it
    with pytest.raises(ClusterAuthorizationFailedError):
        _kafka_python_admin(acls, "alice").describe_acls(
            ACLFilter(
                None,
                None,
                ACLOperation.ANY,
                ACLPermissionType.ANY,
                ResourcePatternFilter(KafkaPythonResourceType.ANY, None, ACLResourcePatternType.ANY),
            )
        )
    grant(acls.admin(), binding)
    assert [(b.name, b.operation, b.permission_type) for b in _describe(acls.admin(), "User:bob")] == [
        (topic, AclOperation.READ, AclPermissionType.ALLOW)
    ]
    acl_filter = AclBindingFilter(
        ResourceType.TOPIC, topic, ResourcePatternType.MATCH, None, None, AclOperation.ANY, AclPermissionType.ANY
    )
    admin = acls.admin()  # kept: a client collected before its future completes cancels it
    deleted = admin.delete_acls([acl_filter])[acl_filter].result(30)
    assert [b.name for b in deleted] == [topic]
    assert _describe(acls.admin(), "User:bob") == []


def test_produce_needs_topic_write_and_metadata_hides_undescribable_topics(acls: AclBroker) -> None:
    topic = topic_name("acl-produce")
    new_topic(acls.admin(), topic)
    alice = acls.config("alice")
    assert topic not in AdminClient(alice).list_topics(timeout=20).topics
    assert topic in acls.admin().list_topics(timeout=20).topics
    for _ in range(2):
        error = produce_error(alice, topic)
        assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    denial = f"Principal = User:alice is Denied operation = DESCRIBE from host = 127.0.0.1 on resource = TOPIC:{topic}"
    assert acls.broker.log_text().count(denial) == 1  # logged once, however often the client asks

    grant(acls.admin(), allow(ResourceType.TOPIC, topic, AclOperation.WRITE))
    alice_admin = AdminClient(alice)
    assert topic in alice_admin.list_topics(timeout=20).topics  # WRITE implies DESCRIBE
    assert produce_error(alice, topic) is None
    described = alice_admin.describe_topics(TopicCollection([topic]), include_authorized_operations=True)[topic]
    assert set(described.result(30).authorized_operations) == {AclOperation.WRITE, AclOperation.DESCRIBE}
    cluster = alice_admin.describe_cluster(include_authorized_operations=True).result(30)
    assert not cluster.authorized_operations  # no ACL on the cluster


def test_consume_needs_topic_and_group_read_and_deny_beats_allow(acls: AclBroker) -> None:
    prefix = topic_name("acl-consume")
    topic, group, group_2 = f"{prefix}-orders", f"{prefix}-group", f"{prefix}-group-2"
    new_topic(acls.admin(), topic)
    assert produce_error(acls.config("admin"), topic) is None
    alice = acls.config("alice")

    grant(acls.admin(), allow(ResourceType.TOPIC, prefix, AclOperation.READ, pattern=ResourcePatternType.PREFIXED))
    no_group = _consume(alice, topic, group)
    assert isinstance(no_group, KafkaError) and no_group.code() == KafkaError.GROUP_AUTHORIZATION_FAILED

    grant(acls.admin(), allow(ResourceType.GROUP, group, AclOperation.READ, pattern=ResourcePatternType.PREFIXED))
    assert _consume(alice, topic, group) == b"value"

    grant(acls.admin(), allow(ResourceType.TOPIC, topic, AclOperation.READ, permission=AclPermissionType.DENY))
    denied = _consume(alice, topic, group_2)
    assert isinstance(denied, KafkaError) and denied.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_create_and_delete_topics_need_their_acls(acls: AclBroker) -> None:
    prefix = topic_name("acl-topics")
    alice = acls.admin("alice")
    refused = alice.create_topics([NewTopic(f"{prefix}-a", 1)])[f"{prefix}-a"]
    with pytest.raises(KafkaException) as create_error:
        refused.result(30)
    assert create_error.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert f"{prefix}-a" not in acls.admin().list_topics(timeout=20).topics

    grant(acls.admin(), allow(ResourceType.TOPIC, prefix, AclOperation.CREATE, pattern=ResourcePatternType.PREFIXED))
    new_topic(alice, f"{prefix}-a")
    with pytest.raises(KafkaException) as delete_error:
        alice.delete_topics([f"{prefix}-a"])[f"{prefix}-a"].result(30)
    assert delete_error.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert f"{prefix}-a" in acls.admin().list_topics(timeout=20).topics

    grant(acls.admin(), allow(ResourceType.TOPIC, prefix, AclOperation.DELETE, pattern=ResourcePatternType.PREFIXED))
    alice.delete_topics([f"{prefix}-a"])[f"{prefix}-a"].result(30)
    eventually(
        lambda: f"{prefix}-a" not in acls.admin().list_topics(timeout=20).topics,
        timeout=30,
        what="the deleted topic gone",
    )


def _create_topics_as_alice(acls: AclBroker, *names: str) -> Any:
    """CreateTopics v7 on a raw SASL connection as alice, for the fields no client library shows."""
    request_cls = codec.request_class(19, 7)
    topics = tuple(schema.build_nested(request_cls, "topics", name=name, num_partitions=2, replication_factor=1,
                                       assignments=(), configs=(schema.build_nested(
                                           schema.field_entity(request_cls, "topics"), "configs",
                                           name="retention.ms", value="1234"),))
                   for name in names)
    with WireClient(acls.broker.endpoints["SASL"][1], timeout=30) as client:
        assert handshake(client, "PLAIN").error_code == ErrorCode.none
        assert authenticate(client, f"\x00alice\x00{PASSWORD}".encode()).error_code == ErrorCode.none
        return client.request(schema.build(request_cls, topics=topics, timeout=30000, validate_only=False))


def test_create_topics_shows_settings_only_with_describe_configs(acls: AclBroker) -> None:
    """As Kafka's controller: a topic created by a caller without DESCRIBE_CONFIGS on it is answered with
    TopicConfigErrorCode TOPIC_AUTHORIZATION_FAILED, no configs, and -1 partitions and replication factor."""
    prefix = topic_name("acl-create-configs")
    hidden, shown = f"{prefix}-hidden", f"{prefix}-shown"
    grant(acls.admin(), allow(ResourceType.TOPIC, prefix, AclOperation.CREATE, pattern=ResourcePatternType.PREFIXED),
          allow(ResourceType.TOPIC, shown, AclOperation.DESCRIBE_CONFIGS))
    answered = {t.name: t for t in _create_topics_as_alice(acls, hidden, shown).topics}
    assert {name: t.error_code for name, t in answered.items()} == {hidden: ErrorCode.none, shown: ErrorCode.none}
    withheld = answered[hidden]
    assert (withheld.topic_config_error_code, withheld.num_partitions, withheld.replication_factor,
            withheld.configs) == (ErrorCode.topic_authorization_failed, -1, -1, ())
    described = answered[shown]
    assert (described.topic_config_error_code, described.num_partitions, described.replication_factor) == (
        ErrorCode.none, 2, 1)
    assert {c.name: c.value for c in described.configs}["retention.ms"] == "1234"


def test_super_users_need_no_acl(acls: AclBroker) -> None:
    topic = topic_name("acl-super")
    admin = acls.admin()
    new_topic(admin, topic)
    assert produce_error(acls.config("admin"), topic) is None
    assert _consume(acls.config("admin"), topic, topic_name("acl-super-group")) == b"value"
    admin.delete_topics([topic])[topic].result(30)


def _admin_error(future: Any) -> int | None:
    try:
        future.result(30)
    except KafkaException as exc:
        return int(exc.args[0].code())
    return None


def test_topic_admin_apis_need_alter_and_config_acls(acls: AclBroker) -> None:
    topic = topic_name("acl-configs")
    new_topic(acls.admin(), topic)
    alice = acls.admin("alice")
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, {"retention.ms": "1234"})
    assert _admin_error(alice.describe_configs([ConfigResource("topic", topic)])[ConfigResource("topic", topic)]) == (
        KafkaError.TOPIC_AUTHORIZATION_FAILED
    )
    assert _admin_error(alice.alter_configs([resource])[resource]) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert _admin_error(alice.create_partitions([NewPartitions(topic, 2)])[topic]) == (
        KafkaError.TOPIC_AUTHORIZATION_FAILED
    )
    assert len(acls.admin().list_topics(topic, timeout=20).topics[topic].partitions) == 1

    grant(
        acls.admin(),
        allow(ResourceType.TOPIC, topic, AclOperation.ALTER),
        allow(ResourceType.TOPIC, topic, AclOperation.ALTER_CONFIGS),
    )
    assert _admin_error(alice.alter_configs([resource])[resource]) is None
    described = alice.describe_configs([ConfigResource("topic", topic)])[ConfigResource("topic", topic)].result(30)
    assert described["retention.ms"].value == "1234"  # DESCRIBE_CONFIGS is implied by ALTER_CONFIGS
    assert _admin_error(alice.create_partitions([NewPartitions(topic, 2)])[topic]) is None


def test_group_admin_apis_need_group_acls(acls: AclBroker) -> None:
    prefix = topic_name("acl-groups")
    topic, group = f"{prefix}-t", f"{prefix}-g"
    new_topic(acls.admin(), topic)
    assert produce_error(acls.config("admin"), topic) is None
    assert _consume(acls.config("admin"), topic, group) == b"value"
    alice = acls.admin("alice")
    assert _admin_error(alice.delete_consumer_groups([group])[group]) == KafkaError.GROUP_AUTHORIZATION_FAILED
    described = alice.describe_consumer_groups([group])[group]
    assert _admin_error(described) == KafkaError.GROUP_AUTHORIZATION_FAILED
    admin = acls.admin()
    assert group in {g.group_id for g in admin.list_consumer_groups().result(30).valid}
    assert group not in {g.group_id for g in alice.list_consumer_groups().result(30).valid}

    grant(admin, allow(ResourceType.GROUP, group, AclOperation.DELETE))
    assert _admin_error(alice.delete_consumer_groups([group])[group]) is None


def test_idempotent_and_transactional_producers_need_their_acls(acls: AclBroker) -> None:
    prefix = topic_name("acl-txn")
    topic, transactional_id = f"{prefix}-t", f"{prefix}-id"
    new_topic(acls.admin(), topic)
    alice = acls.config("alice")

    producer = Producer({**alice, "transactional.id": transactional_id, "transaction.timeout.ms": 10000})
    with pytest.raises(KafkaException) as refused:
        producer.init_transactions(30)
    assert refused.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED

    grant(acls.admin(), allow(ResourceType.TOPIC, topic, AclOperation.WRITE))
    assert produce_error({**alice, "enable.idempotence": True}, topic) is None  # WRITE on a topic suffices

    grant(acls.admin(), allow(ResourceType.TRANSACTIONAL_ID, transactional_id, AclOperation.WRITE))
    producer = Producer({**alice, "transactional.id": transactional_id, "transaction.timeout.ms": 10000})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"in a transaction")
    producer.commit_transaction(30)


def test_scram_users_need_cluster_alter(acls: AclBroker) -> None:
    upsert = UserScramCredentialUpsertion("carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"pw")
    alice = acls.admin("alice")
    assert _admin_error(alice.alter_user_scram_credentials([upsert])["carol"]) == (
        KafkaError.CLUSTER_AUTHORIZATION_FAILED
    )
    admin = acls.admin()
    assert _admin_error(admin.describe_user_scram_credentials(["carol"])["carol"]) == KafkaError.RESOURCE_NOT_FOUND


def test_a_revoked_read_stops_a_running_consumer(acls: AclBroker) -> None:
    prefix = topic_name("acl-revoke")
    topic, group = f"{prefix}-t", f"{prefix}-g"
    new_topic(acls.admin(), topic)
    assert produce_error(acls.config("admin"), topic) is None
    grant(
        acls.admin(),
        allow(ResourceType.TOPIC, topic, AclOperation.READ),
        allow(ResourceType.GROUP, group, AclOperation.READ),
    )
    consumer = Consumer({**acls.config("alice"), "group.id": group, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    try:
        assert eventually(lambda: _poll_outcome(consumer), timeout=60, what="the first record") == b"value"
        grant(acls.admin(), allow(ResourceType.TOPIC, topic, AclOperation.READ, permission=AclPermissionType.DENY))
        assert produce_error(acls.config("admin"), topic) is None
        # As Kafka checks READ when a fetch arrives, a fetch already waiting when the DENY came may still return
        # this record; the consumer's next fetch is refused.
        outcome = eventually(lambda: _poll_outcome(consumer), timeout=60, until=lambda o: isinstance(o, KafkaError),
                             what="the consumer's error")
        assert isinstance(outcome, KafkaError) and outcome.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        consumer.close()


def _fetch(client: WireClient, session: tuple[int, int], offsets: dict[uuid.UUID, int], max_wait_ms: int) -> Any:
    """Fetch v15 as the Java consumer sends it in a session (id, epoch): partition 0 of each topic id, from its
    offset."""
    topic_cls = entity(1, 15, "topics")
    part_cls = schema.field_entity(topic_cls, "partitions")
    topics = tuple(
        schema.build(topic_cls, topic_id=topic_id, partitions=(schema.build(
            part_cls, partition=0, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
            log_start_offset=-1, partition_max_bytes=1 << 20),))
        for topic_id, offset in offsets.items()
    )
    return call(client, 1, 15, replica_id=-1, max_wait=max_wait_ms, min_bytes=1, max_bytes=50 << 20,
                isolation_level=0, session_id=session[0], session_epoch=session[1], topics=topics,
                forgotten_topics_data=(), rack_id="")


def _answered(response: Any) -> dict[uuid.UUID, tuple[ErrorCode, bool]]:
    assert response.error_code == ErrorCode.none
    return {t.topic_id: (p.error_code, bool(p.records)) for t in response.responses for p in t.partitions}


def test_a_fetch_session_keeps_a_refused_topic_and_refuses_it_at_every_fetch(acls: AclBroker) -> None:
    """As Kafka's FetchSession: a partition refused READ stays in the session and is answered
    TOPIC_AUTHORIZATION_FAILED at every incremental fetch, without ending its long poll; once READ is granted its
    records come without the consumer naming it again."""
    prefix = topic_name("acl-session")
    readable, refused = f"{prefix}-r", f"{prefix}-d"
    for topic in (readable, refused):
        new_topic(acls.admin(), topic)
        assert produce_error(acls.config("admin"), topic) is None
    grant(acls.admin(), allow(ResourceType.TOPIC, readable, AclOperation.READ))
    admin, alice = _sasl_client(acls, "admin"), _sasl_client(acls, "alice")
    try:
        r_id, d_id = (wait_for_leader(admin, topic).topic_id for topic in (readable, refused))
        eventually(lambda: _answered(_fetch(alice, (0, -1), {r_id: 0}, 0)), timeout=20,
                   until=lambda got: got[r_id][0] == ErrorCode.none, what="alice's READ on the topic to apply")

        opened = _fetch(alice, (0, 0), {r_id: 0, d_id: 0}, 0)
        assert opened.session_id != 0
        assert _answered(opened) == {r_id: (ErrorCode.none, True), d_id: (ErrorCode.topic_authorization_failed, False)}
        # The next fetch names only the readable partition's new offset: nothing new there, so it waits its
        # max_wait, and the refused partition of the session is answered again.
        started = time.monotonic()
        again = _fetch(alice, (opened.session_id, 1), {r_id: 1}, 300)
        assert _answered(again) == {d_id: (ErrorCode.topic_authorization_failed, False)}
        assert time.monotonic() - started >= 0.25

        grant(acls.admin(), allow(ResourceType.TOPIC, refused, AclOperation.READ))
        epochs = itertools.count(2)
        served = eventually(lambda: _answered(_fetch(alice, (opened.session_id, next(epochs)), {}, 0)), timeout=20,
                            until=lambda got: got.get(d_id, (None,))[0] == ErrorCode.none,
                            what="the session's refused partition served once READ is granted")
        assert served == {d_id: (ErrorCode.none, True)}
    finally:
        admin.close()
        alice.close()


def test_operator_tools_need_cluster_acls(acls: AclBroker) -> None:
    """ElectLeaders needs CLUSTER ALTER, DescribeLogDirs CLUSTER DESCRIBE, a BROKER_LOGGER change CLUSTER
    ALTER_CONFIGS (tests/broker/test_operator_tools.py has what each does when allowed)."""
    topic = topic_name("ops-acl")
    new_topic(acls.admin(), topic)

    def election_error(admin: AdminClient) -> int | None:
        try:
            results = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0)]).result(timeout=30)
        except KafkaException as exc:
            return int(exc.args[0].code())
        [error] = results.values()  # None, or the partition's KafkaError
        return None if error is None else int(error.code())

    assert election_error(acls.admin("alice")) == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    assert election_error(acls.admin()) == KafkaError.ELECTION_NOT_NEEDED
    alice, admin = _kafka_python_admin(acls, "alice"), _kafka_python_admin(acls, "admin")
    try:
        [refused] = alice.describe_log_dirs({topic: [0]})
        [described] = admin.describe_log_dirs({topic: [0]})
        assert refused["log_dirs"] == [] and described["log_dirs"] != []
        change = [KafkaPythonConfigResource(ConfigResourceType.BROKER_LOGGER, "0", {"broker": "DEBUG"})]
        result = alice.alter_configs(change, raise_on_unknown=False)["broker_logger"]["0"]
        assert "ClusterAuthorizationFailed" in result, result
    finally:
        alice.close()
        admin.close()


def _sasl_client(acls: AclBroker, user: str) -> WireClient:
    """A raw connection to the SASL listener, logged in as ``user``."""
    host, port = acls.broker.endpoints["SASL"]
    client = WireClient(port, host)
    assert handshake(client, "PLAIN").error_code == ErrorCode.none
    assert authenticate(client, f"\0{user}\0{PASSWORD}".encode()).error_code == ErrorCode.none
    return client


def test_cluster_operations_are_told_only_to_a_principal_that_may_describe_the_cluster(acls: AclBroker) -> None:
    """Kafka's AuthHelper (DescribeCluster) and Metadata v8-10 report 0 to a principal without CLUSTER DESCRIBE,
    not the other operations it may do on the cluster."""
    describe_cluster = schema.build(codec.request_class(60, 1), include_cluster_authorized_operations=True,
                                    endpoint_type=1)
    metadata_v10 = schema.build(codec.request_class(3, 10), topics=(), allow_auto_topic_creation=False,
                                include_cluster_authorized_operations=True, include_topic_authorized_operations=False)
    idempotent = schema.build(codec.request_class(22, 4), transactional_id=None, transaction_timeout=60000,
                              producer_id=-1, producer_epoch=-1)
    cluster_acls = AclBindingFilter(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, "User:bob",
                                    None, AclOperation.ANY, AclPermissionType.ANY)
    bob = _sasl_client(acls, "bob")
    try:
        grant(acls.admin(), allow(ResourceType.BROKER, "kafka-cluster", AclOperation.IDEMPOTENT_WRITE,
                                  principal="User:bob"))
        eventually(lambda: bob.request(idempotent).error_code, until=lambda code: code == ErrorCode.none,
                   timeout=20, what="bob's IDEMPOTENT_WRITE on the cluster to apply")
        assert bob.request(describe_cluster).cluster_authorized_operations == 0
        assert bob.request(metadata_v10).cluster_authorized_operations == 0
        denial = "Principal = User:bob is Denied operation = DESCRIBE from host = 127.0.0.1 on resource = CLUSTER"
        assert denial in acls.broker.log_text()

        grant(acls.admin(), allow(ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE, principal="User:bob"))
        ops = authorized_operations.AclOperation
        both = authorized_operations.bit_field(frozenset({ops.DESCRIBE, ops.IDEMPOTENT_WRITE}))
        eventually(lambda: bob.request(describe_cluster).cluster_authorized_operations, until=lambda ops: ops == both,
                   timeout=20, what="bob's DESCRIBE on the cluster to apply")
        assert bob.request(metadata_v10).cluster_authorized_operations == both
    finally:
        bob.close()
        admin = acls.admin()
        admin.delete_acls([cluster_acls])[cluster_acls].result(30)
