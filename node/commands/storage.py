"""``fjord storage``: Kafka's ``kafka-storage`` for the steps before a node's first start: ``random-uuid`` prints a
new cluster id, ``format`` writes a node's directories with it (``settings.storage_format``). A node needs neither
(its first start formats its directory); a Kafka 4 cluster whose files name only
``controller.quorum.bootstrap.servers`` needs ``format`` on each controller to know its voters."""

from __future__ import annotations

import argparse
import sys

from settings.kafka_uuid import new_kafka_uuid
from settings.scram_option import last_of_each, parse_add_scram
from settings.storage_format import FormatRequest, format_storage
from storage.config import ConfigError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    storage = subparsers.add_parser("storage", help="format a node's directories before its first start "
                                                    "(kafka-storage.sh)")
    actions = storage.add_subparsers(dest="storage_command", required=True, metavar="ACTION")
    uuid = actions.add_parser("random-uuid", help="print a new cluster id")
    uuid.set_defaults(run=lambda _args: print(new_kafka_uuid()))
    fmt = actions.add_parser("format", help="write the node's meta.properties (and a controller's voters) with a "
                                            "cluster id, as kafka-storage format")
    fmt.add_argument("-t", "--cluster-id", required=True, metavar="ID", help="the cluster id (random-uuid)")
    fmt.add_argument("-c", "--config", required=True, metavar="FILE", help="the node's properties file")
    fmt.add_argument("--override", metavar="KEY=VALUE", action="append", default=[],
                     help="set one configuration key, overriding the file (repeatable)")
    mode = fmt.add_mutually_exclusive_group()
    mode.add_argument("-s", "--standalone", action="store_true",
                      help="this controller is the quorum's one voter (a file naming only "
                           "controller.quorum.bootstrap.servers)")
    mode.add_argument("-I", "--initial-controllers", metavar="ID@HOST:PORT[:DIRID],...",
                      help="the quorum's voters, given the same to every controller")
    mode.add_argument("-N", "--no-initial-controllers", action="store_true",
                      help="a broker that finds the voters through its bootstrap servers")
    fmt.add_argument("-g", "--ignore-formatted", action="store_true",
                     help="skip directories already formatted instead of failing")
    fmt.add_argument("-S", "--add-scram", metavar="'MECHANISM=[name=USER,password=PASSWORD]'", action="append",
                     default=[], help="a SCRAM user the node's first start creates unless it exists (a broker or "
                                      "combined node; repeatable; the file keeps the salted password, never the "
                                      "password, until that start)")
    fmt.add_argument("-f", "--feature", metavar="NAME=LEVEL", action="append", default=[],
                     help="a feature level the node's first start finalizes on a new cluster, e.g. "
                          "transaction.version=1 (a broker or combined node; repeatable)")
    fmt.add_argument("-r", "--release-version", metavar="RELEASE",
                     help="metadata.version of this release (this one serves 3.6-IV2) and every other feature at "
                          "its default there (0); --feature levels go over them (a broker or combined node)")
    fmt.set_defaults(run=run_format)


def run_format(args: argparse.Namespace) -> int:
    # The feature levels a release serves are the wire layer's (kio's schemas with them, about a second to import),
    # which `fjord --help`, importing every command's module, has no use for.
    from controller.feature_bootstrap import parse_feature, release_features  # noqa: PLC0415

    try:
        features = [parse_feature(text) for text in args.feature]
        if args.release_version is not None:
            features = release_features(args.release_version, features)
        request = FormatRequest(
            cluster_id=args.cluster_id, config=args.config, overrides=tuple(args.override),
            standalone=args.standalone, initial_controllers=args.initial_controllers,
            no_initial_controllers=args.no_initial_controllers, ignore_formatted=args.ignore_formatted,
            scram=last_of_each(parse_add_scram(text) for text in args.add_scram),
            features=tuple(f"{f.feature}={f.level}" for f in features), release_version=args.release_version,
        )
        lines = format_storage(request)
    except (ConfigError, ValueError) as exc:
        print(f"fjord storage format: {exc}", file=sys.stderr)
        return 1
    for line in lines:
        print(line)
    return 0
