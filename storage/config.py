"""Storage configuration: the ``s3.*`` keys (DESIGN.md §11) and the properties-file reader every process uses.

Object stores and WALs are named by AutoMQ-style URLs: ``0@s3://BUCKET?region=R&endpoint=URL&pathStyle=true``
or ``0@file:///ABS/PATH`` (``0@file://data/objects`` is relative to the working directory). The leading ``N@`` is
the bucket index; several comma-separated URLs are allowed, the first is where new data goes.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from storage.namespace import namespace_for

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB


class ConfigError(ValueError):
    """A configuration value is missing or invalid; the message names the key."""


@dataclass(frozen=True, slots=True)
class BucketURL:
    """One object-storage location."""

    index: int
    scheme: str  # "file", "s3" or "mem"
    bucket: str  # S3 bucket name; for file://, the directory path; for mem://, a name
    region: str = "us-east-1"
    endpoint: str | None = None
    path_style: bool = False
    access_key: str | None = None
    secret_key: str | None = None
    params: Mapping[str, str] = field(default_factory=dict)

    @property
    def path(self) -> Path:
        return Path(self.bucket)

    def describe(self) -> str:
        """For logs: never includes credentials."""
        if self.scheme == "s3":
            where = f" at {self.endpoint}" if self.endpoint else ""
            return f"s3://{self.bucket}{where}"
        return f"{self.scheme}://{self.bucket}"


#: The URL parameters an S3 bucket takes (AutoMQ's names), and those only a WAL URL (``s3.wal.path``) takes on top
#: (``storage.wal.s3``). A file:// URL takes none; mem://, the in-memory store of tests, only the WAL's.
S3_URL_PARAMS = ("region", "endpoint", "pathStyle", "accessKey", "secretKey")
WAL_URL_PARAMS = ("batchInterval", "maxBytesInBatch")
#: Parameters whose values an error message must never show.
_SECRET_PARAMS = ("secretKey",)


def _redacted(text: str) -> str:
    """``text`` with every secret parameter's value hidden, for error messages (they reach logs and terminals)."""
    return re.sub(rf"(\b(?:{'|'.join(_SECRET_PARAMS)})=)[^&]*", r"\1***", text)


def _check_params(query: Mapping[str, str], scheme: str, key: str, *, wal: bool) -> None:
    """Refuses a parameter Fjord does not read for this kind of URL, and a value it cannot use, naming ``key`` and
    the parameter: a misspelt ``pathstyle`` or a ``pathStyle=maybe`` would otherwise be ignored without a word."""
    known = (S3_URL_PARAMS if scheme == "s3" else ()) + (WAL_URL_PARAMS if wal and scheme != "file" else ())
    for name, value in query.items():
        if name not in known and name in WAL_URL_PARAMS and scheme != "file":
            raise ConfigError(f"{key}: bucket URL parameter {name!r} is for the WAL's URL only (s3.wal.path)")
        if name not in known:
            takes = ", ".join(known) if known else "none"
            raise ConfigError(f"{key}: unknown bucket URL parameter {name!r} ({scheme}:// URLs take {takes})")
        shown = "***" if name in _SECRET_PARAMS else value
        if name == "pathStyle" and value.lower() not in ("true", "false"):
            raise ConfigError(f"{key}: bucket URL parameter pathStyle={shown!r} is not true or false")
        if name in WAL_URL_PARAMS and not (value.isdigit() and int(value) > 0):
            raise ConfigError(f"{key}: bucket URL parameter {name}={shown!r} is not a positive integer")
        if name == "endpoint":
            endpoint = urlsplit(value)
            if endpoint.scheme not in ("http", "https") or not endpoint.netloc:
                raise ConfigError(f"{key}: bucket URL parameter endpoint={shown!r} is not an http:// or https:// URL")
        if name in ("region", "accessKey", "secretKey") and not value:
            raise ConfigError(f"{key}: bucket URL parameter {name} is empty")


def parse_bucket_url(text: str, key: str = "s3.data.buckets", *, wal: bool = False) -> BucketURL:
    """Parses ``N@scheme://...``; ``key`` names the setting in error messages; ``wal``: the URL is a WAL's
    (``s3.wal.path``), which takes the WAL's parameters too."""
    text = text.strip()
    index = 0
    if "@" in text.split("://", 1)[0]:
        prefix, text = text.split("@", 1)
        if not prefix.isdigit():
            raise ConfigError(f"{key}: bucket index {prefix!r} is not a number in {_redacted(text)!r}")
        index = int(prefix)
    parts = urlsplit(text)
    query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
    if parts.scheme in ("file", "mem", "s3"):
        _check_params(query, parts.scheme, key, wal=wal)
    if parts.scheme == "file":
        raw = parts.netloc + parts.path
        if not raw:
            raise ConfigError(f"{key}: file URL {text!r} has no path")
        return BucketURL(index, "file", str(Path(raw)), params=query)
    if parts.scheme == "mem":
        return BucketURL(index, "mem", parts.netloc or "default", params=query)
    if parts.scheme == "s3":
        if not parts.netloc:
            raise ConfigError(f"{key}: S3 URL {_redacted(text)!r} has no bucket name")
        return BucketURL(
            index,
            "s3",
            parts.netloc,
            region=query.get("region", "us-east-1"),
            endpoint=query.get("endpoint") or None,
            path_style=query.get("pathStyle", "false").lower() == "true",
            access_key=query.get("accessKey")
            or os.environ.get("AWS_ACCESS_KEY_ID")
            or os.environ.get("KAFKA_S3_ACCESS_KEY"),
            secret_key=query.get("secretKey")
            or os.environ.get("AWS_SECRET_ACCESS_KEY")
            or os.environ.get("KAFKA_S3_SECRET_KEY"),
            params=query,
        )
    raise ConfigError(f"{key}: unsupported object storage URL {_redacted(text)!r} (use s3://, file:// or mem://)")


def parse_bucket_urls(text: str, key: str) -> list[BucketURL]:
    urls = [parse_bucket_url(part, key) for part in text.split(",") if part.strip()]
    if not urls:
        raise ConfigError(f"{key}: no bucket URL given")
    return urls


def read_properties(path: str | os.PathLike[str]) -> dict[str, str]:
    """Reads a Java-style ``.properties`` file (``key=value`` or ``key: value``, ``#``/``!`` comments,
    trailing-backslash continuations). UTF-8, else ISO-8859-1: Kafka reads its properties files as ISO-8859-1
    (``Properties.load`` of a stream), so a file written for it with an accented comment or value must load too,
    while a UTF-8 file (every ASCII one among them) reads as its author wrote it."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("iso-8859-1")  # decodes any byte
    return parse_properties(text.splitlines(), str(path))


def parse_properties(lines: Iterable[str], source: str = "<properties>") -> dict[str, str]:
    out: dict[str, str] = {}
    pending = ""
    for number, raw in enumerate(lines, 1):
        line = pending + raw.strip() if pending else raw.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\"):
            pending = line[:-1]
            continue
        for i, ch in enumerate(line):
            if ch in "=:":
                key, value = line[:i].strip(), line[i + 1 :].strip()
                break
        else:
            raise ConfigError(f"{source}:{number}: expected key=value, got {raw.strip()!r}")
        if not key:
            raise ConfigError(f"{source}:{number}: empty key")
        out[key] = value
    return out


def parse_overrides(items: Iterable[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"--override expects key=value, got {item!r}")
        key, value = item.split("=", 1)
        out[key.strip()] = value.strip()
    return out


def parse_size(value: str, key: str) -> int:
    """Bytes from ``524288``, ``512KiB``, ``8MiB``, ``1GiB`` (also KB/MB/GB as binary units, as AutoMQ)."""
    text = value.strip().replace(" ", "")
    units = {"kib": KiB, "kb": KiB, "k": KiB, "mib": MiB, "mb": MiB, "m": MiB, "gib": GiB, "gb": GiB, "g": GiB}
    lower = text.lower()
    for suffix in sorted(units, key=len, reverse=True):
        if lower.endswith(suffix):
            number = lower[: -len(suffix)]
            scale = units[suffix]
            break
    else:
        number, scale = lower, 1
    try:
        result = int(float(number) * scale)
    except ValueError:
        raise ConfigError(f"{key}: {value!r} is not a size") from None
    if result < 0:
        raise ConfigError(f"{key}: {value!r} must not be negative")
    return result


def parse_int(value: str, key: str) -> int:
    try:
        return int(value.strip())
    except ValueError:
        raise ConfigError(f"{key}: {value!r} is not an integer") from None


def parse_bool(value: str, key: str) -> bool:
    lower = value.strip().lower()
    if lower in ("true", "1", "yes"):
        return True
    if lower in ("false", "0", "no"):
        return False
    raise ConfigError(f"{key}: {value!r} is not true or false")


@dataclass(frozen=True, slots=True)
class StorageConfig:
    """Every knob of the storage engine, with AutoMQ's defaults scaled for one process (DESIGN.md §12)."""

    data_buckets: tuple[BucketURL, ...] = (BucketURL(0, "file", "data/objects"),)
    wal_url: BucketURL = BucketURL(0, "file", "data/wal")
    cluster_id: str = "fjord"
    node_id: int = 0
    node_epoch: int = 0

    # WAL
    wal_capacity: int = 2 * GiB  # file WAL: bytes on disk before appends wait for uploads (backpressure)
    wal_segment_size: int = 64 * MiB
    wal_batch_interval_ms: int = 250  # s3 WAL: flush a batch at least this often
    wal_max_bytes_in_batch: int = 8 * MiB  # s3 WAL: or when this many bytes are pending
    # s3 WAL: once S3 has refused its writes this long, new appends are refused (retriable) until S3 answers;
    # appends already taken wait, unacknowledged, and are written when S3 answers again.
    wal_unwritable_max_ms: int = 30_000
    # s3 WAL: once S3 has refused its writes this long, the broker hands over (``broker.wal_handover``): it asks the
    # controller to fence it, its partitions move and another broker replays its WAL; -1 never hands over. Longer
    # than an outage of all S3 should last: when S3 is away for every broker, each would hand over in turn, and
    # coming back through restarts and WAL replays takes seconds where riding the outage out takes under one.
    wal_handover_ms: int = 120_000
    # How long a stopping broker gives its partitions' last uploads and stream closes (after its controlled
    # shutdown): past it, it stops as after a crash, its appends not yet written failing unacknowledged and what it
    # acknowledged left in its WAL (another broker replays an S3 WAL, a restart the file WAL), so a stop during an
    # S3 outage does not wait on the upload pipeline's retries.
    shutdown_upload_max_ms: int = 15_000

    # LogCache and upload
    wal_cache_size: int = 1 * GiB
    wal_upload_threshold: int = 500 * MiB
    wal_upload_interval_ms: int = 60_000
    stream_object_split_size: int = 8 * MiB
    object_block_size: int = 512 * KiB
    object_part_size: int = 16 * MiB

    # read path
    block_cache_size: int = 512 * MiB
    readahead_max: int = 32 * MiB

    # S3 client
    s3_max_concurrency: int = 32
    s3_max_retries: int = 8

    # compaction and lifecycle
    stream_set_object_compaction_interval_ms: int = 5 * 60_000
    stream_set_object_compaction_force_split_ms: int = 120 * 60_000
    stream_set_object_compaction_max_objects: int = 500
    stream_set_object_compaction_cache_size: int = 200 * MiB  # source bytes one merge round may hold in memory
    stream_object_compaction_interval_ms: int = 60_000
    stream_object_compaction_small_size: int = 4 * MiB
    object_prepare_ttl_ms: int = 60 * 60_000
    object_delete_retention_ms: int = 60_000

    @property
    def namespace(self) -> str:
        return namespace_for(self.cluster_id)

    @classmethod
    def from_properties(cls, props: Mapping[str, str], **fixed: object) -> StorageConfig:
        """Reads the ``s3.*`` keys; an ``s3.*`` key it does not know stops the start naming it (a misspelt key
        would otherwise leave its default in place without a word). Keys outside ``s3.*`` belong to other
        components and are not looked at."""
        for name in props:
            if name.startswith("s3.") and name not in STORAGE_KEYS:
                raise ConfigError(_unknown_storage_key(name))
        values: dict[str, object] = {}
        if "s3.data.buckets" in props:
            values["data_buckets"] = tuple(parse_bucket_urls(props["s3.data.buckets"], "s3.data.buckets"))
        if "s3.wal.path" in props:
            values["wal_url"] = parse_bucket_url(props["s3.wal.path"], "s3.wal.path", wal=True)
        for key, (name, parse) in _KEYS.items():
            if key in props:
                values[name] = parse(props[key], key)
        values.update(fixed)
        config = cls(**values)  # type: ignore[arg-type]
        config.validate()
        return config

    def validate(self) -> None:
        if self.object_block_size <= 0:
            raise ConfigError("s3.object.block.size must be positive")
        if self.wal_upload_threshold <= 0:
            raise ConfigError("s3.wal.upload.threshold must be positive")
        if self.wal_cache_size < self.wal_upload_threshold:
            raise ConfigError(
                f"s3.wal.cache.size ({self.wal_cache_size}) must be at least s3.wal.upload.threshold "
                f"({self.wal_upload_threshold})"
            )
        if self.wal_url.scheme not in ("file", "s3", "mem"):
            raise ConfigError(f"s3.wal.path: unsupported WAL URL scheme {self.wal_url.scheme!r}")


_KEYS: dict[str, tuple[str, Callable[[str, str], object]]] = {}


def _register() -> None:
    sizes = {
        "s3.wal.capacity": "wal_capacity",
        "s3.wal.segment.size": "wal_segment_size",
        "s3.wal.cache.size": "wal_cache_size",
        "s3.wal.upload.threshold": "wal_upload_threshold",
        "s3.stream.object.split.size": "stream_object_split_size",
        "s3.object.block.size": "object_block_size",
        "s3.object.part.size": "object_part_size",
        "s3.block.cache.size": "block_cache_size",
        "s3.readahead.max.size": "readahead_max",
        "s3.wal.max.bytes.in.batch": "wal_max_bytes_in_batch",
        "s3.stream.object.compaction.small.size": "stream_object_compaction_small_size",
        "s3.stream.set.object.compaction.cache.size": "stream_set_object_compaction_cache_size",
    }
    ints = {
        "s3.wal.batch.interval.ms": "wal_batch_interval_ms",
        "s3.wal.unwritable.max.ms": "wal_unwritable_max_ms",
        "s3.wal.handover.ms": "wal_handover_ms",
        "s3.shutdown.upload.max.ms": "shutdown_upload_max_ms",
        "s3.wal.upload.interval.ms": "wal_upload_interval_ms",
        "s3.max.concurrency": "s3_max_concurrency",
        "s3.max.retries": "s3_max_retries",
        "s3.stream.set.object.compaction.interval.ms": "stream_set_object_compaction_interval_ms",
        "s3.stream.set.object.compaction.force.split.ms": "stream_set_object_compaction_force_split_ms",
        "s3.stream.set.object.compaction.max.num": "stream_set_object_compaction_max_objects",
        "s3.stream.object.compaction.interval.ms": "stream_object_compaction_interval_ms",
        "s3.object.prepare.ttl.ms": "object_prepare_ttl_ms",
        "s3.object.delete.retention.ms": "object_delete_retention_ms",
    }
    for key, name in sizes.items():
        _KEYS[key] = (name, parse_size)
    for key, name in ints.items():
        _KEYS[key] = (name, parse_int)


_register()


#: Every ``s3.*`` key Fjord reads.
STORAGE_KEYS: frozenset[str] = frozenset(("s3.data.buckets", "s3.wal.path", *_KEYS))
#: AutoMQ's older keys for one S3 bucket (deprecated there for ``s3.data.buckets``), and the URL part each became.
_AUTOMQ_BUCKET_KEYS = {
    "s3.endpoint": "endpoint=URL",
    "s3.region": "region=R",
    "s3.bucket": "BUCKET",
    "s3.path.style": "pathStyle=true",
}


def _unknown_storage_key(name: str) -> str:
    if name in _AUTOMQ_BUCKET_KEYS:
        return (
            f"{name}: AutoMQ's older bucket setting, which Fjord does not read; give the bucket as one URL, "
            f"s3.data.buckets=0@s3://BUCKET?region=R&endpoint=URL&pathStyle=true (its {_AUTOMQ_BUCKET_KEYS[name]})"
        )
    close = difflib.get_close_matches(name, sorted(STORAGE_KEYS), n=1)
    hint = f"did you mean {close[0]}?" if close else "README.md lists the storage keys"
    return f"{name}: not a storage setting of Fjord ({hint})"
