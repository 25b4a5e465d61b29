"""Where the metadata shell gets its records: a running quorum, a snapshot file, or a metadata log directory.

Offline sources are read without changing them: a Raft directory is recovered from a temporary copy (recovery
cuts torn tails and removes temporary files, which an inspection tool must not do to a node's data). Entries of a
Raft log that were written but maybe never committed are included: offline, nothing says where the quorum's
commit point was, and Kafka's shell reads a log directory the same way.

A secured cluster is reached with the TLS context and SASL credentials of the operator's client properties
(``fjord metadata shell --command-config``). Through ``--bootstrap`` they were written for the brokers' listener,
while the controllers the brokers name may listen on SSL alone (mutual TLS between the nodes, SCRAM for clients is
the usual split, and the client cannot learn the CONTROLLER listener's protocol): a voter that answers the
SaslHandshake ILLEGAL_SASL_STATE is asked again over the same TLS without SASL (its certificate, checked against the
truststore, still names the server; a warning on stderr says SASL was skipped). Never without TLS: over plaintext
that answer could come from anyone on the path, and skipping SASL would drop the only proof of the server (SCRAM's
server signature). Named directly (``--controllers``), the file is taken to describe the CONTROLLER listener and
such an answer is the error it is.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from controller.quorum import RAFT_DIR_NAME
from metadata.broker_load import BrokerLoad
from metadata.log import LOG_DIR_NAME, LOG_FILE, MetadataLogError, decode_metadata_records, iter_batches, read_metadata
from metadata.remote.discovery import QuorumDiscoveryError, quorum_voters, unanswered
from metadata.rpc.connection import ConnectionClosedError, ControllerConnection
from metadata.rpc.error_codes import RpcError
from metadata.rpc.stream_rpcs import DescribeBrokerLoad, DescribeMetadata, MetadataDump
from raft.log import EntryKind
from raft.storage import QUORUM_STATE_FILE, RaftStorage, RaftStorageError
from raft.voter_set import unwrap_snapshot
from storage.metadata.api import NodeIdentity
from storage.metadata.record_codec import MetadataRecord
from wire.client import SaslNotEnabled
from wire.sasl.client import SaslCredentials
from wire.tls import ClientTls

logger = logging.getLogger(__name__)

__all__ = [
    "LoadedMetadata",
    "MetadataSourceError",
    "from_brokers",
    "from_controllers",
    "from_directory",
    "from_snapshot",
    "quorum_voters",
]

_RAFT_SNAPSHOT_SUFFIX = ".checkpoint"


class MetadataSourceError(Exception):
    """The records cannot be loaded; the message names the file, directory or controllers."""


@dataclass(frozen=True, slots=True)
class LoadedMetadata:
    records: list[MetadataRecord]
    source: str  # what was read, for the shell's banner
    loads: dict[int, BrokerLoad] | None = None  # the active controller's load reports (a running quorum only)


_CLIENT_ID = "fjord-metadata-shell"


async def from_controllers(
    addresses: list[tuple[str, int]],
    timeout: float = 5.0,
    *,
    tls: ClientTls | None = None,
    sasl: SaslCredentials | None = None,
    sasl_optional: bool = False,
) -> LoadedMetadata:
    """The applied state of the first voter in ``addresses`` that answers DescribeMetadata. Any voter will do:
    each serves the committed records it has applied, so a follower is at most a heartbeat behind. ``tls``/``sasl``:
    how the CONTROLLER listener is reached; ``sasl_optional``: a listener that does not speak SASL is asked without
    (see the module docstring)."""
    problems = []
    for host, port in addresses:
        connection = ControllerConnection(host, port, client_id=_CLIENT_ID, ssl_context=tls, sasl=sasl)
        try:
            connection = await _connect(connection, timeout, sasl_optional)
            response = await connection.stream_request(DescribeMetadata(NodeIdentity(-1, -1)), timeout=timeout)
        except (OSError, TimeoutError, ConnectionClosedError) as exc:
            problems.append(unanswered(host, port, exc, tls))
            continue
        finally:
            await connection.close()
        if response.error_code != RpcError.NONE or not isinstance(response.result, MetadataDump):
            problems.append(f"{host}:{port}: error {response.error_code} {response.error_message or ''}".rstrip())
            continue
        dump = response.result
        records = decode_metadata_records(dump.records, f"DescribeMetadata from {host}:{port}")
        leader = f"leader {dump.leader_id}" if dump.leader_id >= 0 else "no leader known"
        return LoadedMetadata(
            records, f"controller {dump.node_id} at {host}:{port} (epoch {dump.epoch}, {leader}, offset {dump.offset})",
            await _broker_loads(addresses, timeout, tls, sasl, sasl_optional),
        )
    raise MetadataSourceError("no controller answered DescribeMetadata: " + "; ".join(problems))


async def _connect(connection: ControllerConnection, timeout: float, sasl_optional: bool) -> ControllerConnection:
    """``connection`` connected (and authenticated); with ``sasl_optional``, a listener that does not speak SASL is
    connected to again over the same TLS without it. The caller closes ``connection`` (connected or not) and what is
    returned."""
    try:
        await connection.connect(timeout=timeout)
    except SaslNotEnabled:
        if not sasl_optional:
            raise
    else:
        return connection
    await connection.close()
    logger.warning(
        "%s:%d does not speak SASL: reading it over TLS without SASL, authenticated by the client certificate",
        connection.host,
        connection.port,
    )
    plain = ControllerConnection(
        connection.host, connection.port, client_id=connection.client_id, ssl_context=connection.ssl_context
    )
    try:
        await plain.connect(timeout=timeout)
    except BaseException:
        await plain.close()
        raise
    return plain


async def _broker_loads(
    addresses: list[tuple[str, int]],
    timeout: float,
    tls: ClientTls | None,
    sasl: SaslCredentials | None,
    sasl_optional: bool,
) -> dict[int, BrokerLoad] | None:
    """The load reports the active controller keeps (DescribeBrokerLoad; the others answer NOT_CONTROLLER), or None
    when no voter answers with them: the shell then shows the metadata without load."""
    for host, port in addresses:
        connection = ControllerConnection(host, port, client_id=_CLIENT_ID, ssl_context=tls, sasl=sasl)
        try:
            connection = await _connect(connection, timeout, sasl_optional)
            response = await connection.stream_request(DescribeBrokerLoad(NodeIdentity(-1, -1)), timeout=timeout)
        except (OSError, TimeoutError, ConnectionClosedError):
            continue
        finally:
            await connection.close()
        if response.error_code == RpcError.NONE and isinstance(response.result, tuple):
            return {
                report.node_id: BrokerLoad(report.node_id, report.age_s,
                                           {(p.topic, p.partition): p for p in report.partitions})
                for report in response.result
            }
    return None


async def from_brokers(
    addresses: list[tuple[str, int]],
    timeout: float = 5.0,
    *,
    tls: ClientTls | None = None,
    sasl: SaslCredentials | None = None,
) -> LoadedMetadata:
    """Via a broker: the controllers it names (:func:`quorum_voters`) are asked as :func:`from_controllers` does,
    with the brokers' ``tls`` and, where their listener speaks SASL, ``sasl``."""
    try:
        voters = await quorum_voters(addresses, timeout, _CLIENT_ID, tls=tls, sasl=sasl)
    except QuorumDiscoveryError as exc:
        raise MetadataSourceError(str(exc)) from exc
    return await from_controllers(list(voters.values()), timeout, tls=tls, sasl=sasl, sasl_optional=tls is not None)


def from_snapshot(path: Path) -> LoadedMetadata:
    """A Raft snapshot (``snapshots/<end>-<epoch>.checkpoint``) or a local metadata log snapshot
    (``snapshot-<offset>.snapshot``)."""
    if not path.is_file():
        raise MetadataSourceError(f"{path}: no such snapshot file")
    if path.suffix == _RAFT_SNAPSHOT_SUFFIX:
        with tempfile.TemporaryDirectory(prefix="fjord-shell-") as scratch:
            snapshots = Path(scratch) / "snapshots"
            snapshots.mkdir()
            shutil.copy2(path, snapshots / path.name)
            data = _recover(Path(scratch), str(path))[0]
        if not data:
            raise MetadataSourceError(f"{path}: not a readable Raft snapshot (bad header or CRC)")
        return LoadedMetadata(decode_metadata_records(data, str(path)), f"Raft snapshot {path}")
    raw = path.read_bytes()
    records: list[MetadataRecord] = []
    consumed = 0
    try:
        for position, batch in iter_batches(raw, str(path)):
            records.extend(batch.records)
            consumed = position
    except MetadataLogError as exc:
        raise MetadataSourceError(str(exc)) from None
    if consumed != len(raw) or not raw:
        raise MetadataSourceError(f"{path}: not a metadata snapshot (damaged at byte {consumed} of {len(raw)})")
    return LoadedMetadata(records, f"snapshot {path}")


def from_directory(path: Path) -> LoadedMetadata:
    """A node's metadata directory (``log.dirs``/``metadata.log.dir``), or the log directory inside it: the
    Raft log of a quorum member or broker, or the local metadata log of a single combined node."""
    if not path.is_dir():
        raise MetadataSourceError(f"{path}: no such directory")
    for candidate in (path, path / RAFT_DIR_NAME):
        if (candidate / QUORUM_STATE_FILE).exists() or (candidate / "snapshots").is_dir():
            return _raft_directory(candidate)
    for candidate in (path, path / LOG_DIR_NAME):
        if (candidate / LOG_FILE).exists() or any(candidate.glob("snapshot-*.snapshot")):
            try:
                recovered = read_metadata(candidate)
            except MetadataLogError as exc:
                raise MetadataSourceError(str(exc)) from None
            records = list(recovered.snapshot_records)
            for batch in recovered.batches:
                records.extend(batch.records)
            return LoadedMetadata(records, f"metadata log {candidate} (to offset {recovered.last_offset})")
    raise MetadataSourceError(
        f"{path}: no metadata log here (looked for {RAFT_DIR_NAME}/ and {LOG_DIR_NAME}/)"
    )


def _raft_directory(directory: Path) -> LoadedMetadata:
    with tempfile.TemporaryDirectory(prefix="fjord-shell-") as scratch:
        copy = Path(scratch) / "raft"
        shutil.copytree(directory, copy)
        snapshot, entries, end = _recover(copy, str(directory))
    records = decode_metadata_records(snapshot, f"{directory} snapshot") if snapshot else []
    for offset, data in entries:
        records.extend(decode_metadata_records(data, f"{directory} entry {offset}"))
    return LoadedMetadata(records, f"Raft log {directory} (to offset {end - 1})")


def _recover(directory: Path, source: str) -> tuple[bytes, list[tuple[int, bytes]], int]:
    storage = RaftStorage(directory)
    try:
        state = storage.recover()
        storage.close()
    except (RaftStorageError, OSError) as exc:
        raise MetadataSourceError(f"{source}: {exc}") from None
    log = state.log
    entries = [(e.offset, e.data) for e in log.read(log.start_offset) if e.kind is EntryKind.DATA]
    _voters, data = unwrap_snapshot(state.snapshot_data)  # the voters a snapshot carries are Raft's, not metadata
    return data, entries, log.end_offset
