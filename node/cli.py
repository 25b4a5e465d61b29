"""The ``fjord`` command line. Each command group lives in its own module under ``node/commands`` and
registers itself here; this module only dispatches and turns expected errors into one-line messages.

Running one command imports only its module (:data:`COMMANDS`): the operator tools pull in the metadata shell, the
admin client and the local-cluster runner, which ``fjord server start`` has no use for and whose import would be
paid by every broker start. Help for the whole CLI (no command, or one not known) imports every module."""

from __future__ import annotations

import argparse
import gc
import importlib
import sys
from collections.abc import Sequence

from node import dataclass_code

#: Each command and the module of ``node/commands`` that registers it (tests/node/test_cli_commands.py keeps the two
#: in step; a module such as ``cluster_drain`` registers a subcommand through its command's module).
COMMANDS = {
    "cluster": "cluster",
    "features": "features",
    "metadata": "metadata",
    "metadata-quorum": "metadata_quorum",
    "object": "object",
    "pipeline": "pipeline",
    "server": "server",
    "share-groups": "share_groups",
    "storage": "storage",
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of ``command`` alone when it is one of :data:`COMMANDS`, else of every command."""
    parser = argparse.ArgumentParser(prog="fjord", description="Fjord: Kafka on object storage")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in [COMMANDS[command]] if command in COMMANDS else sorted(COMMANDS.values()):
        importlib.import_module(f"node.commands.{name}").register(sub)
    return parser


#: Test-only libraries that a library the node imports hooks itself into whenever it can import them: kio registers a
#: hypothesis strategy for each of its types (kio/static/_phantom.py), which in a development environment costs a
#: ``fjord`` process about a fifth of a second of its start (importing hypothesis, building the strategies), and
#: creates a ``.hypothesis`` directory in its working directory. A ``fjord`` process never runs a property test, and
#: an installed node has no hypothesis (a development dependency), so a process started from a development checkout
#: behaves, and starts as fast, as an installed one.
TEST_ONLY_LIBRARIES = ("hypothesis",)


def without_test_only_libraries() -> None:
    """Makes :data:`TEST_ONLY_LIBRARIES` unimportable in this process (an import of one raises ImportError, which
    kio expects when hypothesis is not installed). A process that already imported one (a test calling
    :func:`main`) keeps it."""
    for name in TEST_ONLY_LIBRARIES:
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]  # None in sys.modules: "not importable"


def as_own_process(command: str) -> None:
    """What a process running ``command`` (or ``fjord`` for help) sets up before it imports the command: no
    test-only libraries, and its dataclasses' methods compiled by its last run (``node.dataclass_code``). The
    benches' bytecode warm-up calls it too, to import as a node does."""
    without_test_only_libraries()
    dataclass_code.install(command)


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    if argv is None:  # ``fjord`` as a process of its own, not called by a test
        as_own_process(words[0] if words and words[0] in COMMANDS else "fjord")
    else:
        without_test_only_libraries()
    # Loading a command's modules makes long-lived objects only (classes, functions, tables): the collector, left
    # on, would walk that growing heap about 150 times to free next to nothing (about 800 objects for the server
    # command, measured), a tenth of a node start's CPU.
    gc.disable()
    try:
        parser = build_parser(words[0] if words else None)
        args = parser.parse_args(words)
    finally:
        gc.enable()
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
