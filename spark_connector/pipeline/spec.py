"""A pipeline file (YAML), parsed and checked into frozen dataclasses before anything starts.

The file says where records come from (``source``), how their key and value are decoded (``decode``), the SQL over
the decoded rows (``transform``, the view is named ``source``), where results go (``sink``), how often
(``trigger``) and, optionally, Spark settings (``spark``). Every check a file can fail happens here, without Spark
or a broker, and fails with one :class:`SpecError` whose text names the key path and what is wrong
(``source.startingOffsets: must be 'earliest', 'latest', ...``), which the CLI prints as one line with exit status 2.

``--set KEY.PATH=VALUE`` overrides (see :func:`apply_overrides`) edit the parsed YAML before the checks, so one
example file serves any broker, topic or directory: the value is read as YAML (``--set trigger=once``,
``--set source.options.maxOffsetsPerTrigger=100``).

The checked result is :mod:`spark_connector.pipeline.model`'s ``Pipeline``.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Sequence
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import yaml

from spark_connector.pipeline.model import (
    DECODE_FORMATS,
    FILE_FORMATS,
    OUTPUT_MODES,
    SINK_FORMATS,
    SOURCE_FORMATS,
    TOPIC_FORMATS,
    Decode,
    Pipeline,
    Sink,
    Source,
    Trigger,
    Watermark,
)

#: Source options the runner sets from the keys of ``source`` itself; setting them in ``source.options`` too would
#: leave two answers to one question.
_RUNNER_SOURCE_OPTIONS = (
    "kafka.bootstrap.servers",
    "subscribe",
    "subscribepattern",
    "assign",
    "startingoffsets",
    "startingtimestamp",
    "startingoffsetsbytimestamp",
    "includeheaders",
    "endingoffsets",
)
_SOURCE_KEYS = ("format", "bootstrap", "subscribe", "subscribePattern", "assign", "startingOffsets",
                "startingTimestamp", "options")
_SINK_KEYS = ("format", "outputMode", "path", "partitionBy", "topic", "bootstrap", "checkpoint", "options")
_INTERVAL = re.compile(r"^\d+(\.\d+)?\s+(microsecond|millisecond|second|minute|hour|day|week)s?$", re.IGNORECASE)


class SpecError(ValueError):
    """A mistake in a pipeline file: ``str()`` is one line, the key path then what is wrong."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}" if key else message)
        self.key = key


def load_pipeline(path: str | Path, overrides: Sequence[str] = ()) -> Pipeline:
    """Reads, overrides and checks the pipeline file at ``path``; every failure is a :class:`SpecError`."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError("", f"cannot read the pipeline file {path}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecError("", f"{path} is not valid YAML{where}: {problem}") from None
    document = apply_overrides(document, overrides)
    return parse_pipeline(document, default_name=path.stem, origin=str(path))


def apply_overrides(document: Any, overrides: Sequence[str]) -> Any:
    """``KEY.PATH=VALUE`` edits, the value read as YAML; missing maps on the way are created."""
    if not overrides:
        return document
    result = _copy(document) if isinstance(document, dict) else {}
    for override in overrides:
        path, sep, raw = override.partition("=")
        keys = path.strip().split(".")
        if not sep or not all(keys):
            raise SpecError("--set", f"expected KEY.PATH=VALUE, got {override!r}")
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        node = result
        for depth, key in enumerate(keys[:-1]):
            child = node.get(key)
            if not isinstance(child, dict):
                if child is not None:
                    raise SpecError("--set", f"{'.'.join(keys[: depth + 1])} is not a map, cannot set {path}")
                child = node[key] = {}
            node = child
        node[keys[-1]] = value
    return result


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_copy(item) for item in value]
    return value


class _Map:
    """One map of the file, read key by key. ``keys``, the keys the section takes, are checked as it is opened, so
    a misspelled key (``subscrib``) is reported as itself, with the nearest known key, before any check that its
    absence would fail (``exactly one of source.subscribe, ...``); :meth:`done` refuses whatever else nobody asked
    for."""

    def __init__(self, value: Any, path: str, keys: Sequence[str] = ()) -> None:
        if not isinstance(value, dict):
            raise SpecError(path or "the pipeline file", f"must be a map of keys to values, got {_kind(value)}")
        for key in value:
            if not isinstance(key, str):
                raise SpecError(path, f"keys must be strings, got {key!r}")
        self.data: dict[str, Any] = value
        self.path = path
        self._known: list[str] = []
        if keys:
            self._refuse_unknown(keys)

    def key(self, name: str) -> str:
        return f"{self.path}.{name}" if self.path else name

    def get(self, name: str) -> Any:
        self._known.append(name)
        return self.data.get(name)

    def has(self, name: str) -> bool:
        return self.data.get(name) is not None

    def text(self, name: str, *, required: bool = False, default: str | None = None) -> str | None:
        value = self.get(name)
        if value is None:
            if required:
                raise SpecError(self.key(name), "is required")
            return default
        if isinstance(value, bool | dict | list):
            raise SpecError(self.key(name), f"must be a string, got {_kind(value)}")
        text = str(value).strip()
        if not text:
            raise SpecError(self.key(name), "must not be empty")
        return text

    def choice(self, name: str, choices: Sequence[str], default: str | None = None) -> str:
        value = self.text(name, required=default is None, default=default)
        assert value is not None
        for choice in choices:
            if value.lower() == choice.lower():
                return choice
        raise SpecError(self.key(name), f"must be one of {', '.join(choices)}, got {value!r}")

    def names(self, name: str) -> tuple[str, ...]:
        """A string, a comma-separated string or a list of strings."""
        value = self.get(name)
        if value is None:
            return ()
        items = value.split(",") if isinstance(value, str) else value
        if not isinstance(items, list) or not all(isinstance(item, str) and item.strip() for item in items):
            raise SpecError(self.key(name), f"must be a name or a list of names, got {_kind(value)}")
        names = tuple(item.strip() for item in items)
        if not names:
            raise SpecError(self.key(name), "must name at least one")
        return names

    def options(self, name: str) -> dict[str, str]:
        value = self.get(name)
        if value is None:
            return {}
        options = _Map(value, self.key(name))
        result: dict[str, str] = {}
        for key, item in options.data.items():
            if isinstance(item, dict | list) or item is None:
                raise SpecError(options.key(key), f"must be a string, number or boolean, got {_kind(item)}")
            result[key] = str(item).lower() if isinstance(item, bool) else str(item)
        return result

    def done(self) -> None:
        self._refuse_unknown(self._known)

    def _refuse_unknown(self, known: Sequence[str]) -> None:
        for key in self.data:
            if key not in known:
                raise SpecError(self.key(key), f"unknown key{_nearest(key, known, self.path)}; "
                                               f"{self.path or 'the file'} takes {', '.join(known)}")


def _nearest(key: str, known: Sequence[str], path: str) -> str:
    """``, did you mean source.subscribe?`` for the known key closest to a misspelled one, if any is close."""
    by_case = {name.lower(): name for name in known}
    found = [by_case[key.lower()]] if key.lower() in by_case else difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    if not found:
        found = difflib.get_close_matches(key.lower(), list(by_case), n=1, cutoff=0.6)
        found = [by_case[name] for name in found]
    return f", did you mean {f'{path}.' if path else ''}{found[0]}?" if found else ""


def parse_pipeline(document: Any, *, default_name: str = "pipeline", origin: str = "") -> Pipeline:
    """Checks a parsed pipeline document (a dict as YAML gives it)."""
    top = _Map(document, "", ("name", "source", "decode", "transform", "sink", "trigger", "spark"))
    name = top.text("name", default=default_name)
    assert name is not None
    source = _source(_Map(top.get("source") if top.has("source") else _missing("source"), "source", _SOURCE_KEYS))
    decode = _Map(top.get("decode") if top.has("decode") else _missing("decode"), "decode", ("value", "key"))
    value = _decode(decode.get("value"), decode.key("value"), required=True)
    key = _decode(decode.get("key"), decode.key("key"), required=False)
    decode.done()
    sql, watermark = _transform(top.get("transform"))
    sink = _sink(_Map(top.get("sink") if top.has("sink") else _missing("sink"), "sink", _SINK_KEYS))
    trigger = _trigger(top.get("trigger"))
    master, conf = _spark(top.get("spark"))
    top.done()
    return Pipeline(
        name=name,
        source=source,
        value=value,
        key=key,
        sql=sql,
        watermark=watermark,
        sink=sink,
        trigger=trigger,
        master=master,
        spark_conf=conf,
        origin=origin,
    )


def _missing(name: str) -> Any:
    raise SpecError(name, "is required")


def _source(section: _Map) -> Source:
    fmt = section.choice("format", SOURCE_FORMATS, default="fjord")
    bootstrap = section.text("bootstrap", required=True)
    assert bootstrap is not None
    given = [name for name in ("subscribe", "subscribePattern", "assign") if section.has(name)]
    if len(given) != 1:
        raise SpecError(
            section.key("subscribe"),
            f"exactly one of source.subscribe, source.subscribePattern, source.assign must be set, got {len(given)}",
        )
    subscribe = section.names("subscribe")
    pattern = section.text("subscribePattern")
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise SpecError(section.key("subscribePattern"), f"is not a valid regular expression: {exc}") from None
    assign = _assign(section.get("assign"), section.key("assign"))
    starting = _starting_offsets(section.get("startingOffsets"), section.key("startingOffsets"))
    timestamp = _timestamp(section.get("startingTimestamp"), section.key("startingTimestamp"))
    if timestamp is not None and section.has("startingOffsets"):
        raise SpecError(
            section.key("startingTimestamp"), "set either source.startingOffsets or source.startingTimestamp, not both"
        )
    options = section.options("options")
    for option in options:
        if option.lower() in _RUNNER_SOURCE_OPTIONS:
            raise SpecError(
                section.key(f"options.{option}"),
                "is set by the runner from the keys of source "
                "(bootstrap, subscribe, subscribePattern, assign, startingOffsets, startingTimestamp)",
            )
    section.done()
    return Source(
        format=fmt,
        bootstrap=bootstrap,
        subscribe=subscribe,
        subscribe_pattern=pattern,
        assign=assign,
        starting_offsets=starting,
        starting_timestamp=timestamp,
        options=options,
    )


def _assign(value: Any, key: str) -> tuple[tuple[str, int], ...]:
    if value is None:
        return ()
    if not isinstance(value, dict) or not value:
        raise SpecError(key, f"must map topics to lists of partitions, e.g. {{orders: [0, 1]}}, got {_kind(value)}")
    partitions: list[tuple[str, int]] = []
    for topic, numbers in value.items():
        if not isinstance(numbers, list) or not numbers or not all(_is_int(n) and n >= 0 for n in numbers):
            raise SpecError(f"{key}.{topic}", "must be a list of partition numbers >= 0")
        partitions.extend((str(topic), n) for n in numbers)
    return tuple(sorted(set(partitions)))


def _starting_offsets(value: Any, key: str) -> str:
    """``earliest``, ``latest``, or per-partition offsets as a map (or Spark's JSON text), -2/-1 for
    earliest/latest: returned as Spark's JSON."""
    expected = "must be 'earliest', 'latest' or a map of topic -> {partition: offset}"
    if value is None:
        return "earliest"
    if isinstance(value, str):
        if value.strip().lower() in ("earliest", "latest"):
            return value.strip().lower()
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise SpecError(key, f"{expected}, got {value!r}") from None
    if not isinstance(value, dict) or not value:
        raise SpecError(key, f"{expected}, got {_kind(value)}")
    offsets: dict[str, dict[str, int]] = {}
    for topic, by_partition in value.items():
        if not isinstance(by_partition, dict) or not by_partition:
            raise SpecError(f"{key}.{topic}", "must map partition numbers to offsets")
        for partition, offset in by_partition.items():
            if not str(partition).isdigit():
                raise SpecError(f"{key}.{topic}", f"partition {partition!r} is not a partition number")
            if not _is_int(offset) or offset < -2:
                raise SpecError(
                    f"{key}.{topic}.{partition}",
                    f"must be an offset >= 0, or -2 (earliest) or -1 (latest), got {offset!r}",
                )
            offsets.setdefault(str(topic), {})[str(partition)] = offset
    return json.dumps(offsets, sort_keys=True)


def _timestamp(value: Any, key: str) -> int | None:
    """Milliseconds since the epoch, or an ISO 8601 date/time (UTC unless it says otherwise)."""
    if value is None:
        return None
    if _is_int(value):
        if value < 0:
            raise SpecError(key, f"must be milliseconds since the epoch (>= 0), got {value}")
        return int(value)
    if isinstance(value, datetime | date | str):
        try:
            moment = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
        except ValueError:
            moment = None
        if moment is not None:
            moment = moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
            return int(moment.timestamp() * 1000)
    raise SpecError(key, f"must be milliseconds since the epoch or an ISO 8601 time, got {value!r}")


def _decode(value: Any, key: str, *, required: bool) -> Decode:
    if value is None:
        if required:
            raise SpecError(key, f"is required: one of {', '.join(DECODE_FORMATS)}")
        return Decode("raw")
    if isinstance(value, str):
        value = {"format": value}
    section = _Map(value, key, ("format", "schema", "schemaFile", "options"))
    fmt = section.choice("format", DECODE_FORMATS)
    schema = section.text("schema")
    schema_file = section.text("schemaFile")
    options = section.options("options")
    section.done()
    if fmt in ("json", "csv"):
        if schema is None:
            raise SpecError(
                section.key("schema"),
                f"is required for {fmt}: the fields in Spark's DDL, e.g. 'id STRING, amount DOUBLE, ts TIMESTAMP'",
            )
        if schema_file is not None:
            raise SpecError(section.key("schemaFile"), f"is for avro; {fmt} takes its schema in {key}.schema")
    elif fmt == "avro":
        if schema_file is None:
            raise SpecError(section.key("schemaFile"), "is required for avro: a file holding the Avro schema (.avsc)")
        if schema is not None:
            raise SpecError(section.key("schema"), "avro takes its schema from schemaFile")
        try:
            schema = Path(schema_file).read_text(encoding="utf-8")
            json.loads(schema)
        except OSError as exc:
            raise SpecError(section.key("schemaFile"), f"cannot read {schema_file}: {exc.strerror or exc}") from None
        except (ValueError, UnicodeDecodeError) as exc:
            raise SpecError(section.key("schemaFile"), f"{schema_file} is not an Avro schema in JSON: {exc}") from None
    elif schema is not None or schema_file is not None:
        raise SpecError(section.key("schema" if schema is not None else "schemaFile"), f"{fmt} takes no schema")
    return Decode(format=fmt, schema=schema, schema_file=schema_file, options=options)


def _transform(value: Any) -> tuple[str, Watermark | None]:
    if value is None:
        return "SELECT * FROM source", None
    if isinstance(value, str):
        value = {"sql": value}
    section = _Map(value, "transform", ("sql", "watermark"))
    sql = section.text("sql", default="SELECT * FROM source")
    assert sql is not None
    watermark = None
    raw = section.get("watermark")
    if raw is not None:
        mark = _Map(raw, section.key("watermark"), ("column", "delay"))
        column = mark.text("column", required=True)
        delay = mark.text("delay", required=True)
        assert column is not None and delay is not None
        if not _INTERVAL.match(delay):
            raise SpecError(mark.key("delay"), f"must be an interval such as '1 minute' or '30 seconds', got {delay!r}")
        mark.done()
        watermark = Watermark(column=column, delay=delay)
    section.done()
    return sql, watermark


def _sink(section: _Map) -> Sink:
    fmt = section.choice("format", SINK_FORMATS)
    mode = section.choice("outputMode", OUTPUT_MODES, default="append")
    path = section.text("path")
    partition_by = section.names("partitionBy")
    topic = section.text("topic")
    bootstrap = section.text("bootstrap")
    checkpoint = section.text("checkpoint")
    options = section.options("options")
    section.done()
    if fmt in FILE_FORMATS:
        if path is None:
            raise SpecError(section.key("path"), f"is required for the {fmt} sink: the directory to write to")
        if mode != "append":
            raise SpecError(
                section.key("outputMode"), f"the {fmt} sink supports only append (Spark's file sink), got {mode}"
            )
        _refuse(section, fmt, topic=topic, bootstrap=bootstrap)
    elif fmt in TOPIC_FORMATS:
        _refuse(section, fmt, path=path, partitionBy=partition_by or None)
    else:
        _refuse(section, fmt, path=path, partitionBy=partition_by or None, topic=topic, bootstrap=bootstrap)
    if checkpoint is None and fmt != "console":
        raise SpecError(
            section.key("checkpoint"),
            f"is required for the {fmt} sink: the directory where the query "
            "keeps its progress, so that a restart resumes without duplicates or gaps",
        )
    return Sink(
        format=fmt,
        checkpoint=checkpoint,
        output_mode=mode,
        path=path,
        partition_by=partition_by,
        topic=topic,
        bootstrap=bootstrap,
        options=options,
    )


def _refuse(section: _Map, fmt: str, **given: object) -> None:
    for name, value in given.items():
        if value is not None:
            raise SpecError(section.key(name), f"does not apply to the {fmt} sink")


def _trigger(value: Any) -> Trigger:
    if value is None:
        return Trigger("default")
    if isinstance(value, str):
        for kind in ("availableNow", "once"):
            if value.strip().lower() == kind.lower():
                return Trigger(kind)
        raise SpecError(
            "trigger", f"must be availableNow, once, or a map {{processingTime: '10 seconds'}}, got {value!r}"
        )
    section = _Map(value, "trigger", ("availableNow", "once", "processingTime"))
    given = [name for name in ("availableNow", "once", "processingTime") if section.has(name)]
    if len(given) != 1:
        raise SpecError("trigger", f"exactly one of availableNow, once, processingTime must be set, got {len(given)}")
    for kind in ("availableNow", "once"):
        flag = section.get(kind)
        if flag is not None and flag is not True:
            raise SpecError(section.key(kind), f"must be true, got {flag!r}")
    interval = section.text("processingTime")
    section.done()
    if interval is not None:
        if not _INTERVAL.match(interval):
            raise SpecError(
                section.key("processingTime"), f"must be an interval such as '10 seconds', got {interval!r}"
            )
        return Trigger("processingTime", interval)
    return Trigger(given[0])


def _spark(value: Any) -> tuple[str | None, dict[str, str]]:
    if value is None:
        return None, {}
    section = _Map(value, "spark", ("master", "conf"))
    master = section.text("master")
    conf = section.options("conf")
    section.done()
    return master, conf


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, dict):
        return "a map"
    if isinstance(value, list):
        return "a list"
    return repr(value)
