"""``fjord metadata-quorum``: Kafka's ``kafka-metadata-quorum.sh`` for a Fjord quorum: its status, and the voter
changes of KIP-853 (``add-controller``, ``remove-controller``) with which a dynamic quorum (one formatted with
``fjord storage format --standalone`` or ``--initial-controllers``) gains and loses controllers.

``add-controller`` adds the controller whose properties file ``--command-config`` names (as Kafka's tool reads it):
its ``node.id``, its CONTROLLER listener and its metadata directory's ``directory.id``. That controller was formatted
with ``--no-initial-controllers`` and is running, observing the quorum; the leader adds it once it has caught up.
Its own settings say how to reach the CONTROLLER listener (TLS, SASL). ``remove-controller`` takes the node id and,
as Kafka's, the directory id (``--controller-directory-id``; optional here, where a quorum formed without directory
ids has none to give).

Each prints one line or a table and exits 0, or prints one line on stderr and exits 1.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import uuid

from controller.node_roles import advertised_controller_endpoint
from metadata.remote.quorum_admin import QuorumAdminError, QuorumClient, QuorumStatus, Replica
from node.admin_client import AdminError, parse_bootstrap
from node.client_config import ClientConfigError, ClientSecurity, load_client_config
from node.commands.share_group_ops import table
from settings.kafka_uuid import kafka_uuid_text, parse_kafka_uuid
from settings.meta_properties import read_meta_properties
from settings.server import ServerConfig
from storage.config import ConfigError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    command = subparsers.add_parser(
        "metadata-quorum", help="describe the controller quorum, add or remove a controller (KIP-853)",
        description="kafka-metadata-quorum.sh for Fjord: the quorum's status and its voter changes.",
    )
    where = command.add_mutually_exclusive_group(required=True)
    where.add_argument("--bootstrap-controller", metavar="HOST:PORT[,...]", help="controllers' CONTROLLER listeners")
    where.add_argument("--bootstrap-server", metavar="HOST:PORT[,...]", help="brokers (they name the controllers)")
    command.add_argument("--command-config", metavar="FILE",
                         help="client properties (security.protocol, sasl.*, ssl.*); for add-controller, the "
                              "properties file of the controller to add, as Kafka's tool takes it")
    actions = command.add_subparsers(dest="quorum_command", required=True, metavar="ACTION")
    describe = actions.add_parser("describe", help="the leader, its epoch and high watermark, voters and observers")
    describe.add_argument("--status", action="store_true", help="the quorum's status (the default)")
    describe.add_argument("--replication", action="store_true", help="one row per voter and observer")
    describe.set_defaults(run=run_describe)
    add = actions.add_parser("add-controller", help="add the controller --command-config names to the voters")
    add.set_defaults(run=run_add)
    remove = actions.add_parser("remove-controller", help="remove a controller from the voters")
    remove.add_argument("--controller-id", type=int, required=True, metavar="ID")
    remove.add_argument("--controller-directory-id", metavar="DIRID",
                        help="its metadata directory's directory.id (meta.properties)")
    remove.set_defaults(run=run_remove)


def _client(args: argparse.Namespace, security: ClientSecurity | None = None) -> QuorumClient:
    try:
        addresses = parse_bootstrap(args.bootstrap_controller or args.bootstrap_server)
    except AdminError as exc:
        option = "--bootstrap-controller" if args.bootstrap_controller else "--bootstrap-server"
        raise ValueError(str(exc).replace("--bootstrap-server", option)) from None
    security = security if security is not None else load_client_config(args.command_config)
    return QuorumClient(tuple(addresses), tls=security.tls, sasl=security.sasl)


def _fail(exc: Exception) -> int:
    print(f"fjord: {exc}", file=sys.stderr)
    return 1


def run_describe(args: argparse.Namespace) -> int:
    try:
        status = asyncio.run(_client(args).status())
    except (QuorumAdminError, ClientConfigError, ValueError) as exc:
        return _fail(exc)
    print(_replication(status) if args.replication else _status(status))
    return 0


def _status(status: QuorumStatus) -> str:
    def ids(replicas: tuple[Replica, ...]) -> str:
        return "[" + ", ".join(str(r.node_id) for r in replicas) + "]"

    lag = max((status.high_watermark - r.log_end_offset for r in status.voters), default=0)
    rows = [
        ("LeaderId:", status.leader_id),
        ("LeaderEpoch:", status.leader_epoch),
        ("HighWatermark:", status.high_watermark),
        ("MaxFollowerLag:", max(0, lag)),
        ("CurrentVoters:", ids(status.voters)),
        ("CurrentObservers:", ids(status.observers)),
    ]
    endpoints = ", ".join(f"{i}@{h}:{p}" for i, (h, p) in sorted(status.endpoints.items()))
    rows.append(("VoterEndpoints:", endpoints or "-"))
    return "\n".join(f"{name:<20}{value}" for name, value in rows)


def _replication(status: QuorumStatus) -> str:
    rows = []
    for kind, replicas in (("Voter", status.voters), ("Observer", status.observers)):
        for r in replicas:
            role = "Leader" if r.node_id == status.leader_id else "Follower" if kind == "Voter" else "Observer"
            directory = kafka_uuid_text(r.directory_id) if r.directory_id is not None else "-"
            rows.append((r.node_id, directory, r.log_end_offset, max(0, status.high_watermark - r.log_end_offset),
                         role))
    return table(("NodeId", "DirectoryId", "LogEndOffset", "Lag", "Status"), rows)


def run_add(args: argparse.Namespace) -> int:
    if args.command_config is None:
        return _fail(ValueError("add-controller: --command-config must name the properties file of the controller "
                                "to add"))
    try:
        config = ServerConfig.load(args.command_config)
        if "controller" not in config.process_roles:
            raise ValueError(f"--command-config {args.command_config}: node {config.node_id} is not a controller "
                             "(process.roles)")
        meta = read_meta_properties(config.metadata_dir)
        if meta is None or meta.directory_id is None:
            raise ValueError(f"--command-config {args.command_config}: {config.metadata_dir} is not formatted (run "
                             "fjord storage format --no-initial-controllers, then start the controller)")
        listeners = (advertised_controller_endpoint(config),)
        security = ClientSecurity(config.controller_client_tls(), config.controller_client_sasl())
        client = _client(args, security)
        directory = parse_kafka_uuid(meta.directory_id)
        asyncio.run(client.add_voter(config.node_id, directory, listeners))
    except (QuorumAdminError, ConfigError, ValueError) as exc:
        return _fail(exc)
    print(f"Added controller {config.node_id} with directory id {meta.directory_id} and endpoints: "
          + ", ".join(f"{n}://{h}:{p}" for n, h, p in listeners))
    return 0


def run_remove(args: argparse.Namespace) -> int:
    try:
        directory: uuid.UUID | None = None
        if args.controller_directory_id is not None:
            directory = parse_kafka_uuid(args.controller_directory_id)
        asyncio.run(_client(args).remove_voter(args.controller_id, directory))
    except (QuorumAdminError, ClientConfigError, ValueError) as exc:
        return _fail(exc)
    print(f"Removed controller {args.controller_id}"
          + (f" with directory id {args.controller_directory_id}" if directory is not None else ""))
    return 0
