"""The metadata shell: the whole metadata state as a read-only file tree, browsed with ls / cd / cat / tree / pwd.

As Kafka's ``kafka-metadata-shell``: the state comes from a running quorum (DescribeMetadata, any voter's applied
state), a snapshot file, or a metadata log directory, and is shown as directories and files::

    /balancer/<node id>                the auto-balancer's view: partitions each broker leads, moves in flight,
                                       its load (bytes in+out per second; from a running quorum only)
    /balancer/status                   balanced or not, and the moves the balancer would start on this state
    /brokers/<node id>                 registration: epoch, listeners, rack, fenced, shutdown (controlled)
    /failovers/<node id>               the latest WAL failover of a dead broker: target, attempt, pending or done
    /producerIds                       the last producer id block handed out: broker, its epoch, next id
    /topics/<name>/<partition>         replicas, leader, leader epoch, replicas a reassignment moves it away from
                                       (/topics/<name>/configs, /topics/<name>/id, /topics/<name>/partitions)
    /streams/<stream id>               epoch, state, start/end offset, ranges (owner per epoch), stream objects
    /objects/<object id>               size, state, type, which streams it holds
    /nodes/<node id>/<object id>       each node's stream-set objects with their stream ranges
    /kv/<key>                          KV entries (a key's '/' makes sub-directories, as a partition's key does)

Building the tree (:func:`build_tree`) and running a command line (:class:`MetadataShell`) are pure: no I/O, so
the CLI (``node.commands.metadata``) and the tests share exactly what is printed. Listing a top-level directory
prints a table; the sources that load records live in :mod:`controller.shell_sources`.
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from controller.decisions import balancing
from metadata.broker_load import BrokerLoad, format_rate
from metadata.image import MetadataImage, is_cluster_record
from settings.config_key import ConfigValueError
from settings.keys import BROKER_KEYS
from storage.metadata.api import ObjectState, ObjectType, StreamState
from storage.metadata.record_codec import MetadataRecord
from storage.metadata.state_machine import StreamMetadataStateMachine
from storage.metadata.stream_records import (
    KVRecord,
    ObjectRecord,
    RangeRecord,
    StreamEndOffsetsRecord,
    StreamObjectRecord,
    StreamRecord,
    StreamSetObjectRecord,
)

__all__ = ["Entry", "MetadataShell", "ShellError", "build_tree", "format_table", "replay"]

Row = tuple[str, ...]


class ShellError(Exception):
    """A command the shell cannot run (unknown path, cat on a directory, ...); the message is for the user."""


@dataclass
class Entry:
    """A directory (``children`` set) or a file (``text``). ``table`` is how ``ls`` shows a directory when
    one-name-per-line would hide what matters (header row first)."""

    name: str
    children: dict[str, Entry] | None = None
    text: str = ""
    table: list[Row] | None = None

    @property
    def is_dir(self) -> bool:
        return self.children is not None

    def child_dir(self, name: str) -> Entry:
        assert self.children is not None
        existing = self.children.get(name)
        if existing is None or not existing.is_dir:
            existing = self.children[name] = Entry(name, children={})
        return existing

    def add_file(self, name: str, text: str) -> None:
        assert self.children is not None
        self.children[name] = Entry(name, text=text.rstrip("\n") + "\n")


def format_table(rows: Sequence[Row]) -> str:
    if not rows:
        return ""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows)


def _fields(pairs: Iterable[tuple[str, object]]) -> str:
    items = list(pairs)
    width = max((len(k) for k, _ in items), default=0)
    return "\n".join(f"{k.ljust(width)} : {v}" for k, v in items)


def _sorted_names(names: Iterable[str]) -> list[str]:
    return sorted(names, key=lambda n: (0, int(n), "") if n.lstrip("-").isdigit() else (1, 0, n))


# ------------------------------------------------------------------------------------------ state


@dataclass
class _State:
    image: MetadataImage
    streams: list[StreamRecord] = field(default_factory=list)
    ranges: dict[int, list[RangeRecord]] = field(default_factory=dict)
    end_offsets: dict[int, int] = field(default_factory=dict)
    objects: dict[int, ObjectRecord] = field(default_factory=dict)
    stream_set_objects: list[StreamSetObjectRecord] = field(default_factory=list)
    stream_objects: list[StreamObjectRecord] = field(default_factory=list)
    kv: list[KVRecord] = field(default_factory=list)


def replay(records: Iterable[MetadataRecord], cluster_id: str = "") -> _State:
    """The state ``records`` (a snapshot or a whole log, in order) describe, reduced to its current content:
    the same image and stream metadata the controllers replay, so the shell shows what they hold."""
    image = MetadataImage(cluster_id=cluster_id)
    streams = StreamMetadataStateMachine()
    cluster: list[MetadataRecord] = []
    for record in records:
        if is_cluster_record(record):
            cluster.append(record)
        else:
            streams.apply(record)
    image = image.apply(cluster, len(cluster) - 1)
    state = _State(image)
    for record in streams.snapshot():
        match record:
            case StreamRecord():
                state.streams.append(record)
            case RangeRecord():
                state.ranges.setdefault(record.stream_id, []).append(record)
            case StreamEndOffsetsRecord():
                state.end_offsets.update(record.offsets)
            case ObjectRecord():
                state.objects[record.object_id] = record
            case StreamSetObjectRecord():
                state.stream_set_objects.append(record)
            case StreamObjectRecord():
                state.stream_objects.append(record)
            case KVRecord():
                state.kv.append(record)
    return state


# ------------------------------------------------------------------------------------------ the tree


def build_tree(
    records: Iterable[MetadataRecord], cluster_id: str = "", loads: Mapping[int, BrokerLoad] | None = None
) -> Entry:
    """``loads``: the brokers' load reports the active controller holds (not metadata: a running quorum's only)."""
    state = replay(records, cluster_id)
    root = Entry("", children={})
    _balancer(root.child_dir("balancer"), state.image, loads)
    _brokers(root.child_dir("brokers"), state.image)
    _failovers(root.child_dir("failovers"), state.image)
    ids = state.image.producer_ids
    root.add_file("producerIds", _fields([
        ("last block broker", ids.broker_id), ("last block broker epoch", ids.broker_epoch),
        ("next producer id", ids.next_producer_id),
    ]))
    _topics(root.child_dir("topics"), state.image)
    _streams(root.child_dir("streams"), state)
    _objects(root.child_dir("objects"), state)
    _nodes(root.child_dir("nodes"), state)
    _kv(root.child_dir("kv"), state)
    return root


def _brokers(folder: Entry, image: MetadataImage) -> None:
    rows: list[Row] = [("ID", "EPOCH", "STATE", "RACK", "LISTENERS")]
    for node_id, broker in sorted(image.brokers.items()):
        listeners = ",".join(f"{e.name}://{e.host}:{e.port}" for e in broker.listeners)
        state = "fenced" if broker.fenced else "shutting-down" if broker.in_controlled_shutdown else "active"
        rows.append((str(node_id), str(broker.epoch), state, broker.rack or "-", listeners))
        folder.add_file(str(node_id), _fields([
            ("node id", node_id), ("epoch", broker.epoch), ("fenced", broker.fenced),
            ("shutdown", broker.in_controlled_shutdown), ("rack", broker.rack or "-"),
            ("listeners", listeners or "-"),
        ]))
    folder.table = rows


def _balancer(folder: Entry, image: MetadataImage, loads: Mapping[int, BrokerLoad] | None) -> None:
    """The leader counts the auto-balancer balances (a move in flight counts for its target), the brokers' load
    when the active controller's reports are at hand, and its verdict.

    The settings are the cluster-wide dynamic values, else the defaults: a controller's own file is not part of
    the metadata. The clocks the active controller keeps (fenced and new brokers wait) are not either, so the
    moves shown are those it starts once every broker has been in its current state long enough."""

    def value(name: str) -> object:
        try:
            return BROKER_KEYS[name].parse(image.broker_configs[name])
        except (KeyError, ConfigValueError):
            return BROKER_KEYS[name].default

    settings = balancing.Settings.from_values(value)
    live = [b.node_id for b in image.live_brokers()]
    counts, in_flight = balancing.leader_counts(image, image.brokers, settings.exclude_topics)
    incoming = dict.fromkeys(image.brokers, 0)
    outgoing = dict.fromkeys(image.brokers, 0)
    for topic in image.topics_by_name.values():
        for p in topic.partitions.values():
            if p.reassigning:
                for node_id in p.replicas:
                    incoming[node_id] = incoming.get(node_id, 0) + 1
                for node_id in p.removing_replicas:
                    outgoing[node_id] = outgoing.get(node_id, 0) + 1
    ages = dict.fromkeys(image.brokers, float("inf"))
    decision = balancing.plan(image, settings, ages, loads)
    reported = {b: sum(p.load for p in report.partitions.values()) for b, report in (loads or {}).items()}
    rows: list[Row] = [("BROKER", "STATE", "LEADS", "MOVING IN", "MOVING OUT", "LOAD")]
    for node_id, broker in sorted(image.brokers.items()):
        state = "fenced" if broker.fenced else "excluded" if node_id in settings.exclude_brokers else "active"
        load = decision.loads.get(node_id, reported.get(node_id))
        row = (str(node_id), state, str(counts[node_id]), str(incoming[node_id]), str(outgoing[node_id]),
               "-" if load is None else format_rate(load).replace(" ", ""))
        rows.append(row)
        folder.add_file(str(node_id), _fields(zip(("broker", "state", "leads", "moving in", "moving out",
                                                   "load (bytes in+out)"), row, strict=True)))
    folder.table = rows
    spread = [counts[b] for b in live if b not in settings.exclude_brokers]
    lines = [_fields([
        ("enabled (cluster-wide)", settings.enabled),
        ("tolerance", settings.tolerance),
        ("max moves in flight", settings.max_moves_in_flight),
        ("moves in flight", in_flight),
        ("leader spread", max(spread) - min(spread) if spread else 0),
        ("load tolerance", f"{settings.load_tolerance:.0%}"),
        ("load reports", "none (not a running quorum's view)" if loads is None else len(loads)),
        ("verdict", decision.summary),
    ])]
    if decision.moves:
        lines += ["", *(move.reason for move in decision.moves)]
    folder.add_file("status", "\n".join(lines))


def _failovers(folder: Entry, image: MetadataImage) -> None:
    rows: list[Row] = [("NODE", "EPOCH", "TARGET", "TARGET_EPOCH", "ATTEMPT", "STATE")]
    for node_id, failover in sorted(image.wal_failovers.items()):
        state = "done" if failover.done else "pending"
        rows.append((str(node_id), str(failover.node_epoch), str(failover.target_id), str(failover.target_epoch),
                     str(failover.attempt), state))
        folder.add_file(str(node_id), _fields([
            ("node id", node_id), ("node epoch", failover.node_epoch), ("target", failover.target_id),
            ("target epoch", failover.target_epoch), ("attempt", failover.attempt), ("state", state),
        ]))
    folder.table = rows


def _topics(folder: Entry, image: MetadataImage) -> None:
    rows: list[Row] = [("NAME", "ID", "PARTITIONS", "LEADERS")]
    for name, topic in sorted(image.topics_by_name.items()):
        leaders = sorted({p.leader for p in topic.partitions.values()})
        rows.append((name, str(topic.topic_id), str(len(topic.partitions)), ",".join(map(str, leaders)) or "-"))
        directory = folder.child_dir(name)
        directory.add_file("id", str(topic.topic_id))
        directory.add_file("configs", _fields(sorted(topic.configs.items())) or "(no topic-level configs)")
        table: list[Row] = [("PARTITION", "LEADER", "LEADER EPOCH", "REPLICAS", "ISR", "REMOVING")]
        for index, p in sorted(topic.partitions.items()):
            replicas, isr = ",".join(map(str, p.replicas)), ",".join(map(str, p.isr))
            # A reassignment in flight: the brokers it moves the partition away from (Kafka's removingReplicas).
            removing = ",".join(map(str, p.removing_replicas)) or "-"
            table.append((str(index), str(p.leader), str(p.leader_epoch), replicas, isr, removing))
            directory.add_file(str(index), _fields([
                ("topic", name), ("partition", index), ("leader", p.leader), ("leader epoch", p.leader_epoch),
                ("partition epoch", p.partition_epoch), ("replicas", replicas), ("isr", isr),
                ("removing replicas", removing),
            ]))
        directory.add_file("partitions", format_table(table))
    folder.table = rows


def _streams(folder: Entry, state: _State) -> None:
    rows: list[Row] = [("ID", "EPOCH", "STATE", "START", "END", "OWNER", "TAGS")]
    objects_of: dict[int, list[StreamObjectRecord]] = {}
    for so in state.stream_objects:
        objects_of.setdefault(so.stream_id, []).append(so)
    for stream in sorted(state.streams, key=lambda s: s.stream_id):
        ranges = sorted(state.ranges.get(stream.stream_id, []), key=lambda r: r.range_index)
        owner = str(ranges[-1].node_id) if ranges else "-"
        end = state.end_offsets.get(stream.stream_id, stream.start_offset)
        tags = ",".join(f"{k}={v}" for k, v in stream.tags)
        rows.append((str(stream.stream_id), str(stream.epoch), StreamState(stream.state).name, str(stream.start_offset),
                     str(end), owner, tags or "-"))
        lines = [_fields([
            ("stream id", stream.stream_id), ("epoch", stream.epoch), ("state", StreamState(stream.state).name),
            ("start offset", stream.start_offset), ("end offset", end), ("tags", tags or "-"),
        ]), "", format_table([("RANGE", "EPOCH", "NODE", "START", "END")] + [
            (str(r.range_index), str(r.epoch), str(r.node_id), str(r.start_offset), str(r.end_offset))
            for r in ranges
        ])]
        own = sorted(objects_of.get(stream.stream_id, []), key=lambda o: o.start_offset)
        if own:
            lines += ["", format_table([("STREAM OBJECT", "START", "END")] + [
                (str(o.object_id), str(o.start_offset), str(o.end_offset)) for o in own
            ])]
        folder.add_file(str(stream.stream_id), "\n".join(lines))
    folder.table = rows


def _objects(folder: Entry, state: _State) -> None:
    holders: dict[int, list[str]] = {}
    for sso in state.stream_set_objects:
        holders[sso.object_id] = [f"{r.stream_id}[{r.start_offset},{r.end_offset})" for r in sso.ranges]
    for so in state.stream_objects:
        holders[so.object_id] = [f"{so.stream_id}[{so.start_offset},{so.end_offset})"]
    rows: list[Row] = [("ID", "TYPE", "STATE", "SIZE", "STREAMS")]
    for object_id, obj in sorted(state.objects.items()):
        kind, status = ObjectType(obj.object_type).name, ObjectState(obj.state).name
        held = holders.get(object_id, [])
        rows.append((str(object_id), kind, status, str(obj.object_size), " ".join(held) or "-"))
        folder.add_file(str(object_id), _fields([
            ("object id", object_id), ("type", kind), ("state", status), ("size", obj.object_size),
            ("timestamp ms", obj.timestamp_ms), ("streams", " ".join(held) or "-"),
        ]))
    folder.table = rows


def _nodes(folder: Entry, state: _State) -> None:
    by_node: dict[int, list[StreamSetObjectRecord]] = {}
    for sso in state.stream_set_objects:
        by_node.setdefault(sso.node_id, []).append(sso)
    for node_id in state.image.brokers:
        by_node.setdefault(node_id, [])
    rows: list[Row] = [("NODE", "STREAM-SET OBJECTS", "BYTES")]
    for node_id, objects in sorted(by_node.items()):
        directory = folder.child_dir(str(node_id))
        total = 0
        listing: list[Row] = [("OBJECT", "ORDER", "SIZE", "RANGES")]
        for sso in sorted(objects, key=lambda o: o.order_id):
            obj = state.objects.get(sso.object_id)
            size = obj.object_size if obj is not None else 0
            total += size
            ranges = " ".join(f"{r.stream_id}[{r.start_offset},{r.end_offset})" for r in sso.ranges)
            listing.append((str(sso.object_id), str(sso.order_id), str(size), ranges))
            directory.add_file(str(sso.object_id), _fields([
                ("object id", sso.object_id), ("node", node_id), ("order id", sso.order_id), ("size", size),
                ("data time ms", sso.data_time_ms),
            ]) + "\n\n" + format_table([("STREAM", "START", "END")] + [
                (str(r.stream_id), str(r.start_offset), str(r.end_offset)) for r in sso.ranges
            ]))
        directory.table = listing
        rows.append((str(node_id), str(len(objects)), str(total)))
    folder.table = rows


def _kv(folder: Entry, state: _State) -> None:
    rows: list[Row] = [("KEY", "VALUE")]
    for record in sorted(state.kv, key=lambda r: r.key):
        value = _show_bytes(record.value)
        rows.append((record.key, value))
        parts = [p for p in record.key.split("/") if p]
        if not parts:
            continue
        directory = folder
        for part in parts[:-1]:
            directory = directory.child_dir(part)
        directory.add_file(parts[-1], value)
    folder.table = rows


def _show_bytes(value: bytes) -> str:
    """Stream ids (8 bytes) as their number, text as text, anything else as hex."""
    if len(value) == 8:
        return f"{int.from_bytes(value, 'big')} (0x{value.hex()})"
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError:
        return "0x" + value.hex()
    return text if text.isprintable() else "0x" + value.hex()


# ------------------------------------------------------------------------------------------ commands

HELP = """commands:
  ls [PATH]      list a directory (top-level directories as tables)
  cd [PATH]      change directory (no PATH: /)
  cat PATH...    print files
  tree [PATH]    print a directory and everything below it
  pwd            print the current directory
  help           this text
  exit, quit     leave the shell"""


class MetadataShell:
    """Runs command lines against a tree; ``run`` returns the text to print (raises ShellError on bad input)."""

    def __init__(self, root: Entry) -> None:
        self.root = root
        self.cwd = "/"
        self.finished = False

    def _resolve(self, path: str | None) -> tuple[str, Entry]:
        target = posixpath.normpath(posixpath.join(self.cwd, path or "."))
        target = "/" + target.lstrip("/")
        entry = self.root
        for part in (p for p in target.split("/") if p):
            if entry.children is None or part not in entry.children:
                raise ShellError(f"{path}: no such file or directory")
            entry = entry.children[part]
        return target, entry

    def run(self, line: str) -> str:
        try:
            words = shlex.split(line, comments=True)
        except ValueError as exc:
            raise ShellError(f"cannot parse {line!r}: {exc}") from None
        if not words:
            return ""
        command, args = words[0], words[1:]
        try:
            return self._run(command, args)
        except ShellError as exc:
            if str(exc).startswith(f"{command}:"):
                raise
            raise ShellError(f"{command}: {exc}") from None

    def _run(self, command: str, args: list[str]) -> str:
        match command:
            case "ls":
                return "\n".join(self._ls(p, len(args) > 1) for p in (args or ["."]))
            case "cd":
                if len(args) > 1:
                    raise ShellError("cd: one path at most")
                path, entry = self._resolve(args[0] if args else "/")
                if not entry.is_dir:
                    raise ShellError(f"cd: {args[0]}: not a directory")
                self.cwd = path
                return ""
            case "cat":
                if not args:
                    raise ShellError("cat: which file?")
                return "\n".join(self._cat(p) for p in args).rstrip("\n")
            case "tree":
                path, entry = self._resolve(args[0] if args else None)
                return "\n".join(_tree_lines(entry, path))
            case "pwd":
                return self.cwd
            case "help":
                return HELP
            case "exit" | "quit":
                self.finished = True
                return ""
        raise ShellError("unknown command (try help)")

    def _ls(self, path: str | None, label: bool) -> str:
        resolved, entry = self._resolve(path)
        if entry.children is None:
            return resolved
        if entry.table is not None and len(entry.table[0]) > 1:
            body = format_table(entry.table) if len(entry.table) > 1 else "(empty)"
        else:
            body = "\n".join(name + ("/" if entry.children[name].is_dir else "")
                             for name in _sorted_names(entry.children)) or "(empty)"
        return f"{resolved}:\n{body}" if label else body

    def _cat(self, path: str) -> str:
        _, entry = self._resolve(path)
        if entry.is_dir:
            raise ShellError(f"cat: {path}: is a directory")
        return entry.text


def _tree_lines(entry: Entry, path: str) -> list[str]:
    lines = [path]

    def walk(node: Entry, prefix: str) -> None:
        assert node.children is not None
        names = _sorted_names(node.children)
        for i, name in enumerate(names):
            child = node.children[name]
            last = i == len(names) - 1
            lines.append(f"{prefix}{'└── ' if last else '├── '}{name}{'/' if child.is_dir else ''}")
            if child.is_dir:
                walk(child, prefix + ("    " if last else "│   "))

    if entry.is_dir:
        walk(entry, "")
    return lines
