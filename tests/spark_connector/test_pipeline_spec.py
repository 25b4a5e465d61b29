"""Pipeline files parsed and checked without Spark or a broker: the examples parse, overrides apply, and each
mistake is one SpecError naming its key path."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from spark_connector.pipeline import SpecError, describe, load_pipeline, parse_pipeline
from spark_connector.pipeline.model import Decode, Trigger, Watermark
from spark_connector.pipeline.spec import apply_overrides
from testkit.node_process import REPO

EXAMPLES = REPO / "config" / "pipelines"


def minimal(**sections: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "source": {"bootstrap": "127.0.0.1:9092", "subscribe": "orders"},
        "decode": {"value": "string"},
        "sink": {"format": "console"},
    }
    document.update(sections)
    return document


def error(document: Any) -> str:
    with pytest.raises(SpecError) as caught:
        parse_pipeline(document)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_examples_parse() -> None:
    revenue = load_pipeline(EXAMPLES / "orders_revenue.yaml")
    assert revenue.name == "orders_revenue"
    assert revenue.source.format == "fjord" and revenue.source.subscribe == ("orders",)
    assert revenue.value == Decode("json", "order_id STRING, customer STRING, amount DECIMAL(12,2), ts TIMESTAMP")
    assert revenue.key == Decode("string")
    assert revenue.watermark == Watermark("ts", "1 minute")
    assert revenue.sink.format == "parquet" and revenue.sink.output_mode == "append"
    assert revenue.trigger == Trigger("availableNow")
    enrich = load_pipeline(EXAMPLES / "filter_enrich.yaml")
    assert enrich.sink.format == "fjord" and enrich.sink.topic == "large_orders"
    assert "WHERE amount >= 50" in enrich.sql


def test_source_options_are_sparks_kafka_options() -> None:
    pipeline = parse_pipeline(
        minimal(
            source={
                "bootstrap": "b:9092",
                "assign": {"orders": [1, 0]},
                "startingOffsets": {"orders": {0: 5, 1: -2}},
                "options": {"maxOffsetsPerTrigger": 100, "failOnDataLoss": False},
            }
        )
    )
    assert pipeline.source.spark_options() == {
        "kafka.bootstrap.servers": "b:9092",
        "includeHeaders": "true",
        "assign": '{"orders": [0, 1]}',
        "startingOffsets": json.dumps({"orders": {"0": 5, "1": -2}}, sort_keys=True),
        "maxOffsetsPerTrigger": "100",
        "failOnDataLoss": "false",
    }
    by_time = parse_pipeline(
        minimal(source={"bootstrap": "b", "subscribePattern": "orders-.*", "startingTimestamp": "2026-01-01T00:00:01"})
    )
    assert by_time.source.spark_options()["startingTimestamp"] == "1767225601000"
    assert by_time.source.spark_options()["subscribePattern"] == "orders-.*"


def test_overrides_edit_the_document_before_the_checks(tmp_path: Path) -> None:
    pipeline = load_pipeline(
        EXAMPLES / "orders_revenue.yaml",
        ["source.bootstrap=10.0.0.1:9092", "trigger=once", "sink.options.compression=zstd", "spark.master=local[2]"],
    )
    assert pipeline.source.bootstrap == "10.0.0.1:9092"
    assert pipeline.trigger == Trigger("once")
    assert pipeline.sink.options == {"compression": "zstd"}
    assert pipeline.master == "local[2]"
    assert apply_overrides({"a": {"b": 1}}, ["a.c=[1, 2]"]) == {"a": {"b": 1, "c": [1, 2]}}
    with pytest.raises(SpecError, match=r"^--set: a\.b is not a map"):
        apply_overrides({"a": {"b": 1}}, ["a.b.c=2"])


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"source": None}, "source: is required"),
        ({"source": {"bootstrap": "b"}}, "source.subscribe: exactly one of"),
        ({"source": {"bootstrap": "b", "subscribe": "t", "subscribePattern": "x"}}, "source.subscribe: exactly one"),
        ({"source": {"subscribe": "t"}}, "source.bootstrap: is required"),
        ({"source": {"bootstrap": "b", "subscribe": "t", "format": "pulsar"}}, "source.format: must be one of fjord"),
        ({"source": {"bootstrap": "b", "subscribePattern": "("}}, "source.subscribePattern: is not a valid regular"),
        ({"source": {"bootstrap": "b", "assign": {"t": ["x"]}}}, "source.assign.t: must be a list of partition"),
        (
            {"source": {"bootstrap": "b", "subscribe": "t", "startingOffsets": {"t": {"0": -3}}}},
            "source.startingOffsets.t.0: must be an offset >= 0",
        ),
        (
            {"source": {"bootstrap": "b", "subscribe": "t", "startingTimestamp": "yesterday"}},
            "source.startingTimestamp: must be milliseconds",
        ),
        (
            {"source": {"bootstrap": "b", "subscribe": "t", "startingTimestamp": 5, "startingOffsets": "latest"}},
            "source.startingTimestamp: set either",
        ),
        (
            {"source": {"bootstrap": "b", "subscribe": "t", "options": {"subscribe": "u"}}},
            "source.options.subscribe: is set by the runner",
        ),
        ({"decode": {"value": "protobuf"}}, "decode.value.format: must be one of json, csv, avro, raw, string"),
        ({"decode": {"value": {"format": "csv"}}}, "decode.value.schema: is required for csv"),
        ({"decode": {"value": {"format": "avro"}}}, "decode.value.schemaFile: is required for avro"),
        (
            {"decode": {"value": {"format": "avro", "schemaFile": "/nonexistent.avsc"}}},
            "decode.value.schemaFile: cannot read /nonexistent.avsc",
        ),
        ({"decode": {"value": {"format": "raw", "schema": "a INT"}}}, "decode.value.schema: raw takes no schema"),
        ({"decode": {"key": "string"}}, "decode.value: is required"),
        ({"transform": {"sql": "SELECT 1", "watermark": {"column": "ts"}}}, "transform.watermark.delay: is required"),
        ({"transform": {"watermark": {"column": "ts", "delay": "a while"}}}, "transform.watermark.delay: must be an"),
        ({"sink": {"format": "parquet", "checkpoint": "c"}}, "sink.path: is required for the parquet sink"),
        ({"sink": {"format": "json", "path": "p"}}, "sink.checkpoint: is required for the json sink"),
        ({"sink": {"format": "fjord", "path": "p", "checkpoint": "c"}}, "sink.path: does not apply to the fjord sink"),
        ({"sink": {"format": "console", "outputMode": "sometimes"}}, "sink.outputMode: must be one of append"),
        ({"trigger": "hourly"}, "trigger: must be availableNow, once, or a map"),
        (
            {"trigger": {"once": True, "availableNow": True}},
            "trigger: exactly one of availableNow, once, processingTime",
        ),
        ({"trigger": {"once": "yes"}}, "trigger.once: must be true"),
        ({"spark": {"conf": {"spark.x": {"nested": 1}}}}, "spark.conf.spark.x: must be a string, number or boolean"),
        ({"sinks": {}}, "sinks: unknown key, did you mean sink?; the file takes name, source, decode"),
    ],
)
def test_mistakes_name_the_key(change: dict[str, Any], expected: str) -> None:
    document = minimal()
    for key, value in change.items():
        if value is None:
            document.pop(key)
        else:
            document[key] = value
    assert error(document).startswith(expected)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        # Misspelled keys are named before any check their absence would fail ("exactly one of ...", "required").
        (
            {"source": {"bootstrap": "b", "subscrib": "orders"}},
            "source.subscrib: unknown key, did you mean source.subscribe?; source takes format, bootstrap, subscribe",
        ),
        ({"source": {"bootstrap": "b", "subscribe": "t", "StartingOffsets": "earliest"}},
         "source.StartingOffsets: unknown key, did you mean source.startingOffsets?"),
        ({"sourc": {"bootstrap": "b", "subscribe": "t"}, "source": None}, "sourc: unknown key, did you mean source?"),
        ({"trigger": {"avaliableNow": True}}, "trigger.avaliableNow: unknown key, did you mean trigger.availableNow?"),
        ({"sink": {"format": "parquet", "path": "p", "checkpiont": "c"}},
         "sink.checkpiont: unknown key, did you mean sink.checkpoint?"),
        ({"decode": {"value": {"format": "json", "shema": "a INT"}}},
         "decode.value.shema: unknown key, did you mean decode.value.schema?"),
        ({"sink": {"format": "parquet", "path": "p", "checkpoint": "c", "colour": "red"}},
         "sink.colour: unknown key; sink takes format, outputMode"),
    ],
)
def test_misspelled_keys_name_the_nearest_known_key(change: dict[str, Any], expected: str) -> None:
    document = minimal()
    for key, value in change.items():
        if value is None:
            document.pop(key)
        else:
            document[key] = value
    assert error(document).startswith(expected)


def test_file_level_mistakes(tmp_path: Path) -> None:
    assert error([1, 2]).startswith("the pipeline file: must be a map")
    broken = tmp_path / "broken.yaml"
    broken.write_text("source:\n  bootstrap: [b\n")
    with pytest.raises(SpecError, match=r"is not valid YAML at line \d+, column \d+"):
        load_pipeline(broken)
    with pytest.raises(SpecError, match="cannot read the pipeline file"):
        load_pipeline(tmp_path / "missing.yaml")


def test_avro_schema_is_read_from_its_file(tmp_path: Path) -> None:
    schema = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "string"}]}
    (tmp_path / "order.avsc").write_text(json.dumps(schema))
    pipeline = parse_pipeline(minimal(decode={"value": {"format": "avro", "schemaFile": str(tmp_path / "order.avsc")}}))
    assert pipeline.value.schema is not None and json.loads(pipeline.value.schema) == schema


def test_plan_lists_every_part() -> None:
    pipeline = load_pipeline(EXAMPLES / "filter_enrich.yaml", ["sink.bootstrap=other:9092"])
    plan = describe(pipeline, master="local[*]", packages=(), jars=("/opt/kafka.jar",))
    lines = plan.splitlines()
    assert lines[1] == ("source     fjord source, subscribe orders on 127.0.0.1:9092, startingOffsets earliest")
    assert "sink       fjord sink, topic large_orders on other:9092, output mode append" in lines
    assert lines[-1] == "spark      master local[*]; jars /opt/kafka.jar"
