"""The ``fjord`` command line. Each command group lives in its own module under ``node/commands`` and
registers itself here; this module only dispatches and turns expected errors into one-line messages."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence

import node.commands


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fjord", description="Fjord: Kafka on object storage")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(node.commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"node.commands.{info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
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
