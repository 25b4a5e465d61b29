"""``fjord metadata shell``: browse the metadata (topics, brokers, streams, objects, nodes, KV) as a file tree.

The state comes from a running quorum (``--controllers``, or ``--bootstrap`` brokers, which name it), a snapshot
file (``--snapshot``) or a node's metadata directory (``--metadata-dir``). Commands run from ``-c`` (repeatable) or
trailing words, as Kafka's ``kafka-metadata-shell`` takes them; otherwise the shell is interactive. A bad command
prints one line on stderr (exit status 1 in the non-interactive form), never a traceback.

A secured cluster is reached with ``--command-config FILE``, the client properties Kafka's tools take there
(``kafka-metadata-quorum.sh`` among them), read by ``node.client_config`` as for ``fjord cluster drain``. A bad file,
a refused login or a failed TLS handshake is one line naming the file or the host:port, never a secret.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from controller.shell import MetadataShell, ShellError, build_tree
from controller.shell_sources import (
    LoadedMetadata,
    MetadataSourceError,
    from_brokers,
    from_controllers,
    from_directory,
    from_snapshot,
)
from node.client_config import load_client_config
from settings.host_port import split_host_port


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    metadata = subparsers.add_parser("metadata", help="inspect the cluster metadata")
    actions = metadata.add_subparsers(dest="metadata_command", required=True, metavar="ACTION")
    shell = actions.add_parser(
        "shell", help="browse topics, brokers, streams, objects, nodes and KV with ls / cd / cat / tree",
        description="Browse the metadata as a file tree: /topics /brokers /streams /objects /nodes /kv.",
    )
    source = shell.add_mutually_exclusive_group(required=True)
    source.add_argument("--controllers", "--bootstrap-controller", metavar="HOST:PORT[,...]",
                        help="controller listeners of a running quorum (any voter answers)")
    source.add_argument("--bootstrap", "--bootstrap-server", metavar="HOST:PORT[,...]",
                        help="brokers of a running cluster (they name the controllers)")
    source.add_argument("--snapshot", metavar="FILE", help="a metadata snapshot file")
    source.add_argument("--metadata-dir", metavar="DIR", help="a node's metadata directory (offline)")
    shell.add_argument(
        "--command-config",
        metavar="FILE",
        help="client properties for a secured cluster's --controllers or --bootstrap listener, as Kafka's tools "
        "take them (security.protocol, sasl.mechanism, sasl.jaas.config, ssl.truststore.location, "
        "ssl.keystore.location, ...; PEM files)",
    )
    shell.add_argument("-c", "--command", action="append", default=[], metavar="COMMAND",
                       help="run this command and exit (repeatable)")
    shell.add_argument("words", nargs="*", metavar="COMMAND", help="a command to run, e.g. ls /topics")
    shell.set_defaults(run=run_shell)


def _addresses(text: str, option: str = "--controllers") -> list[tuple[str, int]]:
    out = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        split = split_host_port(item.rpartition("@")[2])  # a controller.quorum.voters value is taken as well
        if split is None:
            raise ValueError(f"{option}: {item!r} is not HOST:PORT (a port from 0 to 65535)")
        out.append(split)
    if not out:
        raise ValueError(f"{option}: no address given")
    return out


def _load(args: argparse.Namespace) -> LoadedMetadata:
    if args.command_config is not None and not (args.controllers or args.bootstrap):
        raise ValueError("--command-config: only a running cluster (--controllers or --bootstrap) is connected to")
    if args.controllers:
        addresses = _addresses(args.controllers)
        security = load_client_config(args.command_config)
        return asyncio.run(from_controllers(addresses, tls=security.tls, sasl=security.sasl))
    if args.bootstrap:
        addresses = _addresses(args.bootstrap, "--bootstrap")
        security = load_client_config(args.command_config)
        return asyncio.run(from_brokers(addresses, tls=security.tls, sasl=security.sasl))
    option, given = ("--snapshot", args.snapshot) if args.snapshot else ("--metadata-dir", args.metadata_dir)
    try:
        return from_snapshot(Path(given)) if args.snapshot else from_directory(Path(given))
    except OSError as exc:  # a path the tool may not read (or not stat): one line naming the option, as a missing one
        raise MetadataSourceError(f"{option} {given}: {exc.strerror or exc}") from None


def run_shell(args: argparse.Namespace) -> int:
    try:
        loaded = _load(args)
    except (MetadataSourceError, ValueError) as exc:
        print(f"fjord: {exc}", file=sys.stderr)
        return 1
    shell = MetadataShell(build_tree(loaded.records, loads=loaded.loads))
    commands = list(args.command) + ([" ".join(args.words)] if args.words else [])
    if commands:
        status = 0
        for line in commands:
            try:
                output = shell.run(line)
            except ShellError as exc:
                print(f"error: {exc}", file=sys.stderr)
                status = 1
                continue
            if output:
                print(output)
            if shell.finished:
                break
        return status
    return _interactive(shell, loaded.source)


def _interactive(shell: MetadataShell, source: str) -> int:
    try:
        import readline  # noqa: F401, PLC0415 - line editing and history for input(), where the platform has it
    except ImportError:
        pass
    print(f"metadata from {source}; type help for commands")
    while not shell.finished:
        try:
            line = input(f"[fjord {shell.cwd}]> ")
        except EOFError:
            print()
            break
        except KeyboardInterrupt:
            print()
            continue
        try:
            output = shell.run(line)
        except ShellError as exc:
            print(f"error: {exc}", file=sys.stderr)
            continue
        if output:
            print(output)
    return 0
