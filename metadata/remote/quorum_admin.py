"""An operator's requests to the controller quorum: its status (DescribeQuorum v2) and its voter changes (AddRaftVoter,
RemoveRaftVoter of KIP-853), as ``kafka-metadata-quorum.sh`` sends them; and a controller's own, when it adds itself
(``controller.auto_join``) or announces a moved listener (UpdateRaftVoter, ``controller.voter_endpoint``).

The quorum is reached through controllers (``--bootstrap-controller``: any voter names the others and the leader) or
brokers (``--bootstrap-server``: a broker forwards DescribeQuorum to the leader and names the controllers); a voter
change then goes to the leader's CONTROLLER listener, the one replica that may append it.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from metadata.remote.discovery import unanswered
from metadata.rpc.connection import ConnectionClosedError, ControllerConnection
from metadata.rpc.kafka_apis import ADD_RAFT_VOTER, REMOVE_RAFT_VOTER, UPDATE_RAFT_VOTER
from metadata.rpc.raft_codec import describe_quorum_request, described_voters
from settings.quorum_voters import BOOTSTRAP_KEY, parse_bootstrap_servers
from settings.server import ServerConfig
from wire import codec, schema
from wire.sasl.client import SaslCredentials
from wire.tls import ClientTls

_CLIENT_ID = "fjord-metadata-quorum"
_ZERO_UUID = uuid.UUID(int=0)


class QuorumAdminError(Exception):
    """The request was not done; the message says why, naming the addresses asked or Kafka's error."""


@dataclass(frozen=True, slots=True)
class Replica:
    node_id: int
    directory_id: uuid.UUID | None
    log_end_offset: int
    last_fetch_ms: int
    last_caught_up_ms: int


@dataclass(frozen=True, slots=True)
class QuorumStatus:
    leader_id: int
    leader_epoch: int
    high_watermark: int
    voters: tuple[Replica, ...]
    observers: tuple[Replica, ...]
    endpoints: dict[int, tuple[str, int]]  # each voter's CONTROLLER listener


@dataclass(frozen=True, slots=True)
class QuorumClient:
    """Where to ask (controllers or brokers: both answer DescribeQuorum) and how to connect."""

    addresses: tuple[tuple[str, int], ...]
    tls: ClientTls | None = None
    sasl: SaslCredentials | None = None
    timeout_s: float = 10.0

    async def status(self) -> QuorumStatus:
        """The leader's view of the quorum (a follower's answer only points to the leader, which is then asked)."""
        problems: list[str] = []
        pending = list(self.addresses)
        asked: set[tuple[str, int]] = set()
        while pending:
            address = pending.pop(0)
            if address in asked:
                continue
            asked.add(address)
            try:
                response = await self._call(address, describe_quorum_request())
            except QuorumAdminError as exc:
                problems.append(str(exc))
                continue
            partition = response.topics[0].partitions[0] if response.topics and response.topics[0].partitions \
                else None
            endpoints = described_voters(response)
            error = ErrorCode(int(partition.error_code if partition is not None else response.error_code))
            if error is ErrorCode.none and partition is not None:
                return QuorumStatus(
                    int(partition.leader_id), int(partition.leader_epoch), int(partition.high_watermark),
                    tuple(_replica(r) for r in partition.current_voters),
                    tuple(_replica(r) for r in partition.observers), endpoints,
                )
            problems.append(f"{address[0]}:{address[1]}: {error.name.upper()}")
            leader = int(partition.leader_id) if partition is not None else -1
            if leader in endpoints:
                pending.insert(0, endpoints[leader])
            else:
                pending.extend(endpoints.values())
        raise QuorumAdminError("no controller answered DescribeQuorum as the leader: " + "; ".join(problems))

    async def add_voter(self, node_id: int, directory_id: uuid.UUID | None,
                        listeners: tuple[tuple[str, str, int], ...]) -> None:
        """Adds the controller ``node_id`` (its metadata directory's id, and its (name, host, port) listeners)."""
        cls = codec.request_class(ADD_RAFT_VOTER, 1)
        request = schema.build(
            cls, cluster_id=None, timeout=timedelta(seconds=self.timeout_s), voter_id=node_id,
            voter_directory_id=directory_id or _ZERO_UUID, ack_when_committed=True,
            listeners=tuple(schema.build_nested(cls, "listeners", name=name, host=host, port=port)
                            for name, host, port in listeners),
        )
        await self._at_leader(request, f"add controller {node_id}")

    async def remove_voter(self, node_id: int, directory_id: uuid.UUID | None) -> None:
        cls = codec.request_class(REMOVE_RAFT_VOTER, 0)
        request = schema.build(cls, cluster_id=None, voter_id=node_id,
                               voter_directory_id=directory_id or _ZERO_UUID)
        await self._at_leader(request, f"remove controller {node_id}")

    async def update_voter(self, node_id: int, directory_id: uuid.UUID | None,
                           listeners: tuple[tuple[str, str, int], ...]) -> None:
        """Announces the voter ``node_id``'s (name, host, port) listeners (UpdateRaftVoter, as a voter whose
        CONTROLLER listener moved sends it), in the leader's current epoch."""
        status = await self.status()
        cls = codec.request_class(UPDATE_RAFT_VOTER, 0)
        request = schema.build(
            cls, cluster_id=None, current_leader_epoch=status.leader_epoch, voter_id=node_id,
            voter_directory_id=directory_id or _ZERO_UUID,
            listeners=tuple(schema.build_nested(cls, "listeners", name=name, host=host, port=port)
                            for name, host, port in listeners),
            k_raft_version_feature=schema.build_nested(cls, "k_raft_version_feature", min_supported_version=0,
                                                       max_supported_version=1),
        )
        await self._at_leader(request, f"update controller {node_id}", status)

    async def _at_leader(self, request: Any, what: str, status: QuorumStatus | None = None) -> None:
        status = status or await self.status()
        leader = status.endpoints.get(status.leader_id)
        if leader is None:
            raise QuorumAdminError(f"cannot {what}: the leader, controller {status.leader_id}, has no known listener")
        response = await self._call(leader, request, timeout_s=self.timeout_s + 5)
        error = ErrorCode(int(response.error_code))
        if error is not ErrorCode.none:
            message = getattr(response, "error_message", None)  # UpdateRaftVoter's answer carries none
            raise QuorumAdminError(f"cannot {what}: {error.name.upper()}{f': {message}' if message else ''}")

    async def _call(self, address: tuple[str, int], request: Any, timeout_s: float | None = None) -> Any:
        host, port = address
        connection = ControllerConnection(host, port, client_id=_CLIENT_ID, ssl_context=self.tls, sasl=self.sasl)
        try:
            await connection.connect(timeout=self.timeout_s)
            return await connection.request(request, timeout=timeout_s or self.timeout_s)
        except (OSError, TimeoutError, ConnectionClosedError) as exc:
            raise QuorumAdminError(unanswered(host, port, exc, self.tls)) from None
        finally:
            await connection.close()


def own_quorum_client(config: ServerConfig, known: Mapping[int, tuple[str, int]], timeout_s: float) -> QuorumClient:
    """A controller's client of its own quorum: the voters it knows first (``known``), then its bootstrap servers, over
    its CONTROLLER listener's security (auto-join, UpdateRaftVoter)."""
    servers = parse_bootstrap_servers(config.value(BOOTSTRAP_KEY))
    return QuorumClient(tuple(dict.fromkeys((*known.values(), *servers))), tls=config.controller_client_tls(),
                        sasl=config.controller_client_sasl(), timeout_s=timeout_s)


def _replica(state: Any) -> Replica:
    directory = getattr(state, "replica_directory_id", None)
    return Replica(
        int(state.replica_id), directory if directory is not None and directory.int != 0 else None,
        int(state.log_end_offset), int(state.last_fetch_timestamp), int(state.last_caught_up_timestamp),
    )
