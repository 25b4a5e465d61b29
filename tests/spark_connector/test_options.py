"""The ``fjord`` source's option parsing, without Spark: Spark's Kafka option names and rules, one error naming the
option for each mistake."""

from __future__ import annotations

import re

import pytest
from pyspark.sql.types import StringType, StructField, StructType

from spark_connector.options import (
    EARLIEST,
    LATEST,
    Assign,
    OptionError,
    Subscribe,
    SubscribePattern,
    client_config,
    parse_options,
    read_uncommitted,
)
from spark_connector.sink import sink_settings
from spark_connector.source import read_settings

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "a, b"}


def test_defaults_follow_sparks_kafka_source() -> None:
    batch = parse_options(BASE, streaming=False)
    assert batch.subscription == Subscribe(("a", "b"))
    assert (batch.starting, batch.ending) == ("earliest", "latest")
    assert batch.fail_on_data_loss and not batch.include_headers
    assert batch.max_offsets_per_trigger is None and batch.min_partitions is None
    assert parse_options(BASE, streaming=True).starting == "latest"


def test_names_are_case_insensitive_and_kafka_params_pass_through() -> None:
    options = parse_options({"KAFKA.BOOTSTRAP.SERVERS": "h:1", "Subscribe": "t", "kafka.client.id": "me",
                             "kafka.isolation.level": "read_committed", "INCLUDEHEADERS": "TRUE",
                             "maxOffsetsPerTrigger": "50", "minPartitions": "4", "failOnDataLoss": "false"},
                            streaming=True)
    assert options.include_headers and not options.fail_on_data_loss
    assert (options.max_offsets_per_trigger, options.min_partitions) == (50, 4)
    assert client_config(options) == {"bootstrap.servers": "h:1", "client.id": "me",
                                      "isolation.level": "read_committed"}
    assert not read_uncommitted(options)
    assert read_uncommitted(parse_options(BASE, streaming=True))


def test_group_ids_are_sparks() -> None:
    """A group id unique to each read, Spark's prefix by default, ``groupIdPrefix`` or ``kafka.group.id`` if given."""
    batch, stream = parse_options(BASE, streaming=False), parse_options(BASE, streaming=True)
    assert re.fullmatch(r"spark-kafka-relation-[0-9a-f-]{36}-executor", batch.executor_group_id)
    assert re.fullmatch(r"spark-kafka-source-[0-9a-f-]{36}-executor", stream.executor_group_id)
    assert stream.executor_group_id != parse_options(BASE, streaming=True).executor_group_id
    assert read_settings(stream).consumer_config()["group.id"] == stream.executor_group_id
    prefixed = parse_options({**BASE, "groupIdPrefix": "team-a"}, streaming=True)
    assert re.fullmatch(r"team-a-[0-9a-f-]{36}-executor", read_settings(prefixed).consumer_config()["group.id"])
    fixed = parse_options({**BASE, "groupIdPrefix": "team-a", "kafka.group.id": "billing"}, streaming=False)
    assert read_settings(fixed).consumer_config()["group.id"] == "billing"


def test_per_trigger_options_are_ignored_in_batch_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    """As Spark's Kafka source logs "minOffsetsPerTrigger option ignored in batch queries"."""
    parse_options({**BASE, "minOffsetsPerTrigger": "100", "maxTriggerDelay": "5m"}, streaming=False)
    assert "minOffsetsPerTrigger option ignored in batch queries" in caplog.text
    assert "maxTriggerDelay option ignored in batch queries" in caplog.text


def test_a_stream_takes_minoffsetspertrigger_and_maxtriggerdelay_as_spark_times() -> None:
    held = parse_options({**BASE, "minOffsetsPerTrigger": "100", "maxTriggerDelay": "5m"}, streaming=True)
    assert (held.min_offsets_per_trigger, held.max_trigger_delay_ms) == (100, 300_000)
    default = parse_options({**BASE, "minOffsetsPerTrigger": "100"}, streaming=True)
    assert default.max_trigger_delay_ms == 15 * 60_000  # Spark's default
    for text, ms in (("30s", 30_000), ("1500", 1_500), ("250ms", 250), ("2h", 7_200_000), ("1d", 86_400_000),
                     ("2000us", 2), (" 3MIN ", 180_000)):
        assert parse_options({**BASE, "maxTriggerDelay": text}, streaming=True).max_trigger_delay_ms == ms
    assert parse_options(BASE, streaming=True).min_offsets_per_trigger is None


def test_subscriptions() -> None:
    pattern = parse_options({"kafka.bootstrap.servers": "h:1", "subscribePattern": "ev.*"}, streaming=False)
    assert isinstance(pattern.subscription, SubscribePattern)
    assert pattern.subscription.matches("events") and not pattern.subscription.matches("xevents")
    assign = parse_options({"kafka.bootstrap.servers": "h:1", "assign": '{"t": [1, 0], "u": [2]}'}, streaming=False)
    assert assign.subscription == Assign((("t", 0), ("t", 1), ("u", 2)))


def test_per_partition_json_with_markers() -> None:
    options = parse_options({**BASE, "startingOffsets": '{"a": {"0": 5, "1": -2}}',
                             "endingOffsets": '{"a": {"0": 9, "1": -1}}'}, streaming=False)
    assert options.starting == {("a", 0): 5, ("a", 1): EARLIEST}
    assert options.ending == {("a", 0): 9, ("a", 1): LATEST}
    by_time = parse_options({**BASE, "startingOffsetsByTimestamp": '{"a": {"0": 1000}}'}, streaming=True)
    assert by_time.starting_by_timestamp == {("a", 0): 1000}
    ending = parse_options({**BASE, "startingOffsetsByTimestamp": '{"a": {"0": 1000}}',
                            "endingOffsetsByTimestamp": '{"a": {"0": 2000}}', "endingTimestamp": "3000"},
                           streaming=False)
    assert (ending.ending_by_timestamp, ending.ending_timestamp) == ({("a", 0): 2000}, 3000)


JAAS = 'org.apache.kafka.common.security.{}LoginModule required username="app" password="s3 \\"cr\\"et";'


def test_java_client_settings_are_translated_for_librdkafka() -> None:
    options = parse_options({**BASE, "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM-SHA-512",
                             "kafka.sasl.jaas.config": JAAS.format("scram.Scram"),
                             "kafka.ssl.endpoint.identification.algorithm": "",
                             "kafka.fetch.max.wait.ms": "200", "kafka.max.request.size": "2000000"}, streaming=True)
    assert options.kafka_params == {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                                    "sasl.username": "app", "sasl.password": 's3 "cr"et',
                                    "ssl.endpoint.identification.algorithm": "none", "fetch.wait.max.ms": "200",
                                    "message.max.bytes": "2000000"}
    plain = {"kafka.bootstrap.servers": "h:1", "topic": "t", "kafka.sasl.mechanism": "PLAIN",
             "kafka.security.protocol": "SASL_PLAINTEXT",
             "kafka.sasl.jaas.config": JAAS.format("kafkashaded.org.apache.kafka.common.security.plain.Plain"
                                                   .removeprefix("org.apache.kafka.common.security."))}
    producer = sink_settings(plain, StructType([StructField("value", StringType())])).producer_config
    assert (producer["sasl.username"], producer["sasl.password"]) == ("app", 's3 "cr"et')
    assert "sasl.jaas.config" not in producer


def test_sink_takes_the_acks_and_idempotence_it_enforces() -> None:
    value = StructType([StructField("value", StringType())])
    for acks, idempotence in (("all", "true"), ("-1", "TRUE"), ("ALL", "True")):
        producer = sink_settings({**BASE, "topic": "t", "kafka.acks": acks, "kafka.enable.idempotence": idempotence},
                                 value).producer_config
        assert (producer["acks"], producer["enable.idempotence"]) == ("all", True)
    for weaker in ({"kafka.acks": "1"}, {"kafka.acks": "0"}, {"kafka.enable.idempotence": "false"}):
        with pytest.raises(OptionError, match=rf"option '{next(iter(weaker))}' is not supported"):
            sink_settings({**BASE, "topic": "t", **weaker}, value)


@pytest.mark.parametrize(("options", "message"), [
    ({"kafka.ssl.truststore.location": "/etc/ca.jks"},
     "option 'kafka.ssl.truststore.location' is not a setting of the Kafka client here (librdkafka, not Java's): "
     "librdkafka reads CA certificates as PEM: give 'kafka.ssl.ca.location'"),
    ({"kafka.default.api.timeout.ms": "60000"}, "option 'kafka.default.api.timeout.ms' is not a setting"),
    ({"kafka.buffer.memory": "1000000"}, "kafka.queue.buffering.max.kbytes"),
    ({"kafka.security.protocol": "FOO"}, "option 'kafka.security.protocol' is refused by the Kafka client"),
    ({"kafka.linger.ms": "soon"}, "option 'kafka.linger.ms' is refused by the Kafka client"),
    ({"kafka.sasl.jaas.config": "com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true;"},
     "option 'kafka.sasl.jaas.config': only Kafka's PlainLoginModule and ScramLoginModule"),
    ({"kafka.sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
      'username="3fKzq-token-id" password="aG1hYw==" tokenauth="true";'},
     "tokenauth=true logs in with a delegation token, which librdkafka (the Kafka client here) cannot do"),
    ({"kafka.sasl.jaas.config": JAAS.format("plain.Plain"), "kafka.sasl.username": "other"},
     "'kafka.sasl.jaas.config' and 'kafka.sasl.username'"),
    ({"kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "PLAIN"},
     "the 'kafka.*' options are refused by the Kafka client (librdkafka): sasl.username and sasl.password must be set"),
])
def test_settings_librdkafka_refuses_are_option_errors(options: dict[str, str], message: str) -> None:
    """Checked on the driver for the source and the sink alike, before any client connects or task runs."""
    with pytest.raises(OptionError) as error:
        parse_options({**BASE, **options}, streaming=False)
    assert message in str(error.value)
    with pytest.raises(OptionError) as error:
        sink_settings({**BASE, "topic": "t", **options}, StructType([StructField("value", StringType())]))
    assert message in str(error.value)


def test_a_client_file_only_the_executors_have_stops_the_source_not_the_sink() -> None:
    """The source makes its clients on the driver, the sink only on the executors: a CA file missing on the driver
    fails a read there, and not a write (whose tasks read the file where it is), as with Spark's Kafka sink."""
    options = {"kafka.security.protocol": "SSL", "kafka.ssl.ca.location": "/nonexistent/fjord-test-ca.pem"}
    with pytest.raises(OptionError, match="refused by the Kafka client"):
        parse_options({**BASE, **options}, streaming=False)
    settings = sink_settings({**BASE, "topic": "t", **options}, StructType([StructField("value", StringType())]))
    assert settings is not None


@pytest.mark.parametrize(("options", "streaming", "names"), [
    ({"subscribe": "t"}, False, "kafka.bootstrap.servers"),
    ({"kafka.bootstrap.servers": "h:1"}, False, "'subscribe', 'subscribePattern', 'assign'"),
    ({**BASE, "assign": '{"t":[0]}'}, False, "'subscribe', 'subscribePattern', 'assign'"),
    ({"kafka.bootstrap.servers": "h:1", "assign": "[0]"}, False, "assign"),
    ({"kafka.bootstrap.servers": "h:1", "subscribePattern": "("}, False, "subscribePattern"),
    ({**BASE, "startingOffsets": "latest"}, False, "startingOffsets"),
    ({**BASE, "startingOffsets": '{"a": {"0": -1}}'}, False, "startingOffsets"),
    ({**BASE, "startingOffsets": '{"a": {"x": 1}}'}, True, "startingOffsets"),
    ({**BASE, "startingOffsets": "nope"}, True, "startingOffsets"),
    ({**BASE, "endingOffsets": "earliest"}, False, "endingOffsets"),
    ({**BASE, "endingOffsets": "latest"}, True, "endingOffsets"),
    ({**BASE, "maxOffsetsPerTrigger": "0"}, True, "maxOffsetsPerTrigger"),
    ({**BASE, "minPartitions": "many"}, False, "minPartitions"),
    ({**BASE, "includeHeaders": "yes"}, False, "includeHeaders"),
    ({**BASE, "failOnDataLoss": "1"}, False, "failOnDataLoss"),
    ({**BASE, "startingOffsetsByTimestamp": '{"a": {"0": -5}}'}, False, "startingOffsetsByTimestamp"),
    ({**BASE, "endingOffsetsByTimestamp": '{"a": {"0": 5}}'}, True,
     "'endingOffsetsByTimestamp': ending timestamp not valid in streaming queries"),
    ({**BASE, "endingTimestamp": "5"}, True, "'endingTimestamp': ending timestamp not valid in streaming queries"),
    ({**BASE, "endingTimestamp": "soon"}, False, "endingTimestamp"),
    ({**BASE, "endingOffsetsByTimestamp": '{"a": {"0": -5}}'}, False, "endingOffsetsByTimestamp"),
    ({**BASE, "startingOffsetsByTimestamp": '{"a": {"0": 9}}', "endingOffsetsByTimestamp": '{"a": {"0": 5}}'},
     False, "starting timestamp 9 of a-0 is after its ending timestamp 5"),
    ({**BASE, "startingOffsetsByTimestamp": '{"a": {"0": 1}}', "endingOffsetsByTimestamp": '{"a": {"1": 5}}'},
     False, "must name the same partitions"),
    ({**BASE, "minOffsetsPerTrigger": "0"}, True, "option 'minOffsetsPerTrigger' must be a positive integer"),
    ({**BASE, "minOffsetsPerTrigger": "20", "maxOffsetsPerTrigger": "15"}, True,
     "The value of minOffsetPerTrigger(20) is higher than the maxOffsetsPerTrigger(15)."),
    ({**BASE, "maxTriggerDelay": "5 minutes"}, True, "option 'maxTriggerDelay' must be a time such as '15m'"),
    ({**BASE, "maxTriggerDelay": "-1s"}, True, "option 'maxTriggerDelay' must be a time"),
    ({**BASE, "kafka.auto.offset.reset": "earliest"}, False, "kafka.auto.offset.reset"),
    ({**BASE, "kafka.enable.auto.commit": "true"}, False, "kafka.enable.auto.commit"),
])
def test_mistakes_name_the_option(options: dict[str, str], streaming: bool, names: str) -> None:
    with pytest.raises(OptionError) as error:
        parse_options(options, streaming=streaming)
    assert names in str(error.value)
