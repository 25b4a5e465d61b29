"""Name oracles: a user with no right on a topic probes it through every API that takes topic ids or asks for
"every" topic, against one real broker with ``authorizer.class.name`` set, and never learns its name.

Kafka answers a topic id the caller may not DESCRIBE with TOPIC_AUTHORIZATION_FAILED and a null name (Metadata
v12, DeleteTopics v6: its controller's ``deleteTopics``), and leaves such topics out of answers about every topic.
Mallory logs in over SASL PLAIN with a right on her own groups only; the topic's id is what she probes with (ids
leak easily: logs, metrics, a consumer group's assignment). Every response is searched, field by field, for the
name. The CONTROLLER listener of the same node is then sent a 100,000-deep nested JSON body by a client that never
logged in: the connection ends with one log line, no traceback, and the controller keeps answering.
"""

from __future__ import annotations

import dataclasses
import datetime
import struct
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka.admin import AclOperation, AdminClient, ResourceType
from kio.schema.errors import ErrorCode

from metadata.rpc.stream_rpcs import GetKV
from testkit.node_process import BrokerProcess, WireClient, api_versions_request, start_broker
from testkit.waiting import eventually
from tests.broker.acl_clients import allow, grant, new_topic, sasl_acl_overrides
from tests.broker.kafka_clients import topic_name
from wire import codec, schema

PASSWORD = "oracle-pass-never-logged"
MALLORY = "User:mallory"
GROUP = "mallory-group"
DENIED = ErrorCode.topic_authorization_failed


@dataclass(frozen=True)
class Secret:
    broker: BrokerProcess
    name: str
    topic_id: uuid.UUID
    #: A topic mallory may DESCRIBE.
    visible: str

    def mallory(self) -> WireClient:
        """A connection logged in as mallory (SASL PLAIN)."""
        client = WireClient(self.broker.endpoints["SASL"][1])
        handshake = client.request(schema.build(codec.request_class(17, 1), mechanism="PLAIN"))
        assert handshake.error_code == ErrorCode.none
        token = b"\x00mallory\x00" + PASSWORD.encode()
        login = client.request(schema.build(codec.request_class(36, 2), auth_bytes=token))
        assert login.error_code == ErrorCode.none, login
        return client


@pytest.fixture(scope="module")
def secret(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secret]:
    overrides = sasl_acl_overrides(PASSWORD, "mallory")
    broker = start_broker(tmp_path_factory.mktemp("oracle-broker"), overrides)
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        name, visible = topic_name("secret"), topic_name("visible")
        new_topic(admin, name)
        new_topic(admin, visible)
        grant(admin, allow(ResourceType.GROUP, GROUP, AclOperation.ALL, principal=MALLORY),
              allow(ResourceType.TOPIC, visible, AclOperation.DESCRIBE, principal=MALLORY))
        with WireClient(broker.port) as anonymous:  # a super user: learns the id
            cls = codec.request_class(3, 12)
            described = anonymous.request(
                schema.build(cls, topics=(schema.build_nested(cls, "topics", name=name),),
                             allow_auto_topic_creation=False)
            )
            (topic,) = described.topics
            assert topic.error_code == ErrorCode.none
            find = schema.build(codec.request_class(10, 4), key_type=0, coordinator_keys=(GROUP,))
            eventually(  # the group coordinator loaded, so that group APIs answer about topics
                lambda: anonymous.request(find).coordinators[0].error_code == ErrorCode.none or None,
                timeout=30,
                what="the group coordinator",
            )
        yield Secret(broker, name, topic.topic_id, visible)
    finally:
        code = broker.stop()
    assert code == 0, broker.log_text()
    assert "Traceback" not in broker.log_text()


def _strings(value: Any) -> Iterator[str]:
    """Every string anywhere in a response."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, tuple):
        for item in value:
            yield from _strings(item)
    elif dataclasses.is_dataclass(value):
        for f in dataclasses.fields(value):
            yield from _strings(getattr(value, f.name))


def _codes(value: Any) -> set[ErrorCode]:
    """Every error code anywhere in a response."""
    if isinstance(value, ErrorCode):
        return {value}
    found: set[ErrorCode] = set()
    if isinstance(value, tuple):
        for item in value:
            found |= _codes(item)
    elif dataclasses.is_dataclass(value):
        for f in dataclasses.fields(value):
            found |= _codes(getattr(value, f.name))
    return found


def _probe(secret: Secret, api_key: int, version: int, *, by_name: bool = False, **fields: Any) -> Any:
    """Mallory's answer; unless she asked ``by_name`` (answers echo the names asked), it must not hold the name."""
    with secret.mallory() as client:
        response = client.request(schema.build(codec.request_class(api_key, version), **fields))
    leaked = [] if by_name else [s for s in _strings(response) if secret.name in s]
    assert leaked == [], f"api {api_key} v{version} told mallory {leaked}"
    return response


def _nested(api_key: int, version: int, path: str, **fields: Any) -> Any:
    cls = codec.request_class(api_key, version)
    *steps, last = path.split(".")
    for step in steps:
        cls = schema.field_entity(cls, step)
    return schema.build_nested(cls, last, **fields)


def test_metadata_by_id_answers_without_the_name(secret: Secret) -> None:
    topics = (_nested(3, 12, "topics", name=None, topic_id=secret.topic_id),)
    response = _probe(secret, 3, 12, topics=topics, allow_auto_topic_creation=False)
    assert [(t.name, t.error_code) for t in response.topics] == [(None, DENIED)]


def test_delete_topics_by_id_answers_without_the_name(secret: Secret) -> None:
    topics = (_nested(20, 6, "topics", name=None, topic_id=secret.topic_id),)
    response = _probe(secret, 20, 6, topics=topics, timeout_ms=5000)
    assert [(r.name, r.topic_id, r.error_code) for r in response.responses] == [(None, secret.topic_id, DENIED)]


@pytest.mark.parametrize("version", [13, 18])
def test_fetch_by_id_is_refused_without_the_name(secret: Secret, version: int) -> None:
    partition = _nested(1, version, "topics.partitions", partition=0, fetch_offset=0, partition_max_bytes=1024)
    topics = (_nested(1, version, "topics", topic_id=secret.topic_id, partitions=(partition,)),)
    response = _probe(secret, 1, version, max_wait=0, min_bytes=1, max_bytes=4096, session_epoch=-1,
                      replica_id=-1, topics=topics)
    assert _codes(response.responses) == {DENIED}


def test_offset_commit_and_fetch_v10_by_id_are_refused_without_the_name(secret: Secret) -> None:
    partition = _nested(8, 10, "topics.partitions", partition_index=0, committed_offset=1)
    topics = (_nested(8, 10, "topics", topic_id=secret.topic_id, partitions=(partition,)),)
    committed = _probe(secret, 8, 10, group_id=GROUP, generation_id_or_member_epoch=-1, member_id="", topics=topics)
    assert _codes(committed.topics) == {DENIED}

    asked = (_nested(9, 10, "groups.topics", topic_id=secret.topic_id, partition_indexes=(0,)),)
    fetched = _probe(secret, 9, 10, groups=(_nested(9, 10, "groups", group_id=GROUP, topics=asked),))
    assert ErrorCode.none not in _codes(fetched.groups[0].topics) and _codes(fetched.groups[0].topics) <= {DENIED}


def test_share_fetch_and_acknowledge_by_id_answer_no_name(secret: Secret) -> None:
    member = str(uuid.uuid4())
    partition = _nested(78, 1, "topics.partitions", partition_index=0)
    topics = (_nested(78, 1, "topics", topic_id=secret.topic_id, partitions=(partition,)),)
    fetched = _probe(secret, 78, 1, group_id=GROUP, member_id=member, share_session_epoch=0, max_wait=0,
                     min_bytes=1, max_bytes=4096, max_records=10, batch_size=10, topics=topics)
    assert DENIED in _codes(fetched), fetched

    batch = _nested(79, 1, "topics.partitions.acknowledgement_batches", first_offset=0, last_offset=0,
                    acknowledge_types=(1,))
    ack_partition = _nested(79, 1, "topics.partitions", partition_index=0, acknowledgement_batches=(batch,))
    ack_topics = (_nested(79, 1, "topics", topic_id=secret.topic_id, partitions=(ack_partition,)),)
    acked = _probe(secret, 79, 1, group_id=GROUP, member_id=member, share_session_epoch=1, topics=ack_topics)
    assert _codes(acked) - {ErrorCode.none}, acked


def test_apis_about_every_topic_leave_the_topic_out(secret: Secret) -> None:
    # DescribeTopicPartitions of every topic, OffsetFetch of every topic, ElectLeaders and ListPartitionReassignments
    # of every partition (the last two need the cluster's rights: refused whole).
    _probe(secret, 75, 0, topics=(), response_partition_limit=100)
    _probe(secret, 9, 10, groups=(_nested(9, 10, "groups", group_id=GROUP, topics=None),))
    elected = _probe(secret, 43, 2, election_type=0, topic_partitions=None, timeout_ms=5000)
    assert elected.error_code == ErrorCode.cluster_authorization_failed
    listed = _probe(secret, 46, 0, timeout_ms=5000, topics=None)
    assert listed.error_code == ErrorCode.cluster_authorization_failed
    _probe(secret, 90, 1, groups=(_nested(90, 1, "groups", group_id=GROUP, topics=None),))


def _by_name(name: str) -> dict[tuple[int, int], dict[str, Any]]:
    """The APIs that take topic names, each asking about ``name``: (api key, version) to the request's fields."""
    return {
        (3, 12): {"topics": (_nested(3, 12, "topics", name=name),), "allow_auto_topic_creation": False},
        (75, 0): {"topics": (_nested(75, 0, "topics", name=name),), "response_partition_limit": 10},
        (21, 2): {"topics": (_nested(21, 2, "topics", name=name,
                                     partitions=(_nested(21, 2, "topics.partitions", partition_index=0, offset=0),)),),
                  "timeout_ms": 5000},
        (37, 3): {"topics": (_nested(37, 3, "topics", name=name, count=2, assignments=None),), "timeout_ms": 5000,
                  "validate_only": True},
        (61, 0): {"topics": (_nested(61, 0, "topics", name=name, partition_indexes=(0,)),)},
        (32, 4): {"resources": (_nested(32, 4, "resources", resource_type=2, resource_name=name,
                                        configuration_keys=None),)},
        (45, 0): {"topics": (_nested(45, 0, "topics", name=name, partitions=(
            _nested(45, 0, "topics.partitions", partition_index=0, replicas=(0,)),)),), "timeout_ms": 5000},
        (43, 2): {"election_type": 0, "timeout_ms": 5000, "topic_partitions": (
            _nested(43, 2, "topic_partitions", topic=name, partitions=(0,)),)},
        (68, 1): {"group_id": GROUP, "member_id": str(uuid.uuid4()), "member_epoch": 0, "topic_partitions": (),
                  "rebalance_timeout": datetime.timedelta(seconds=30), "subscribed_topic_names": (name,)},
        (76, 1): {"group_id": GROUP, "member_id": str(uuid.uuid4()), "member_epoch": 0,
                  "subscribed_topic_names": (name,)},
        (90, 1): {"groups": (_nested(90, 1, "groups", group_id=GROUP, topics=(
            _nested(90, 1, "groups.topics", topic_name=name, partitions=(0,)),)),)},
    }


def test_apis_by_name_answer_an_undescribable_topic_as_a_missing_one(secret: Secret) -> None:
    """Asked by name, each API refuses the topic mallory may not DESCRIBE with the code it gives a topic that does
    not exist: no existence oracle either."""
    missing = topic_name("missing")
    for (api_key, version), fields in _by_name(secret.name).items():
        existing = _codes(_probe(secret, api_key, version, by_name=True, **fields)) - {ErrorCode.none}
        absent_fields = _by_name(missing)[(api_key, version)]
        absent = _codes(_probe(secret, api_key, version, by_name=True, **absent_fields)) - {ErrorCode.none}
        assert existing == absent, (api_key, existing, absent)
        assert len(existing) == 1, (api_key, existing)
        if api_key != 90:  # DescribeShareGroupOffsets: mallory's group is no share group, GROUP_ID_NOT_FOUND first
            assert existing <= {DENIED, ErrorCode.cluster_authorization_failed}, (api_key, existing)


def test_a_regex_subscription_matches_only_describable_topics(secret: Secret) -> None:
    """A consumer group member subscribed to ``.*`` is assigned the topic it may DESCRIBE and not the other, as
    Kafka's regex resolution filters them; describing the group names no other topic."""
    member = str(uuid.uuid4())
    joined = _probe(secret, 68, 1, group_id=GROUP, member_id=member, member_epoch=0, topic_partitions=(),
                    rebalance_timeout=datetime.timedelta(seconds=30), subscribed_topic_regex=".*")
    assert joined.error_code == ErrorCode.none, joined
    assert joined.assignment is not None
    assert secret.topic_id not in {t.topic_id for t in joined.assignment.topic_partitions}
    (group,) = _probe(secret, 69, 1, group_ids=(GROUP,)).groups
    assert group.error_code == ErrorCode.none
    (described,) = group.members
    assert [t.topic_name for t in described.assignment.topic_partitions] == [secret.visible]


def test_a_deeply_nested_body_on_the_controller_listener_is_refused_in_one_line(secret: Secret) -> None:
    port = secret.broker.listener_ports["CONTROLLER"]
    depth = 100_000
    body = b"[" * depth + b"]" * depth
    header = struct.pack(">hhih", GetKV.API_KEY, 0, 7, -1)
    with WireClient(port) as stranger:  # never logged in
        stranger.send_raw(struct.pack(">i", len(header) + len(body)) + header + body)
        assert stranger.is_closed_by_peer()
    log = secret.broker.log_text()
    assert "nested too deeply" in log and "RecursionError" not in log and "Traceback" not in log
    with WireClient(port) as next_client:  # still serving
        assert next_client.request(api_versions_request(3)).error_code == ErrorCode.none
