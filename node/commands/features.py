"""``fjord features``: Kafka's ``kafka-features.sh`` for operators without Kafka's Java tools.

The same options and output, so what Kafka's documentation says to run works here:

* ``describe [--node-id N]``: one line per supported feature, ``Feature: F<TAB>SupportedMinVersion: ...<TAB>
  SupportedMaxVersion: ...<TAB>FinalizedVersionLevel: ...<TAB>Epoch: ...`` (``metadata.version`` levels by their
  release names, such as ``3.6-IV2``; a feature the cluster has not finalized at level 0);
* ``upgrade`` and ``downgrade`` with ``--feature NAME=LEVEL`` (repeatable), ``--metadata RELEASE`` (deprecated, as
  on Kafka) or ``--release-version RELEASE`` (``metadata.version`` and every other feature at that release's
  default, which for the 3.x releases Fjord reports is 0: Kafka's features after ``metadata.version`` came in 3.9 and
  4.x), ``--dry-run``, and for a downgrade ``--unsafe``;
* ``disable --feature NAME`` (a downgrade to 0).

Each update prints ``F was upgraded to L.`` (``can be`` with ``--dry-run``) or ``Could not upgrade F to L. <the
controller's message>``; any failure ends with ``N out of M operation(s) failed.`` on stderr and exit 1. The requests
(``metadata.remote.feature_admin``) are ApiVersions and UpdateFeatures, as Kafka's Admin client sends them.
Kafka's ``version-mapping`` and ``feature-dependencies`` are not served: their answers are Kafka's release table,
which a Fjord release reporting ``metadata.version`` 3.6-IV2 with Kafka 4's features on does not follow.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from kio.schema.errors import ErrorCode

from metadata.controller_api import FeatureUpdate, FeatureUpdateResult
from metadata.remote.feature_admin import FeatureAdminError, FeatureClient, FeatureView
from node.admin_client import AdminError, parse_bootstrap
from node.client_config import ClientConfigError, load_client_config
from wire.api_versions import (
    FEATURES,
    KRAFT_VERSION,
    METADATA_RELEASES,
    METADATA_VERSION,
    RELEASE_DEFAULT_LEVEL,
    release_metadata_level,
)

#: The features a release sets besides metadata.version (``--release-version``), as Kafka's production features.
_RELEASE_FEATURES = tuple(f.name for f in (*FEATURES, KRAFT_VERSION) if f is not METADATA_VERSION)


class _UsageError(ValueError):
    """Options that do not make a request; one line, exit 1 (Kafka's tool's TerseException)."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    command = subparsers.add_parser(
        "features", help="describe, upgrade, downgrade and disable feature levels (kafka-features.sh)",
        description="kafka-features.sh for Fjord: the KIP-584 feature levels of the cluster.",
    )
    where = command.add_mutually_exclusive_group(required=True)
    where.add_argument("--bootstrap-server", metavar="HOST:PORT[,...]", help="brokers to ask")
    where.add_argument("--bootstrap-controller", metavar="HOST:PORT[,...]", help="controllers' CONTROLLER listeners")
    command.add_argument("--command-config", metavar="FILE", help="client properties for a secured cluster")
    actions = command.add_subparsers(dest="features_command", required=True, metavar="ACTION")
    describe = actions.add_parser("describe", help="the supported and finalized levels of every feature")
    describe.add_argument("--node-id", type=int, metavar="ID", help="ask this node")
    describe.set_defaults(run=run_describe)
    for name, verb in (("upgrade", "raise"), ("downgrade", "lower")):
        change = actions.add_parser(name, help=f"{verb} feature levels")
        change.add_argument("--feature", action="append", metavar="NAME=LEVEL", help="repeatable")
        change.add_argument("--metadata", metavar="RELEASE", help="DEPRECATED: metadata.version, e.g. 3.6-IV2")
        change.add_argument("--release-version", metavar="RELEASE",
                            help="metadata.version and every feature at that release's default level")
        if name == "downgrade":
            change.add_argument("--unsafe", action="store_true", help="even if metadata may be lost")
        change.add_argument("--dry-run", action="store_true", help="validate only")
        change.set_defaults(run=run_update, op=name)
    disable = actions.add_parser("disable", help="lower features to level 0")
    disable.add_argument("--feature", action="append", metavar="NAME", help="repeatable")
    disable.add_argument("--unsafe", action="store_true", help="even if metadata may be lost")
    disable.add_argument("--dry-run", action="store_true", help="validate only")
    disable.set_defaults(run=run_update, op="disable")


def _client(args: argparse.Namespace) -> FeatureClient:
    text = args.bootstrap_controller or args.bootstrap_server
    try:
        addresses = parse_bootstrap(text)
    except AdminError as exc:
        option = "--bootstrap-controller" if args.bootstrap_controller else "--bootstrap-server"
        raise _UsageError(str(exc).replace("--bootstrap-server", option)) from None
    security = load_client_config(args.command_config)
    return FeatureClient(tuple(addresses), controllers=bool(args.bootstrap_controller), tls=security.tls,
                         sasl=security.sasl)


def _fail(message: str) -> int:
    print(f"fjord: {message}", file=sys.stderr)
    return 1


def level_text(feature: str, level: int) -> str:
    """A level as Kafka's tool prints it: ``metadata.version`` by its release name."""
    if feature == METADATA_VERSION.name:
        return METADATA_RELEASES.get(level, f"UNKNOWN {level}")
    return str(level)


def describe_lines(view: FeatureView) -> list[str]:
    epoch = str(view.epoch) if view.epoch is not None else "-"
    return [
        f"Feature: {name}\tSupportedMinVersion: {level_text(name, low)}\tSupportedMaxVersion: "
        f"{level_text(name, high)}\tFinalizedVersionLevel: {level_text(name, view.finalized.get(name, 0))}\t"
        f"Epoch: {epoch}"
        for name, (low, high) in sorted(view.supported.items())
    ]


def run_describe(args: argparse.Namespace) -> int:
    try:
        view = asyncio.run(_client(args).describe(args.node_id))
    except (FeatureAdminError, ClientConfigError, _UsageError) as exc:
        return _fail(str(exc))
    print("\n".join(describe_lines(view)))
    return 0


def release_level(text: str, option: str) -> int:
    """A ``metadata.version`` release (``3.6-IV2``, or ``3.6`` for its latest) as its level."""
    level = release_metadata_level(text)
    if level is None:
        raise _UsageError(f"{option}: unknown release {text!r} (this release supports "
                          f"{', '.join(METADATA_RELEASES.values())})")
    return level


def _updates(args: argparse.Namespace) -> dict[str, FeatureUpdate]:
    """The updates the options ask for, as Kafka's tool builds them."""
    kind = FeatureUpdate.UPGRADE if args.op == "upgrade" else (
        FeatureUpdate.UNSAFE_DOWNGRADE if args.unsafe else FeatureUpdate.SAFE_DOWNGRADE)
    updates: dict[str, FeatureUpdate] = {}

    def add(name: str, level: int) -> None:
        if name in updates:
            raise _UsageError(f"Feature {name} was specified more than once.")
        updates[name] = FeatureUpdate(name, level, kind)

    if args.op == "disable":
        for name in args.feature or ():
            add(name.strip(), 0)
        return updates
    if args.release_version is not None:
        if args.metadata is not None or args.feature:
            raise _UsageError("Can not specify `release-version` with other feature flags.")
        add(METADATA_VERSION.name, release_level(args.release_version, "--release-version"))
        for name in _RELEASE_FEATURES:  # each at its default in every release Fjord reports (0)
            if kind != FeatureUpdate.UPGRADE:  # Kafka's tool never asks to upgrade a feature to 0
                add(name, RELEASE_DEFAULT_LEVEL)
        return updates
    if args.metadata is not None:
        print(" `metadata` flag is deprecated and may be removed in a future release.")
        add(METADATA_VERSION.name, release_level(args.metadata, "--metadata"))
    for text in args.feature or ():
        name, sep, level = text.partition("=")
        if not sep:
            raise _UsageError(f"Can't parse feature=level string {text}: equals sign not found.")
        try:
            value = int(level.strip())
        except ValueError:
            value = None
        if value is None or not -(1 << 15) <= value < 1 << 15:
            raise _UsageError(f"Can't parse feature=level string {text}: unable to parse {level.strip()} as a "
                              "short.")
        add(name.strip(), value)
    return updates


def result_lines(op: str, updates: dict[str, FeatureUpdate], results: list[FeatureUpdateResult],
                 dry_run: bool) -> tuple[list[str], int]:
    """Kafka's lines for each feature (by name), and how many failed."""
    by_name = {r.feature: r for r in results}
    lines, failed = [], 0
    for name in sorted(updates):
        level = updates[name].level
        result = by_name[name]
        if result.error is not ErrorCode.none:
            failed += 1
            what = f"disable {name}" if op == "disable" else f"{op} {name} to {level}"
            reason = result.message or result.error.name.upper()
            lines.append(f"{'Can not' if dry_run else 'Could not'} {what}. {reason}")
        else:
            done = "disabled." if op == "disable" else f"{op}d to {level}."
            lines.append(f"{name} {'can be' if dry_run else 'was'} {done}")
    return lines, failed


def run_update(args: argparse.Namespace) -> int:
    try:
        updates = _updates(args)
        if not updates:
            raise _UsageError(f"You must specify at least one feature to {args.op}")
        results = asyncio.run(_client(args).update(list(updates.values()), validate_only=args.dry_run))
    except (FeatureAdminError, ClientConfigError, _UsageError) as exc:
        return _fail(str(exc))
    lines, failed = result_lines(args.op, updates, results, args.dry_run)
    print("\n".join(lines))
    if failed:
        return _fail(f"{failed} out of {len(updates)} operation(s) failed.")
    return 0
