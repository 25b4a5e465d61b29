"""``fjord object dump KEY_OR_FILE [--records] [--bucket URL]``: show an object's footer, blocks and batches.

Without ``--bucket`` the argument is a local file (for instance one found under ``data/objects``); it is
memory-mapped, so dumping a large object does not read it all. With ``--bucket 0@s3://...`` or ``0@file://...``
the argument is an object key in that bucket. Anything that goes wrong is one line on stderr and exit code 1.
"""

from __future__ import annotations

import argparse
import asyncio
import mmap
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from storage.config import ConfigError, StorageConfig, parse_bucket_url
from storage.errors import ObjectNotFoundError, StorageError
from storage.objects.reader import ObjectReader
from storage.tools.dump import dump_bytes, dump_object

# A CLI should fail fast when the endpoint is wrong instead of backing off for the server's full retry budget.
_CLI_S3_RETRIES = 2


class _DumpFailed(Exception):
    """What to print after ``fjord: `` before exiting with status 1."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    group = subparsers.add_parser("object", help="inspect objects in object storage")
    commands = group.add_subparsers(dest="object_command", required=True, metavar="SUBCOMMAND")
    dump = commands.add_parser(
        "dump",
        help="print an object's footer and index entries",
        description="Print an object's footer (index position and length) and one line per data block.",
    )
    dump.add_argument("target", metavar="KEY_OR_FILE", help="a local object file, or a key with --bucket")
    dump.add_argument("--records", action="store_true", help="also print each StreamRecordBatch header")
    dump.add_argument(
        "--bucket",
        metavar="URL",
        help="read KEY_OR_FILE as a key in this bucket, e.g. 0@s3://BUCKET?region=R&endpoint=URL&pathStyle=true",
    )
    dump.set_defaults(run=run_dump)


def run_dump(args: argparse.Namespace) -> int:
    target: str = args.target
    try:
        if args.bucket:
            asyncio.run(_dump_from_bucket(args.bucket, target, args.records))
        else:
            with _mapped(Path(target)) as data:
                for line in dump_bytes(data, target, records=args.records):
                    _print(line)
        sys.stdout.flush()
    except (_DumpFailed, ConfigError) as exc:
        return _fail(str(exc))
    except StorageError as exc:
        # Corruption messages already start with the path or object they concern.
        text = str(exc)
        return _fail(text if text.startswith((target, "object ")) else f"{target}: {text}")
    except BrokenPipeError:
        # The reader of our output went away (``| head``): not an error of the dump.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def _fail(message: str) -> int:
    sys.stdout.flush()
    print(f"fjord: {message}", file=sys.stderr)
    return 1


def _print(line: str) -> None:
    sys.stdout.write(line + "\n")


@contextmanager
def _mapped(path: Path) -> Iterator[bytes | memoryview]:
    try:
        file = open(path, "rb")  # noqa: SIM115 - closed by the with block below, after the error mapping
    except OSError as exc:
        raise _DumpFailed(f"{path}: {exc.strerror or exc}") from None
    with file:
        try:
            size = os.fstat(file.fileno()).st_size
            mapped = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) if size else None
        except OSError as exc:
            raise _DumpFailed(f"{path}: {exc.strerror or exc}") from None
        if mapped is None:
            yield b""
            return
        try:
            yield memoryview(mapped)
        finally:
            with suppress(BufferError):
                # Slices may still be referenced by an error's traceback; then garbage collection unmaps.
                mapped.close()


async def _dump_from_bucket(url_text: str, key: str, records: bool) -> None:
    url = parse_bucket_url(url_text, "--bucket")
    try:
        is_dir = url.scheme != "file" or url.path.is_dir()
    except OSError as exc:  # a directory the tool may not stat: one line naming the option, not a traceback
        raise _DumpFailed(f"--bucket: {url.path}: {exc.strerror or exc}") from None
    if not is_dir:
        raise _DumpFailed(f"--bucket: {url.path} is not a directory")
    # Imported here to keep the object store stack off the path of a dump of a local file.
    from storage.objectstore.factory import open_object_store  # noqa: PLC0415

    config = StorageConfig(s3_max_retries=_CLI_S3_RETRIES)
    store = open_object_store(url, config)
    try:
        reader = ObjectReader(store, config.namespace, index_cache_entries=0)
        try:
            async for line in dump_object(reader, key, records=records):
                _print(line)
        except ObjectNotFoundError:
            raise _DumpFailed(f"{key}: no such object in {store.name}") from None
    finally:
        await store.close()
