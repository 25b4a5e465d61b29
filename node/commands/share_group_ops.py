"""What each action of ``fjord share-groups`` asks the cluster and prints (the options are checked by
``node.commands.share_groups``). Tables have Kafka's ``kafka-share-groups.sh`` columns, a missing value shown as
``-`` as Kafka shows it; notes such as "has no active members" go to stderr as Kafka prints them. A refusal is an
:class:`AdminError` naming the group or topic and Kafka's error name, printed as one line by the command."""

from __future__ import annotations

import sys
from collections.abc import Collection, Iterable, Sequence
from datetime import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from node.admin_client import EARLIEST, LATEST, AdminClient, AdminError, TopicPartition, describe_error
from wire import codec, schema

LIST_GROUPS, DELETE_GROUPS = 16, 42
SHARE_GROUP_DESCRIBE = 77
DESCRIBE_SHARE_GROUP_OFFSETS, ALTER_SHARE_GROUP_OFFSETS, DELETE_SHARE_GROUP_OFFSETS = 90, 91, 92
#: Kafka's share group states, as its tools spell them.
STATES = ("Empty", "Stable", "Dead")
MISSING = "-"


class UsageError(Exception):
    """Options that do not make sense (exit status 2, as for a bad option)."""


def table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """Left-aligned columns as wide as their widest cell, two spaces apart."""
    lines = [list(header)] + [[str(cell) for cell in row] for row in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(widths[i]) for i, c in enumerate(line)).rstrip() for line in lines)


def _note(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _group_error(group: str, what: str, code: ErrorCode | int, message: str | None = None) -> AdminError:
    return AdminError(f"share group {group!r}: {what} answered {describe_error(code, message)}")


# ---- listing ------------------------------------------------------------------------------------------------------


def parse_states(text: str) -> tuple[str, ...]:
    """``Empty,Stable`` (any case) as Kafka's names; UsageError for another."""
    by_lower = {s.lower(): s for s in STATES}
    states = tuple(s.strip() for s in text.split(",") if s.strip())
    bad = [s for s in states if s.lower() not in by_lower]
    if bad:
        raise UsageError(f"invalid state list {text!r}: valid states are {', '.join(STATES)}")
    return tuple(by_lower[s.lower()] for s in states)


def list_request(states: Sequence[str]) -> Any:
    return schema.build(codec.request_class(LIST_GROUPS, 5), states_filter=tuple(states), types_filter=("share",))


async def _listed(admin: AdminClient, states: Sequence[str] = ()) -> dict[str, str]:
    """Every share group of the cluster (each broker lists those it coordinates) -> its state."""
    found: dict[str, str] = {}
    for response in await admin.each_broker(list_request(states), "ListGroups"):
        code = ErrorCode(int(response.error_code))
        if code is not ErrorCode.none:
            raise AdminError(f"listing the share groups failed: ListGroups answered {describe_error(code)}")
        found.update({str(g.group_id): str(g.group_state) for g in response.groups})
    return dict(sorted(found.items()))


async def all_share_groups(admin: AdminClient) -> list[str]:
    return list(await _listed(admin))


async def list_groups(admin: AdminClient, state: str | None) -> int:
    """``--list``: the group ids; with ``--state``, a GROUP STATE table (only the given states when some are)."""
    if state is None:
        for group in await _listed(admin):
            print(group)
        return 0
    listed = await _listed(admin, parse_states(state))
    print(table(("GROUP", "STATE"), listed.items()))
    return 0


# ---- describing ---------------------------------------------------------------------------------------------------


async def describe_group(admin: AdminClient, group: str, missing_ok: bool = False) -> Any:
    """The group's ShareGroupDescribe answer (None for a group that does not exist when ``missing_ok``)."""
    request = schema.build(
        codec.request_class(SHARE_GROUP_DESCRIBE, 1), group_ids=(group,), include_authorized_operations=False
    )
    response = await admin.to_coordinator(group, request, "ShareGroupDescribe", lambda r: r.groups[0].error_code)
    (described,) = response.groups
    code = ErrorCode(int(described.error_code))
    if code is ErrorCode.group_id_not_found and missing_ok:
        return None
    if code is not ErrorCode.none:
        raise _group_error(group, "ShareGroupDescribe", code, described.error_message)
    return described


def _assignment(member: Any) -> str:
    """``topic:0,1;other:2`` as Kafka prints a member's assignment."""
    parts = sorted(
        f"{t.topic_name}:{','.join(str(p) for p in sorted(t.partitions))}" for t in member.assignment.topic_partitions
    )
    return ";".join(parts) or MISSING


async def describe_members(admin: AdminClient, groups: Sequence[str], verbose: bool) -> int:
    for group in sorted(groups):
        described = await describe_group(admin, group)
        members = sorted(described.members, key=lambda m: str(m.member_id))
        if not members:
            _note(f"Share group '{group}' has no active members.")
            continue
        header = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
        header += ["MEMBER-EPOCH", "ASSIGNMENT"] if verbose else ["ASSIGNMENT"]
        rows = []
        for m in members:
            count = sum(len(t.partitions) for t in m.assignment.topic_partitions)
            row: list[object] = [group, m.member_id, m.client_host or MISSING, m.client_id or MISSING, count]
            row += [m.member_epoch, _assignment(m)] if verbose else [_assignment(m)]
            rows.append(row)
        print(table(header, rows) + "\n")
    return 0


async def describe_states(admin: AdminClient, groups: Sequence[str], verbose: bool) -> int:
    for group in sorted(groups):
        described = await describe_group(admin, group)
        if described.group_state == "Empty":
            _note(f"Share group '{group}' has no active members.")
        node = await admin.coordinator(group)
        host, port = admin.address(node)
        header = ["GROUP", "COORDINATOR (ID)", "STATE"]
        row: list[object] = [group, f"{host}:{port} ({node})", described.group_state]
        if verbose:
            header += ["GROUP-EPOCH", "ASSIGNMENT-EPOCH"]
            row += [described.group_epoch, described.assignment_epoch]
        print(table([*header, "#MEMBERS"], [[*row, len(described.members)]]) + "\n")
    return 0


async def group_offsets(admin: AdminClient, group: str) -> list[Any]:
    """(topic, partition answer) of every share partition the group has state on, in order."""
    cls = codec.request_class(DESCRIBE_SHARE_GROUP_OFFSETS, 1)
    request = schema.build(cls, groups=(schema.build_nested(cls, "groups", group_id=group, topics=None),))
    response = await admin.to_coordinator(group, request, "DescribeShareGroupOffsets",
                                          lambda r: r.groups[0].error_code)
    (answer,) = response.groups
    if ErrorCode(int(answer.error_code)) is not ErrorCode.none:
        raise _group_error(group, "DescribeShareGroupOffsets", answer.error_code, answer.error_message)
    rows = [(str(t.topic_name), p) for t in answer.topics for p in t.partitions]
    return sorted(rows, key=lambda r: (r[0], int(r[1].partition_index)))


def _known(value: int) -> object:
    return value if value >= 0 else MISSING


async def describe_offsets(admin: AdminClient, groups: Sequence[str], verbose: bool) -> int:
    for group in sorted(groups):
        await describe_group(admin, group)  # as Kafka: a group that is not there is an error, not an empty table
        offsets = await group_offsets(admin, group)
        if not offsets:
            _note(f"Share group '{group}' has no offset information.")
            continue
        header = ["GROUP", "TOPIC", "PARTITION"] + (["LEADER-EPOCH"] if verbose else []) + ["START-OFFSET", "LAG"]
        rows = []
        for topic, p in offsets:
            failed = ErrorCode(int(p.error_code)) is not ErrorCode.none
            row: list[object] = [group, topic, p.partition_index]
            if verbose:
                row.append(MISSING if failed else _known(int(p.leader_epoch)))
            row += [MISSING, MISSING] if failed else [_known(int(p.start_offset)), _known(int(p.lag))]
            rows.append(row)
        print(table(header, rows) + "\n")
    return 0


# ---- resetting and deleting ---------------------------------------------------------------------------------------


def parse_datetime(text: str) -> int:
    """Kafka's ``--to-datetime`` (``YYYY-MM-DDThh:mm:ss.sss``, an optional ``Z`` or ``+hh:mm``; local time without
    one) as ms since the epoch."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise UsageError(f"--to-datetime {text!r} is not YYYY-MM-DDThh:mm:ss.sss[Z|+hh:mm]") from None
    return int(moment.timestamp() * 1000)


async def _partitions_to_reset(admin: AdminClient, group: str, topics: Sequence[str]) -> list[TopicPartition]:
    """The partitions ``--topic`` names (``T``: all of T's, ``T:0,2``: those), or without it every partition the
    group has offsets on; a topic or partition the cluster does not have is an error naming it."""
    if not topics:
        return [(topic, int(p.partition_index)) for topic, p in await group_offsets(admin, group)]
    wanted: list[tuple[str, list[int] | None]] = []
    for arg in topics:
        name, sep, listed = arg.partition(":")
        if not name or (sep and not listed):
            raise UsageError(f"--topic {arg!r} is not TOPIC or TOPIC:PARTITION[,PARTITION...]")
        try:
            wanted.append((name, [int(p) for p in listed.split(",")] if sep else None))
        except ValueError:
            raise UsageError(f"--topic {arg!r}: partitions must be numbers") from None
    view = await admin.cluster({name for name, _ in wanted})
    out: list[TopicPartition] = []
    for name, parts in wanted:
        if name not in view.topics:
            raise AdminError(f"topic {name!r}: {view.missing.get(name, 'UNKNOWN_TOPIC_OR_PARTITION')}")
        known = view.topics[name]
        absent = [p for p in parts or () if p not in known]
        if absent:
            raise AdminError(f"topic {name!r} has no partition {', '.join(map(str, absent))} "
                             f"(it has {len(known)}): UNKNOWN_TOPIC_OR_PARTITION")
        out.extend((name, p) for p in (parts if parts is not None else sorted(known)))
    return sorted(set(out))


async def _new_offsets(
    admin: AdminClient, partitions: Collection[TopicPartition], scenario: tuple[str, Any]
) -> dict[TopicPartition, int]:
    """Where each partition's start offset goes, as Kafka's GroupOffsetsResetter computes it."""
    kind, value = scenario
    leaders = (await admin.cluster({t for t, _ in partitions})).topics
    if kind == "to_earliest":
        return await admin.list_offsets(partitions, EARLIEST, leaders)
    latest = await admin.list_offsets(partitions, LATEST, leaders)
    if kind == "to_latest":
        return latest
    if kind == "to_datetime":
        found = await admin.list_offsets(partitions, parse_datetime(str(value)), leaders)
        for tp, offset in sorted(found.items()):
            if offset < 0:
                _note(f"Warn: partition {tp[1]} of topic {tp[0]} has no record that late: "
                      "falling back to the latest offset.")
                found[tp] = latest[tp]
        return found
    earliest = await admin.list_offsets(partitions, EARLIEST, leaders)
    out: dict[TopicPartition, int] = {}
    for tp in sorted(partitions):
        offset = min(max(int(value), earliest[tp]), latest[tp])
        if offset != int(value):
            _note(f"New offset ({value}) is outside {tp[0]}-{tp[1]}'s log [{earliest[tp]}, {latest[tp]}]: "
                  f"{offset} is used.")
        out[tp] = offset
    return out


async def reset_offsets(
    admin: AdminClient, group: str, topics: Sequence[str], scenario: tuple[str, Any], *, execute: bool
) -> int:
    """``--reset-offsets``: the plan as GROUP TOPIC PARTITION NEW-OFFSET, set with ``--execute``. The group must
    have no members (a group that does not exist yet gets its offsets, as on Kafka 4.2)."""
    if scenario[0] == "to_datetime":
        parse_datetime(str(scenario[1]))  # a bad date is bad input, before anything is asked
    described = await describe_group(admin, group, missing_ok=True)
    if described is not None and described.group_state not in ("Empty", "Dead"):
        raise AdminError(
            f"share group {group!r} is not empty ({len(described.members)} members, {described.group_state}): "
            "stop its consumers before resetting its offsets"
        )
    partitions = await _partitions_to_reset(admin, group, topics)
    if not partitions:
        _note(f"Share group '{group}' has no offsets to reset.")
        return 0
    offsets = await _new_offsets(admin, partitions, scenario)
    if execute:
        await _alter(admin, group, offsets)
    planned = [(group, t, p, o) for (t, p), o in sorted(offsets.items())]
    print(table(("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"), planned))
    return 0


async def _alter(admin: AdminClient, group: str, offsets: dict[TopicPartition, int]) -> None:
    cls = codec.request_class(ALTER_SHARE_GROUP_OFFSETS, 0)
    topic_cls = schema.field_entity(cls, "topics")
    by_topic: dict[str, list[tuple[int, int]]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        by_topic.setdefault(topic, []).append((partition, offset))
    request = schema.build(
        cls,
        group_id=group,
        topics=tuple(
            schema.build(topic_cls, topic_name=topic, partitions=tuple(
                schema.build_nested(topic_cls, "partitions", partition_index=p, start_offset=o) for p, o in parts
            ))
            for topic, parts in by_topic.items()
        ),
    )
    response = await admin.to_coordinator(group, request, "AlterShareGroupOffsets", lambda r: r.error_code)
    if ErrorCode(int(response.error_code)) is not ErrorCode.none:
        raise _group_error(group, "AlterShareGroupOffsets", response.error_code, response.error_message)
    failed = [
        f"{t.topic_name}-{p.partition_index} {describe_error(p.error_code, p.error_message)}"
        for t in response.responses
        for p in t.partitions
        if ErrorCode(int(p.error_code)) is not ErrorCode.none
    ]
    if failed:
        raise AdminError(f"share group {group!r}: offsets not reset for {'; '.join(failed)}")


async def delete_offsets(admin: AdminClient, group: str, topics: Sequence[str]) -> int:
    """``--delete-offsets``: TOPIC STATUS per topic; a refused topic also fails the command with one line."""
    names = list(dict.fromkeys(topics))
    cls = codec.request_class(DELETE_SHARE_GROUP_OFFSETS, 0)
    request = schema.build(
        cls, group_id=group, topics=tuple(schema.build_nested(cls, "topics", topic_name=n) for n in names)
    )
    response = await admin.to_coordinator(group, request, "DeleteShareGroupOffsets", lambda r: r.error_code)
    if ErrorCode(int(response.error_code)) is not ErrorCode.none:
        raise _group_error(group, "DeleteShareGroupOffsets", response.error_code, response.error_message)
    status = {str(t.topic_name): t for t in response.responses}
    failed = {
        name: describe_error(t.error_code, t.error_message)
        for name, t in status.items()
        if ErrorCode(int(t.error_code)) is not ErrorCode.none
    }
    rows = [(n, f"Error: {failed[n]}" if n in failed else "Successful") for n in sorted(status)]
    print(table(("TOPIC", "STATUS"), rows))
    if failed:
        raise AdminError(
            f"share group {group!r}: offsets not deleted for "
            + "; ".join(f"topic {n!r} ({e})" for n, e in sorted(failed.items()))
        )
    return 0


async def delete_groups(admin: AdminClient, groups: Sequence[str]) -> int:
    """``--delete``: each group must be a share group without members (checked first, as Kafka's tool does), then
    DeleteGroups to its coordinator, which also drops its share-partition state."""
    listed = await _listed(admin)
    failed: dict[str, str] = {}
    deleted: list[str] = []
    for group in dict.fromkeys(groups):
        state = listed.get(group)
        if state is None:
            failed[group] = "GROUP_ID_NOT_FOUND: not a share group"
            continue
        if state != "Empty":
            failed[group] = f"NON_EMPTY_GROUP: the group is {state}"
            continue
        request = schema.build(codec.request_class(DELETE_GROUPS, 2), groups_names=(group,))
        response = await admin.to_coordinator(group, request, "DeleteGroups", lambda r: r.results[0].error_code)
        code = ErrorCode(int(response.results[0].error_code))
        if code is ErrorCode.none:
            deleted.append(group)
        else:
            failed[group] = describe_error(code)
    if deleted:
        print(f"Deletion of requested share groups ({', '.join(repr(g) for g in deleted)}) was successful.")
    if failed:
        raise AdminError(
            "could not delete " + "; ".join(f"share group {g!r} ({e})" for g, e in failed.items())
        )
    return 0

