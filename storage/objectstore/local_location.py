"""Where a node's ``file://`` object store is, remembered between its starts.

A relative ``file://`` path in ``s3.data.buckets`` (the default ``0@file://data/objects`` is one) resolves against
the working directory, as a relative ``log.dirs`` does. With an absolute ``log.dirs`` and the default bucket, a
node started again from another directory found its metadata and WAL but not its objects: every partition's open
failed on an object "not found", retried once a second for as long as the node ran, and the node wrote new objects
to the wrong place. Kafka's own data has no second location to lose.

So a node writes the absolute path of its object store to :data:`MARKER` in its metadata directory, and at a later
start it refuses, with one line naming the key and both paths, a store that holds none of its cluster's objects
while the remembered one holds some. A store that was moved (the old path holds nothing of the cluster any more, or
the new one holds its objects) is taken, and remembered from then on.
"""

from __future__ import annotations

from pathlib import Path

from storage.config import BucketURL, ConfigError
from storage.durable import write_atomically

#: In the node's metadata directory (beside ``meta.properties``): the object store's absolute path, one line.
MARKER = "fjord-objects.location"


def check_local_objects(bucket: BucketURL, namespace: str, node_dir: Path, key: str = "s3.data.buckets") -> None:
    """Refuses (ConfigError) a ``file://`` store that lost this cluster's objects to the one this node used before,
    else remembers it. ``namespace``: the cluster's object key component (``storage.namespace.namespace_for``);
    any other scheme is not looked at."""
    if bucket.scheme != "file":
        return
    here = bucket.path.resolve()
    marker = node_dir / MARKER
    try:
        recorded = Path(marker.read_text(encoding="utf-8").strip())
    except FileNotFoundError:
        recorded = None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{key}: cannot read {marker}: {exc}") from None
    if recorded == here:
        return
    if recorded is not None and holds_cluster_objects(recorded, namespace) and not holds_cluster_objects(
        here, namespace
    ):
        raise ConfigError(
            f"{key}: file://{bucket.path} is {here}, which holds none of this cluster's objects; this node kept them "
            f"in {recorded} (a relative path resolves against the working directory: start the node from the "
            f"directory it started in before, or give the path whole, file://{recorded})"
        )
    try:
        write_atomically(marker, f"{here}\n".encode())
    except OSError as exc:
        raise ConfigError(f"{key}: cannot record the object store's location in {marker}: {exc.strerror}") from None


def holds_cluster_objects(root: Path, namespace: str) -> bool:
    """Whether a local store's directory holds at least one object of the cluster: keys are
    ``<prefix>/<namespace>/<object id>`` (``storage.objects.format.object_key``)."""
    try:
        return any((prefix / namespace).is_dir() for prefix in root.iterdir())  # stops at the first
    except OSError:
        return False
