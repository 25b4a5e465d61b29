"""``meta.properties``: the identity of a data directory (which node owns it, which cluster it belongs to).

A node formats its directory on first start and checks it on every later one, as KRaft does, so that a directory
copied to another node or cluster is refused instead of silently mixing two clusters' metadata.
"""

from __future__ import annotations

import base64
import logging
import os
import uuid
from dataclasses import dataclass, replace
from pathlib import Path

from settings.bootstrap_file import META_PROPERTIES, read_bootstrap
from settings.kafka_uuid import is_kafka_uuid, new_kafka_uuid
from settings.quorum_voters import VOTERS_KEY
from settings.server import ServerConfig
from storage.config import ConfigError, read_properties
from storage.durable import write_atomically

logger = logging.getLogger(__name__)



@dataclass(frozen=True, slots=True)
class MetaProperties:
    """The identity of a data directory: which node owns it and which cluster it belongs to (KRaft v1)."""

    node_id: int
    cluster_id: str
    version: int = 1
    #: Kafka's ``directory.id`` (KIP-858): tells this directory from any other, so the controller can tell a broker
    #: restarting from it from another broker started with the same node.id (``controller.quorum``).
    directory_id: str | None = None


#: A new cluster id, and whether a text is one (``settings.kafka_uuid``).
new_cluster_id = new_kafka_uuid
is_valid_cluster_id = is_kafka_uuid


def read_meta_properties(directory: str | os.PathLike[str]) -> MetaProperties | None:
    """The directory's identity, or None if it was never formatted. ConfigError names the file if it is bad."""
    path = Path(directory) / META_PROPERTIES
    if not path.exists():
        return None
    props = read_properties(path)
    try:
        version = int(props.get("version", ""))
    except ValueError:
        raise ConfigError(f"{path}: version {props.get('version')!r} is not a number") from None
    if version != 1:
        raise ConfigError(f"{path}: unsupported version {version} (this node writes and reads version=1)")
    node_text = props.get("node.id")
    cluster_id = props.get("cluster.id")
    if node_text is None or not node_text.strip().lstrip("-").isdigit():
        raise ConfigError(f"{path}: node.id is missing or not a number")
    if not cluster_id or not is_valid_cluster_id(cluster_id):
        raise ConfigError(f"{path}: cluster.id {cluster_id!r} is not a 22-character base64url UUID")
    directory_id = props.get("directory.id")
    if directory_id is not None and not is_kafka_uuid(directory_id):
        raise ConfigError(f"{path}: directory.id {directory_id!r} is not a 22-character base64url UUID")
    return MetaProperties(int(node_text), cluster_id, version, directory_id)


def write_meta_properties(directory: str | os.PathLike[str], meta: MetaProperties) -> None:
    """Atomically (temp file, fsync, rename, fsync the directory) so a crash never leaves half a file."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    text = f"#\nnode.id={meta.node_id}\nversion={meta.version}\ncluster.id={meta.cluster_id}\n"
    if meta.directory_id is not None:
        text += f"directory.id={meta.directory_id}\n"
    write_atomically(folder / META_PROPERTIES, text.encode("utf-8"))


def ensure_meta_properties(
    directory: str | os.PathLike[str], node_id: int, cluster_id: str | None = None
) -> MetaProperties:
    """Formats ``directory`` on first start (a new cluster id unless one is given) and checks it afterwards: a
    directory that belongs to another node or cluster is refused with a one-line ConfigError. A directory formatted
    without a ``directory.id`` (by an earlier Fjord) is given one, as Kafka 3.7 gives it to older directories."""
    path = Path(directory) / META_PROPERTIES
    existing = read_meta_properties(directory)
    if existing is None:
        if cluster_id is not None and not is_valid_cluster_id(cluster_id):
            raise ConfigError(f"cluster id {cluster_id!r} is not a 22-character base64url UUID")
        meta = MetaProperties(node_id, cluster_id or new_cluster_id(), directory_id=new_kafka_uuid())
        write_meta_properties(directory, meta)
        logger.info("formatted %s: node.id=%d cluster.id=%s", path, meta.node_id, meta.cluster_id)
        return meta
    if existing.node_id != node_id:
        raise ConfigError(
            f"{path} has node.id={existing.node_id} but the configuration has node.id={node_id}; "
            "use the matching node.id or another log.dirs"
        )
    if cluster_id is not None and existing.cluster_id != cluster_id:
        raise ConfigError(f"{path} belongs to cluster {existing.cluster_id}, not {cluster_id}")
    if existing.directory_id is None:
        existing = replace(existing, directory_id=new_kafka_uuid())
        write_meta_properties(directory, existing)
    return existing


def ensure_quorum_meta_properties(config: ServerConfig) -> MetaProperties:
    """:func:`ensure_meta_properties` of a quorum node's metadata directory with :func:`quorum_cluster_id`, or with
    the id ``fjord storage format`` gave the directory (``settings.bootstrap_file``), or the directory's own when the
    node's file names bootstrap servers instead of voters: the voters it learns from them (a broker) or from its log
    (a static quorum's controller after ``kraft.version`` 1, ``voters_in_log``) change with the quorum, the cluster
    does not. When the id is derived and differs from the directory's, the error says why (the voters are written
    otherwise than at the first start: ``localhost`` for ``127.0.0.1``, say) and how to keep the directory's
    cluster."""
    formatted = read_bootstrap(config.metadata_dir)
    if formatted is not None:  # formatted on purpose (fjord storage format -t): its cluster id stands
        configured = config.static.get("cluster.id")
        if configured and configured != formatted.cluster_id:
            raise ConfigError(
                f"cluster.id {configured} is not the cluster id {formatted.cluster_id} that "
                f"{Path(config.metadata_dir)} was formatted with"
            )
        return ensure_meta_properties(config.metadata_dir, config.node_id, formatted.cluster_id)
    existing = read_meta_properties(config.metadata_dir) if VOTERS_KEY not in config.static else None
    if existing is not None:  # named by bootstrap servers alone: no list of its own to derive the id from
        return ensure_meta_properties(config.metadata_dir, config.node_id,
                                      config.static.get("cluster.id") or existing.cluster_id)
    cluster_id = quorum_cluster_id(config)
    try:
        return ensure_meta_properties(config.metadata_dir, config.node_id, cluster_id)
    except ConfigError:
        existing = read_meta_properties(config.metadata_dir)
        if config.static.get("cluster.id") or existing is None or existing.cluster_id == cluster_id:
            raise
        raise ConfigError(
            f"{Path(config.metadata_dir) / META_PROPERTIES} belongs to cluster {existing.cluster_id}, not "
            f"{cluster_id}: without cluster.id, a quorum node's cluster id is derived from controller.quorum.voters "
            f"as written ({','.join(config.value('controller.quorum.voters'))}), so the voters must be written the "
            "same way on every start and every node (the same hosts, e.g. 127.0.0.1 not localhost, and ports); "
            f"write them as at the first start, or keep this cluster with cluster.id={existing.cluster_id}"
        ) from None


def quorum_cluster_id(config: ServerConfig) -> str:
    """The cluster id every voter formats with: ``cluster.id`` when configured, else one derived from the voter
    list, so the voters of one quorum agree without a separate format step (KRaft's ``kafka-storage format -t``)."""
    configured = config.static.get("cluster.id")
    if configured:
        if not is_valid_cluster_id(configured):
            raise ConfigError(f"cluster.id {configured!r} is not a 22-character base64url UUID")
        return configured
    voters = ",".join(f"{v.node_id}@{v.host}:{v.port}" for v in sorted(config.voters, key=lambda v: v.node_id))
    derived = uuid.uuid5(uuid.NAMESPACE_URL, f"fjord-quorum:{voters}")
    return base64.urlsafe_b64encode(derived.bytes).decode().rstrip("=")
