"""The ``fjord`` command line: ``fjord server start``, ``fjord object dump`` and the operator tools."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fjord", description="Fjord: Kafka on object storage")
    sub = parser.add_subparsers(dest="command", required=True)
    obj = sub.add_parser("object", help="inspect objects in object storage")
    obj_sub = obj.add_subparsers(dest="object_command", required=True)
    dump = obj_sub.add_parser("dump", help="print an object's footer and data-block index")
    dump.add_argument("target", help="object key (with --bucket) or a local file")
    dump.add_argument("--records", action="store_true", help="also print each StreamRecordBatch header")
    dump.add_argument("--bucket", help="object storage URL, e.g. 0@s3://bucket?endpoint=...; default: a file")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    print(f"fjord: {args.command}: not implemented yet", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
