"""DescribeLogDirs (key 35) v1-5: what ``kafka-log-dirs.sh --describe`` and admin clients' ``describe_log_dirs``
send, answered with what a Fjord broker really has.

A Fjord partition has no log directory of its own: its data lives in object storage, and what this broker writes
enters through its WAL (a directory, or an S3 bucket for the S3 WAL). So the WAL is reported as the log dir holding
every partition this broker leads, each with its size (the partition's own accounting of its stored batches,
``PartitionLog.size_bytes``, what retention.bytes limits), offset lag 0 (there are no follower copies to lag) and
never a future replica. The node's ``log.dirs`` (its metadata log and meta.properties) are reported too, empty of
partitions, so an operator sees every directory the broker writes. The disk sizes (v4) are the filesystem's; a WAL
in S3 has none (-1, as Kafka reports an unknown size); v5's ``is_cordoned`` (KIP-1066) is always false, Fjord
never cordons a directory. kio has no v0 of this API, so v1 is the first served. The
CLUSTER DESCRIBE check is ``authorize_describe_log_dirs``, below.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from kio.schema.errors import ErrorCode

from broker.handlers.context import RequestContext
from broker.handlers.guards import Guard, cluster
from metadata.acl.binding import AclOperation
from wire import schema

#: How long a partition this broker leads but is still opening is waited for.
_OPEN_WAIT_S = 5.0


@dataclass(frozen=True, slots=True)
class LogDir:
    """One log dir of the answer: its name, its partitions ((topic, partition, size in bytes)) and its disk."""

    name: str
    partitions: tuple[tuple[str, int, int], ...] = ()
    total_bytes: int = -1
    usable_bytes: int = -1
    error: ErrorCode = ErrorCode.none


def _disk(path: Path) -> tuple[int, int, ErrorCode]:
    """(total, usable, error) of the filesystem holding ``path``; KAFKA_STORAGE_ERROR when it cannot be read."""
    try:
        usage = shutil.disk_usage(path)
    except OSError:
        return -1, -1, ErrorCode.kafka_storage_error
    return usage.total, usage.free, ErrorCode.none


def log_dirs(
    wal: tuple[str, Path | None], node_dirs: Iterable[Path], partitions: Sequence[tuple[str, int, int]]
) -> list[LogDir]:
    """``wal``: (name, local directory or None for a WAL in object storage); ``partitions``: what this broker
    leads, all reported under the WAL."""
    name, wal_path = wal
    total, usable, error = _disk(wal_path) if wal_path is not None else (-1, -1, ErrorCode.none)
    out = [LogDir(name, tuple(partitions), total, usable, error)]
    seen = {name}
    for directory in node_dirs:
        if str(directory) in seen:
            continue
        seen.add(str(directory))
        out.append(LogDir(str(directory), (), *_disk(directory)))
    return out


def _wanted(request: Any) -> set[tuple[str, int]] | None:
    if request.topics is None:
        return None
    return {(t.topic, int(p)) for t in request.topics for p in t.partitions}


async def _led_partitions(ctx: RequestContext, wanted: set[tuple[str, int]] | None) -> list[tuple[str, int, int]]:
    """(topic, partition, size) of every partition this broker leads (and the request asks about). One still
    being opened (just created or moved here) is waited for, up to ``_OPEN_WAIT_S``; one not open by then is left
    out rather than reported with a size nobody has read."""
    led = [
        (topic, part.partition)
        for topic, part in ctx.broker.controller.image.partitions_led_by(ctx.broker.node_id)
        if wanted is None or (topic, part.partition) in wanted
    ]
    manager = ctx.broker.partitions
    logs = await asyncio.gather(*(manager.wait_open(topic, index, _OPEN_WAIT_S) for topic, index in led))
    return sorted((log.topic, log.partition, log.size_bytes) for log in logs if log is not None)


async def handle_describe_log_dirs(ctx: RequestContext, request: Any) -> Any:
    config = ctx.broker.config
    wal_url = config.storage.wal_url
    wal = (str(wal_url.path), wal_url.path) if wal_url.scheme == "file" else (wal_url.describe(), None)
    partitions = await _led_partitions(ctx, _wanted(request))
    result_cls = schema.field_entity(ctx.response_class, "results")
    topic_cls = schema.field_entity(result_cls, "topics")
    results = []
    for log_dir in log_dirs(wal, config.log_dirs, partitions):
        by_topic: dict[str, list[Any]] = {}
        for topic, index, size in log_dir.partitions:
            by_topic.setdefault(topic, []).append(
                schema.build_nested(
                    topic_cls,
                    "partitions",
                    partition_index=index,
                    partition_size=size,
                    offset_lag=0,
                    is_future_key=False,
                )
            )
        results.append(
            schema.build(
                result_cls,
                error_code=log_dir.error,
                log_dir=log_dir.name,
                topics=tuple(
                    schema.build(topic_cls, name=name, partitions=tuple(parts)) for name, parts in by_topic.items()
                ),
                total_bytes=log_dir.total_bytes,
                usable_bytes=log_dir.usable_bytes,
            )
        )
    return ctx.build(throttle_time=0, error_code=ErrorCode.none, results=tuple(results))


#: CLUSTER DESCRIBE, as Kafka checks; a refusal refuses the whole request.
authorize_describe_log_dirs: Final[Guard] = cluster(AclOperation.DESCRIBE)
