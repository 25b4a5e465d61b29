"""``fjord share-groups``: Kafka 4.2's ``kafka-share-groups.sh`` for operators without Kafka's Java tools.

The same options and the same columns, so what an operator reads in Kafka's documentation works here:
``--list [--state [S,...]]``; ``--describe --group G|--all-groups`` with ``--members`` (GROUP, CONSUMER-ID, HOST,
CLIENT-ID, #PARTITIONS, ASSIGNMENT), ``--state`` (GROUP, COORDINATOR (ID), STATE, #MEMBERS) or ``--offsets``, the
default (GROUP, TOPIC, PARTITION, START-OFFSET, LAG), ``--verbose`` adding the epochs; ``--reset-offsets --group G
--topic T[:P,...]|--all-topics --to-earliest|--to-latest|--to-datetime D|--to-offset N --dry-run|--execute`` (the
group must have no members, as Kafka requires: a member holds acquired records a reset would pull from under it);
``--delete-offsets --group G --topic T``; ``--delete --group G|--all-groups``.

The requests (``node.admin_client``) are the ones Kafka's Admin client sends: ListGroups v5 of type ``share`` to
every broker, ShareGroupDescribe, DescribeShareGroupOffsets v1 (with the lag), AlterShareGroupOffsets,
DeleteShareGroupOffsets and DeleteGroups to the group's coordinator, ListOffsets to each partition's leader. Bad
options exit 2 and a refusal by the cluster exits 1, each with one ``fjord:`` line naming the group or topic.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from typing import Any

from node.admin_client import AdminClient, AdminError, parse_bootstrap
from node.client_config import ClientConfigError, load_client_config
from node.commands.share_group_ops import (
    STATES,
    UsageError,
    all_share_groups,
    delete_groups,
    delete_offsets,
    describe_members,
    describe_offsets,
    describe_states,
    list_groups,
    reset_offsets,
)

ACTIONS = ("list", "describe", "delete", "reset_offsets", "delete_offsets")
SCENARIOS = ("to_earliest", "to_latest", "to_datetime", "to_offset")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "share-groups",
        help="list, describe, reset and delete share groups (kafka-share-groups.sh)",
        description="Lists, describes, resets and deletes KIP-932 share groups, with the options and columns of "
        "Kafka 4.2's kafka-share-groups.sh.",
    )
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]", help="the server(s) to ask")
    parser.add_argument("--command-config", metavar="FILE", help="client properties for a secured cluster")
    parser.add_argument("--timeout", type=int, default=30000, metavar="MS", help="request timeout (default 30000)")
    action = parser.add_argument_group("actions (exactly one)")
    action.add_argument("--list", action="store_true", help="list the share groups")
    action.add_argument("--describe", action="store_true", help="describe a group: offsets, members or state")
    action.add_argument("--delete", action="store_true", help="delete empty share groups")
    action.add_argument("--reset-offsets", action="store_true", help="reset an empty group's start offsets")
    action.add_argument("--delete-offsets", action="store_true", help="delete an empty group's offsets of topics")
    scope = parser.add_argument_group("scope")
    scope.add_argument("--group", action="append", default=[], metavar="GROUP", help="the share group (repeatable)")
    scope.add_argument("--all-groups", action="store_true", help="every share group (--describe, --delete)")
    scope.add_argument("--topic", action="append", default=[], metavar="TOPIC[:P,...]",
                       help="a topic, or some of its partitions (--reset-offsets, --delete-offsets; repeatable)")
    scope.add_argument("--all-topics", action="store_true",
                       help="every topic the group has offsets on (--reset-offsets)")
    describe = parser.add_argument_group("--describe")
    describe.add_argument("--members", action="store_true", help="the members and their assignments")
    describe.add_argument("--offsets", action="store_true", help="start offsets and lag per partition (the default)")
    describe.add_argument("--state", nargs="?", const="", default=None, metavar="STATE[,...]",
                          help="with --describe: the group's state; with --list: the groups' states, or only "
                          f"those in the given states ({', '.join(STATES)})")
    describe.add_argument("--verbose", action="store_true", help="epochs as well")
    reset = parser.add_argument_group("--reset-offsets")
    reset.add_argument("--to-earliest", action="store_true", help="the partition's log start")
    reset.add_argument("--to-latest", action="store_true", help="the partition's log end")
    reset.add_argument("--to-datetime", metavar="YYYY-MM-DDThh:mm:ss.sss",
                       help="the first record at or after this time (local time unless an offset or Z is given)")
    reset.add_argument("--to-offset", type=int, metavar="N", help="this offset (kept within the log)")
    reset.add_argument("--dry-run", action="store_true", help="show the new offsets only")
    reset.add_argument("--execute", action="store_true", help="set the new offsets")
    parser.set_defaults(run=run_share_groups)


def check_options(args: argparse.Namespace) -> str:
    """The one action asked for, once the options make sense together (Kafka's checkArgs); else UsageError."""
    actions = [a for a in ACTIONS if getattr(args, a)]
    if len(actions) != 1:
        raise UsageError("give exactly one action: --list, --describe, --delete, --reset-offsets, --delete-offsets")
    (action,) = actions
    groups: list[str] = args.group
    if args.timeout <= 0:
        raise UsageError("--timeout must be a positive number of milliseconds")
    if args.all_groups and groups:
        raise UsageError("give either --group or --all-groups, not both")
    if action == "list" and (groups or args.all_groups):
        raise UsageError("--list takes no --group or --all-groups")
    if action != "describe" and (args.members or args.offsets or args.verbose):
        raise UsageError("--members, --offsets and --verbose go with --describe only")
    if action not in ("describe", "list") and args.state is not None:
        raise UsageError("--state goes with --describe or --list only")
    if action not in ("reset_offsets", "delete_offsets") and args.topic:
        raise UsageError("--topic goes with --reset-offsets or --delete-offsets only")
    scenarios = [s for s in SCENARIOS if getattr(args, s) not in (None, False)]
    if action != "reset_offsets" and (scenarios or args.dry_run or args.execute or args.all_topics):
        raise UsageError("--to-*, --all-topics, --dry-run and --execute go with --reset-offsets only")
    if action in ("describe", "delete") and not (groups or args.all_groups):
        raise UsageError(f"--{action} takes --group GROUP or --all-groups")
    if action == "describe":
        if sum((args.members, args.offsets, args.state is not None)) > 1:
            raise UsageError("--describe takes at most one of --members, --offsets, --state")
        if args.state:
            raise UsageError("--describe --state takes no value")
    if action in ("reset_offsets", "delete_offsets"):
        flag = action.replace("_", "-")
        if len(groups) != 1 or args.all_groups:
            raise UsageError(f"--{flag} takes exactly one --group")
        if action == "delete_offsets" and not args.topic:
            raise UsageError("--delete-offsets takes --topic TOPIC (repeatable)")
    if action == "reset_offsets":
        if args.dry_run == args.execute:
            raise UsageError("--reset-offsets takes one of --dry-run and --execute")
        if len(scenarios) != 1:
            raise UsageError("--reset-offsets takes one of --to-earliest, --to-latest, --to-datetime, --to-offset")
        if args.topic and args.all_topics:
            raise UsageError("give either --topic or --all-topics, not both")
    return action


def run_share_groups(args: argparse.Namespace) -> int:
    try:
        action = check_options(args)
        addresses = parse_bootstrap(args.bootstrap_server)
        security = load_client_config(args.command_config)
    except (UsageError, AdminError, ClientConfigError) as exc:
        print(f"fjord: share-groups: {exc}", file=sys.stderr)
        return 2
    admin = AdminClient(addresses, security=security, client_id="fjord-share-groups", timeout_s=args.timeout / 1000)
    try:
        return asyncio.run(_run(admin, action, args))
    except UsageError as exc:
        print(f"fjord: share-groups: {exc}", file=sys.stderr)
        return 2
    except AdminError as exc:
        print(f"fjord: {exc}", file=sys.stderr)
        return 1


async def _run(admin: AdminClient, action: str, args: argparse.Namespace) -> int:
    async with admin:
        groups: Sequence[str] = args.group
        if action == "list":
            return await list_groups(admin, args.state)
        if args.all_groups:
            groups = await all_share_groups(admin)
        if action == "describe":
            if args.members:
                return await describe_members(admin, groups, args.verbose)
            if args.state is not None:
                return await describe_states(admin, groups, args.verbose)
            return await describe_offsets(admin, groups, args.verbose)
        if action == "delete":
            return await delete_groups(admin, groups)
        if action == "delete_offsets":
            return await delete_offsets(admin, groups[0], args.topic)
        scenario: tuple[str, Any] = next(
            (s, getattr(args, s)) for s in SCENARIOS if getattr(args, s) not in (None, False)
        )
        return await reset_offsets(admin, groups[0], args.topic, scenario, execute=args.execute)

