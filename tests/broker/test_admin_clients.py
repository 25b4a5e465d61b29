"""Topic and config administration through real clients: confluent-kafka, kafka-python and kcat."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
)
from kafka.admin import ConfigResource as KConfigResource
from kafka.admin import ConfigResourceType, KafkaAdminClient
from kafka.admin import NewPartitions as KNewPartitions
from kafka.admin import NewTopic as KNewTopic
from kafka.errors import TopicAlreadyExistsError
from kio.schema.errors import ErrorCode

from testkit.node_process import BrokerProcess, WireClient
from wire import codec, schema

TIMEOUT = 15.0


@pytest.fixture(scope="module")
def admin(shared_broker: BrokerProcess) -> Iterator[AdminClient]:
    yield AdminClient({"bootstrap.servers": shared_broker.bootstrap, "socket.timeout.ms": 10000})


def _results(futures: dict[Any, Any]) -> dict[Any, Any]:
    return {key: future.result(timeout=TIMEOUT) for key, future in futures.items()}


def _error(future: Any) -> Any:
    with pytest.raises(KafkaException) as info:
        future.result(timeout=TIMEOUT)
    return info.value.args[0]


def _describe(admin: AdminClient, kind: str, name: str) -> dict[str, Any]:
    (configs,) = _results(admin.describe_configs([ConfigResource(kind, name)])).values()
    return dict(configs)


def test_create_topics_with_configs_validate_only_and_duplicates(admin: AdminClient) -> None:
    _results(admin.create_topics([NewTopic("ca-orders", 3, 1, config={"retention.ms": "3600000"})]))
    topics = admin.list_topics(timeout=TIMEOUT).topics
    assert len(topics["ca-orders"].partitions) == 3

    duplicate = admin.create_topics([NewTopic("ca-orders", 1, 1)])["ca-orders"]
    assert _error(duplicate).code() == ErrorCode.topic_already_exists

    _results(admin.create_topics([NewTopic("ca-dry-run", 2, 1)], validate_only=True))
    assert "ca-dry-run" not in admin.list_topics(timeout=TIMEOUT).topics

    bad_config = admin.create_topics([NewTopic("ca-bad", 1, 1, config={"retention.ms": "soon"})])["ca-bad"]
    assert _error(bad_config).code() == ErrorCode.invalid_config
    bad_name = admin.create_topics([NewTopic("ca bad name", 1, 1)])["ca bad name"]
    assert _error(bad_name).code() == ErrorCode.invalid_topic_exception

    configs = _describe(admin, "topic", "ca-orders")
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["cleanup.policy"].value == "delete"
    assert configs["cleanup.policy"].source == ConfigSource.DEFAULT_CONFIG.value


def test_delete_topics_and_create_partitions(admin: AdminClient) -> None:
    _results(admin.create_topics([NewTopic("ca-doomed", 1, 1), NewTopic("ca-growing", 1, 1)]))
    _results(admin.create_partitions([NewPartitions("ca-growing", 4)]))
    assert len(admin.list_topics(timeout=TIMEOUT).topics["ca-growing"].partitions) == 4
    shrink = admin.create_partitions([NewPartitions("ca-growing", 2)])["ca-growing"]
    assert _error(shrink).code() == ErrorCode.invalid_partitions

    _results(admin.delete_topics(["ca-doomed"]))
    assert "ca-doomed" not in admin.list_topics(timeout=TIMEOUT).topics
    again = admin.delete_topics(["ca-doomed"])["ca-doomed"]
    assert _error(again).code() == ErrorCode.unknown_topic_or_partition


def test_alter_and_incremental_alter_topic_configs(admin: AdminClient) -> None:
    _results(admin.create_topics([NewTopic("ca-tuned", 1, 1, config={"retention.ms": "1000"})]))
    resource = ConfigResource(
        "topic", "ca-tuned",
        incremental_configs=[ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)],
    )
    _results(admin.incremental_alter_configs([resource]))
    configs = _describe(admin, "topic", "ca-tuned")
    assert (configs["cleanup.policy"].value, configs["retention.ms"].value) == ("compact", "1000")

    # AlterConfigs replaces the whole set of dynamic topic configs, as in Kafka.
    _results(admin.alter_configs([ConfigResource("topic", "ca-tuned", set_config={"retention.ms": "2000"})]))
    configs = _describe(admin, "topic", "ca-tuned")
    assert (configs["cleanup.policy"].value, configs["retention.ms"].value) == ("delete", "2000")

    invalid = ConfigResource(
        "topic", "ca-tuned",
        incremental_configs=[ConfigEntry("retention.ms", "later", incremental_operation=AlterConfigOpType.SET)],
    )
    (future,) = admin.incremental_alter_configs([invalid]).values()
    assert _error(future).code() == ErrorCode.invalid_config
    (future,) = admin.describe_configs([ConfigResource("topic", "ca-missing")]).values()
    assert _error(future).code() == ErrorCode.unknown_topic_or_partition


def test_broker_configs_describe_and_alter(admin: AdminClient, shared_broker: BrokerProcess) -> None:
    node = str(shared_broker.node_id)
    configs = _describe(admin, "broker", node)
    assert configs["num.partitions"].value == "1"
    assert configs["auto.create.topics.enable"].value == "true"
    assert configs["log.dirs"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    dynamic = [name for name, entry in configs.items() if not entry.is_read_only]
    assert dynamic, "some broker configs must be dynamically alterable"
    key = "log.retention.ms" if "log.retention.ms" in dynamic else dynamic[0]
    value = "7200000" if key == "log.retention.ms" else configs[key].value

    resource = ConfigResource(
        "broker", node, incremental_configs=[ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)]
    )
    _results(admin.incremental_alter_configs([resource]))
    altered = _describe(admin, "broker", node)[key]
    assert altered.value == value and altered.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value

    read_only = ConfigResource(
        "broker", node, incremental_configs=[ConfigEntry("log.dirs", "/x", incremental_operation=AlterConfigOpType.SET)]
    )
    (future,) = admin.incremental_alter_configs([read_only]).values()
    assert _error(future).code() == ErrorCode.invalid_request  # Kafka's code for a broker value (KAFKA-13609)
    legacy = ConfigResource("broker", node, set_config={"num.io.threads": "0"})
    (future,) = admin.alter_configs([legacy]).values()
    assert _error(future).code() == ErrorCode.invalid_request


def test_kafka_python_admin_basics(shared_broker: BrokerProcess) -> None:

    client = KafkaAdminClient(bootstrap_servers=shared_broker.bootstrap, request_timeout_ms=10000)
    try:
        client.create_topics([KNewTopic("kp-topic", 2, 1, topic_configs={"retention.ms": "60000"})])
        with pytest.raises(TopicAlreadyExistsError):
            client.create_topics([KNewTopic("kp-topic", 2, 1)])
        assert "kp-topic" in client.list_topics()
        client.create_partitions({"kp-topic": KNewPartitions(total_count=3)})
        (described,) = client.describe_topics(["kp-topic"])
        assert len(described["partitions"]) == 3
        topic = KConfigResource(ConfigResourceType.TOPIC, "kp-topic")
        modified = client.describe_configs([topic])["topic"]["kp-topic"]  # only non-default values by default
        assert modified["retention.ms"]["value"] == "60000"
        assert "cleanup.policy" not in modified
        everything = client.describe_configs([topic], config_filter="all")["topic"]["kp-topic"]
        assert everything["cleanup.policy"]["value"] == "delete"
        client.alter_configs([KConfigResource(ConfigResourceType.TOPIC, "kp-topic", configs={"retention.ms": "5"})])
        assert client.describe_configs([topic])["topic"]["kp-topic"]["retention.ms"]["value"] == "5"
        client.delete_topics(["kp-topic"])
        assert "kp-topic" not in client.list_topics()
    finally:
        client.close()


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is installed by scripts/install-system-deps.sh")
def test_kcat_lists_brokers_and_topics(admin: AdminClient, shared_broker: BrokerProcess) -> None:
    _results(admin.create_topics([NewTopic("kcat-visible", 2, 1)]))
    out = subprocess.run(
        ["kcat", "-L", "-b", shared_broker.bootstrap, "-m", "10"],
        capture_output=True, text=True, timeout=30, check=True,
    ).stdout
    assert f"broker {shared_broker.node_id} at 127.0.0.1:{shared_broker.port}" in out
    assert 'topic "kcat-visible" with 2 partitions' in out


def test_describe_cluster(admin: AdminClient, shared_broker: BrokerProcess) -> None:
    cluster = admin.describe_cluster().result(timeout=TIMEOUT)
    assert [(n.id, n.host, n.port) for n in cluster.nodes] == [(shared_broker.node_id, "127.0.0.1", shared_broker.port)]
    assert cluster.controller.id == shared_broker.node_id
    assert cluster.cluster_id


def _wire_create(client: WireClient, name: str, configs: dict[str, str] | None = None) -> uuid.UUID:
    cls = codec.request_class(19, 7)
    entries = tuple(schema.build_nested(schema.field_entity(cls, "topics"), "configs",
                                       name=k, value=v) for k, v in (configs or {}).items())
    topic = schema.build_nested(cls, "topics", name=name, num_partitions=1, replication_factor=1, configs=entries)
    result = client.request(schema.build(cls, topics=(topic,), timeout=5000)).topics[0]
    assert result.error_code == ErrorCode.none
    topic_id: uuid.UUID = result.topic_id
    return topic_id


def test_delete_topics_by_id_and_by_name_on_the_wire(
    shared_broker: BrokerProcess, wire: Callable[[int], WireClient]
) -> None:
    client = wire(shared_broker.port)
    by_id = _wire_create(client, "wire-del-id")
    _wire_create(client, "wire-del-name")
    v6 = codec.request_class(20, 6)
    states = (
        schema.build_nested(v6, "topics", name=None, topic_id=by_id),
        schema.build_nested(v6, "topics", name=None, topic_id=uuid.uuid4()),
        schema.build_nested(v6, "topics", name="wire-del-id", topic_id=by_id),  # both given: invalid
    )
    results = client.request(schema.build(v6, topics=states, timeout=5000)).responses
    codes = sorted((r.error_code for r in results), key=int)
    assert codes == sorted([ErrorCode.none, ErrorCode.unknown_topic_id, ErrorCode.invalid_request], key=int)
    deleted = next(r for r in results if r.error_code == ErrorCode.none)
    assert (deleted.name, deleted.topic_id) == ("wire-del-id", by_id)

    v1 = codec.request_class(20, 1)
    (result,) = client.request(schema.build(v1, topic_names=("wire-del-name",), timeout=5000)).responses
    assert (result.name, result.error_code) == ("wire-del-name", ErrorCode.none)
    names = {t.name for t in client.request(schema.build(codec.request_class(3, 12), topics=None)).topics}
    assert not names & {"wire-del-id", "wire-del-name"}


def test_describe_configs_synonyms_types_and_key_filter(
    shared_broker: BrokerProcess, wire: Callable[[int], WireClient]
) -> None:
    client = wire(shared_broker.port)
    _wire_create(client, "wire-configs", {"retention.ms": "1234"})
    for version in range(1, 5):
        cls = codec.request_class(32, version)
        resource = schema.build_nested(
            cls, "resources", resource_type=2, resource_name="wire-configs",
            configuration_keys=("retention.ms", "no.such.key"),
        )
        response = client.request(schema.build(cls, resources=(resource,), include_synonyms=True,
                                              include_documentation=True))
        (result,) = response.results
        assert result.error_code == ErrorCode.none
        (entry,) = result.configs  # only the asked-for key that exists
        assert entry.name == "retention.ms" and entry.value == "1234"
        assert entry.config_source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value and not entry.read_only
        synonyms = [(s.name, s.value, s.source) for s in entry.synonyms]
        assert synonyms[0] == ("retention.ms", "1234", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
        assert synonyms[-1] == ("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG.value)
        if version >= 3:
            assert entry.config_type == 5  # LONG


def _topic_config(client: WireClient, topic: str, key: str) -> str | None:
    cls = codec.request_class(32, 4)
    resource = schema.build_nested(cls, "resources", resource_type=2, resource_name=topic, configuration_keys=(key,))
    (result,) = client.request(schema.build(cls, resources=(resource,))).results
    (entry,) = result.configs
    value: str | None = entry.value
    return value


def test_repeated_keys_last_wins_in_alter_configs_but_are_rejected_incrementally(
    shared_broker: BrokerProcess, wire: Callable[[int], WireClient]
) -> None:
    """librdkafka's test helpers re-send every described config plus the change, so a key can appear twice in a
    legacy AlterConfigs; Kafka keeps the last value. IncrementalAlterConfigs refuses repeated keys."""
    client = wire(shared_broker.port)
    _wire_create(client, "wire-dup-keys")
    legacy = codec.request_class(33, 1)
    entries = tuple(
        schema.build_nested(schema.field_entity(legacy, "resources"), "configs", name="retention.ms", value=v)
        for v in ("1000", "2000")
    )
    resource = schema.build_nested(legacy, "resources", resource_type=2, resource_name="wire-dup-keys", configs=entries)
    (result,) = client.request(schema.build(legacy, resources=(resource,), validate_only=False)).responses
    assert result.error_code == ErrorCode.none
    assert _topic_config(client, "wire-dup-keys", "retention.ms") == "2000"

    incremental = codec.request_class(44, 1)
    ops = tuple(
        schema.build_nested(schema.field_entity(incremental, "resources"), "configs", name="retention.ms",
                           config_operation=0, value=v)
        for v in ("3000", "4000")
    )
    resource = schema.build_nested(incremental, "resources", resource_type=2, resource_name="wire-dup-keys",
                                  configs=ops)
    (result,) = client.request(schema.build(incremental, resources=(resource,), validate_only=False)).responses
    assert result.error_code == ErrorCode.invalid_request
    assert _topic_config(client, "wire-dup-keys", "retention.ms") == "2000"


def test_describe_configs_with_an_empty_key_list_describes_every_key(
    shared_broker: BrokerProcess, wire: Callable[[int], WireClient]
) -> None:
    """Kafka's ConfigHelper reads an empty (non-null) configuration_keys as a null one: all keys, topic or broker."""
    client = wire(shared_broker.port)
    _wire_create(client, "wire-all-keys", {"retention.ms": "1234"})
    cls = codec.request_class(32, 4)
    for resource_type, name, key in ((2, "wire-all-keys", "retention.ms"), (4, "0", "num.io.threads")):
        described = {}
        for keys in (None, ()):
            resource = schema.build_nested(cls, "resources", resource_type=resource_type, resource_name=name,
                                          configuration_keys=keys)
            (result,) = client.request(schema.build(cls, resources=(resource,))).results
            assert result.error_code == ErrorCode.none
            described[keys] = {entry.name for entry in result.configs}
        assert key in described[()]
        assert described[()] == described[None]


def test_a_config_without_a_value_is_refused_not_dropped(
    shared_broker: BrokerProcess, wire: Callable[[int], WireClient]
) -> None:
    """Dropping a null value would create a topic with the default, or (AlterConfigs) delete the key; Kafka refuses
    it: CreateTopics with INVALID_CONFIG, AlterConfigs and an incremental APPEND with INVALID_REQUEST."""
    client = wire(shared_broker.port)
    create = codec.request_class(19, 7)
    config = schema.build_nested(schema.field_entity(create, "topics"), "configs", name="retention.ms", value=None)
    topic = schema.build_nested(create, "topics", name="wire-null-create", num_partitions=1, replication_factor=1,
                                configs=(config,))
    (result,) = client.request(schema.build(create, topics=(topic,), timeout=5000)).topics
    assert (result.error_code, result.error_message) == (
        ErrorCode.invalid_config, "Null value not supported for topic configs: retention.ms"
    )
    names = {t.name for t in client.request(schema.build(codec.request_class(3, 12), topics=None)).topics}
    assert "wire-null-create" not in names

    _wire_create(client, "wire-null-alter", {"retention.ms": "1000", "cleanup.policy": "compact"})
    legacy = codec.request_class(33, 2)
    entries = tuple(
        schema.build_nested(schema.field_entity(legacy, "resources"), "configs", name=k, value=v)
        for k, v in (("retention.ms", "2000"), ("cleanup.policy", None))
    )
    resource = schema.build_nested(legacy, "resources", resource_type=2, resource_name="wire-null-alter",
                                   configs=entries)
    (answer,) = client.request(schema.build(legacy, resources=(resource,), validate_only=False)).responses
    assert (answer.error_code, answer.error_message) == (
        ErrorCode.invalid_request, "Null value not supported for : cleanup.policy"
    )

    incremental = codec.request_class(44, 1)
    op = schema.build_nested(schema.field_entity(incremental, "resources"), "configs", name="cleanup.policy",
                             config_operation=2, value=None)  # APPEND
    resource = schema.build_nested(incremental, "resources", resource_type=2, resource_name="wire-null-alter",
                                   configs=(op,))
    (answer,) = client.request(schema.build(incremental, resources=(resource,), validate_only=False)).responses
    assert answer.error_code == ErrorCode.invalid_request
    assert _topic_config(client, "wire-null-alter", "cleanup.policy") == "compact"
    assert _topic_config(client, "wire-null-alter", "retention.ms") == "1000"


@pytest.mark.parametrize("api_key", [33, 44])
def test_a_resource_named_twice_in_one_request_is_refused_both_times(
    shared_broker: BrokerProcess, wire: Callable[[int], WireClient], api_key: int
) -> None:
    """Kafka answers every copy INVALID_REQUEST "Each resource must appear at most once." and applies neither."""
    client = wire(shared_broker.port)
    topic = f"wire-twice-{api_key}"
    _wire_create(client, topic, {"retention.ms": "1000"})
    cls = codec.request_class(api_key, 1)
    resource_cls = schema.field_entity(cls, "resources")
    op = {"config_operation": 0} if api_key == 44 else {}
    resources = tuple(
        schema.build(resource_cls, resource_type=2, resource_name=topic, configs=(
            schema.build_nested(resource_cls, "configs", name="retention.ms", value=value, **op),
        ))
        for value in ("2000", "3000")
    )
    answers = client.request(schema.build(cls, resources=resources, validate_only=False)).responses
    assert [(a.resource_name, a.error_code, a.error_message) for a in answers] == [
        (topic, ErrorCode.invalid_request, "Each resource must appear at most once.")
    ] * 2
    assert _topic_config(client, topic, "retention.ms") == "1000"


def test_config_requests_judge_a_topic_name_before_looking_the_topic_up(
    shared_broker: BrokerProcess, wire: Callable[[int], WireClient]
) -> None:
    """Kafka runs Topic.validate first: an illegal name is INVALID_TOPIC_EXCEPTION, not an unknown topic, and an
    empty one in an alter request is INVALID_REQUEST "Default topic resources are not allowed."."""
    client = wire(shared_broker.port)
    describe = codec.request_class(32, 4)
    resources = tuple(
        schema.build_nested(describe, "resources", resource_type=2, resource_name=name, configuration_keys=None)
        for name in ("bad/name", "", "wire-never-created")
    )
    results = client.request(schema.build(describe, resources=resources)).results
    assert [(r.resource_name, r.error_code) for r in results] == [
        ("bad/name", ErrorCode.invalid_topic_exception), ("", ErrorCode.invalid_topic_exception),
        ("wire-never-created", ErrorCode.unknown_topic_or_partition),
    ]
    for api_key in (33, 44):
        alter = codec.request_class(api_key, 1)
        resource_cls = schema.field_entity(alter, "resources")
        op = {"config_operation": 0} if api_key == 44 else {}
        resources = tuple(
            schema.build(resource_cls, resource_type=2, resource_name=name, configs=(
                schema.build_nested(resource_cls, "configs", name="retention.ms", value="1000", **op),
            ))
            for name in ("bad/name", "")
        )
        answers = client.request(schema.build(alter, resources=resources, validate_only=False)).responses
        assert [(a.error_code, a.error_message) for a in answers] == [
            (ErrorCode.invalid_topic_exception, 'Topic name "bad/name" is illegal, it contains a character other '
             "than ASCII alphanumerics, '.', '_' and '-'"),
            (ErrorCode.invalid_request, "Default topic resources are not allowed."),
        ]


def test_tiered_storage_topic_keys_are_described_with_why_they_change_nothing(
    shared_broker: BrokerProcess, wire: Callable[[int], WireClient]
) -> None:
    client = wire(shared_broker.port)
    _wire_create(client, "wire-tiers", {"local.retention.ms": "60000"})
    cls = codec.request_class(32, 4)
    keys = ("local.retention.ms", "local.retention.bytes", "remote.storage.enable")
    resource = schema.build_nested(cls, "resources", resource_type=2, resource_name="wire-tiers",
                                  configuration_keys=keys)
    (result,) = client.request(schema.build(cls, resources=(resource,), include_synonyms=True,
                                          include_documentation=True)).results
    entries = {entry.name: entry for entry in result.configs}
    assert {name: entries[name].value for name in keys} == {
        "local.retention.ms": "60000", "local.retention.bytes": "-2", "remote.storage.enable": "false"
    }
    assert [s.name for s in entries["local.retention.bytes"].synonyms] == ["log.local.retention.bytes"]
    assert "no local tier" in entries["local.retention.ms"].documentation
