"""The ``fjord`` command line. Each command group lives in its own module under ``node/commands`` and
registers itself here; this module only dispatches and turns expected errors into one-line messages.

Running one command imports only its module (:data:`COMMANDS`): the operator tools pull in the metadata shell, the
admin client and the local-cluster runner, which ``fjord server start`` has no use for and whose import would be
paid by every broker start. Help for the whole CLI (no command, or one not known) imports every module."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

#: Each command and the module of ``node/commands`` that registers it (tests/node/test_cli_commands.py keeps the two
#: in step; a module such as ``cluster_drain`` registers a subcommand through its command's module).
COMMANDS = {
    "cluster": "cluster",
    "metadata": "metadata",
    "object": "object",
    "pipeline": "pipeline",
    "server": "server",
    "share-groups": "share_groups",
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of ``command`` alone when it is one of :data:`COMMANDS`, else of every command."""
    parser = argparse.ArgumentParser(prog="fjord", description="Fjord: Kafka on object storage")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in [COMMANDS[command]] if command in COMMANDS else sorted(COMMANDS.values()):
        importlib.import_module(f"node.commands.{name}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(words[0] if words else None)
    args = parser.parse_args(words)
    run = getattr(args, "run", None)
    if run is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(run(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
