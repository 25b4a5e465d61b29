"""Support for the quorum tests and ``bench/quorum.py`` (no tests here): real ``fjord server start`` controller
processes on 127.0.0.1.

`QuorumCluster` writes one properties file per voter (``process.roles=controller``, free ports, directories under
the test's tmp path), starts, kills (-9), stops (SIGTERM) and restarts voters on the same directories.
`ControllerClient` speaks the CONTROLLER listener's RPCs exactly as a broker would: DescribeQuorum, the stream RPCs,
BrokerRegistration / BrokerHeartbeat and the admin APIs (kio entities over `ControllerConnection`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from metadata.log import decode_metadata_records
from metadata.rpc.connection import ControllerConnection
from metadata.rpc.error_codes import RpcError
from metadata.rpc.kafka_apis import (
    BROKER_HEARTBEAT,
    BROKER_REGISTRATION,
    CREATE_TOPICS,
    DESCRIBE_QUORUM,
    METADATA_TOPIC,
)
from metadata.rpc.stream_rpcs import DescribeMetadata, GetKV, MetadataDump, StreamRequest, StreamResponse
from storage.metadata.api import NodeIdentity
from storage.metadata.record_codec import MetadataRecord
from testkit.waiting import eventually_async
from wire import codec, schema
from wire.ports import free_ports

REPO = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 20.0


@dataclass
class Voter:
    node_id: int
    port: int
    data_dir: Path
    config_path: Path
    proc: subprocess.Popen[bytes] | None = None
    logs: list[Path] = field(default_factory=list)

    def log_text(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in self.logs if p.exists())

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class QuorumCluster:
    def __init__(self, root: Path, size: int = 3, overrides: Mapping[str, str] | None = None) -> None:
        ports = free_ports(size)  # a voter's port must be known before it starts: every voter lists them all
        voters = ",".join(f"{i}@127.0.0.1:{port}" for i, port in enumerate(ports))
        self.voters: list[Voter] = []
        for node_id, port in enumerate(ports):
            data_dir = root / f"controller-{node_id}"
            data_dir.mkdir(parents=True, exist_ok=True)
            settings = {
                "process.roles": "controller",
                "node.id": str(node_id),
                "controller.quorum.voters": voters,
                "listeners": f"CONTROLLER://127.0.0.1:{port}",
                "controller.listener.names": "CONTROLLER",
                "log.dirs": str(data_dir / "kraft"),
                "controller.quorum.election.timeout.ms": "300",
                "controller.quorum.fetch.timeout.ms": "600",
                "controller.quorum.election.backoff.max.ms": "300",
                "controller.quorum.request.timeout.ms": "1000",
                "broker.session.timeout.ms": "2000",
                "broker.heartbeat.interval.ms": "300",
            }
            settings.update(overrides or {})
            config_path = data_dir / "controller.properties"
            config_path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
            self.voters.append(Voter(node_id, port, data_dir, config_path))

    # ---- processes ---------------------------------------------------------------------------------------
    def start(self, node_id: int, *, file_bytes_limit: int | None = None) -> None:
        """Starts voter ``node_id``. ``file_bytes_limit``: no file it writes may grow past this many bytes (its
        RLIMIT_FSIZE; a write past it fails with EFBIG, as one on a full disk fails with ENOSPC)."""
        voter = self.voters[node_id]
        assert not voter.running, f"controller {node_id} is already running"
        log_path = voter.data_dir / f"controller-{time.monotonic_ns()}.log"
        voter.logs.append(log_path)
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        command = [sys.executable, "-m", "node.cli", "server", "start", "--config", str(voter.config_path)]
        if file_bytes_limit is not None:
            # Set by the child itself before it becomes the node (a preexec_fn is not safe in a threaded parent).
            limited = (f"import os, resource, sys; resource.setrlimit(resource.RLIMIT_FSIZE, ({file_bytes_limit}, "
                       f"{file_bytes_limit})); os.execv(sys.executable, sys.argv[1:])")
            command = [sys.executable, "-c", limited, *command]
        with open(log_path, "wb") as log:
            voter.proc = subprocess.Popen(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=env)

    def start_all(self) -> None:
        for voter in self.voters:
            self.start(voter.node_id)

    def kill(self, node_id: int) -> None:
        voter = self.voters[node_id]
        if voter.proc is not None and voter.proc.poll() is None:
            voter.proc.send_signal(signal.SIGKILL)
            voter.proc.wait(timeout=10)

    def stop(self, node_id: int) -> int:
        voter = self.voters[node_id]
        assert voter.proc is not None
        if voter.proc.poll() is None:
            voter.proc.send_signal(signal.SIGTERM)
            try:
                voter.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired as exc:
                voter.proc.kill()
                voter.proc.wait(timeout=10)
                raise AssertionError(f"controller {node_id} ignored SIGTERM:\n{voter.log_text()}") from exc
        return int(voter.proc.returncode)

    def close(self) -> None:
        for voter in self.voters:
            if voter.running:
                self.kill(voter.node_id)

    def logs(self) -> str:
        return "\n".join(f"==== controller {v.node_id}\n{v.log_text()[-6000:]}" for v in self.voters)

    # ---- waiting -----------------------------------------------------------------------------------------
    async def client(self, node_id: int, timeout: float = START_TIMEOUT_S) -> ControllerClient:
        """A connected client to voter ``node_id`` (waits for its listener)."""
        voter = self.voters[node_id]

        async def connected() -> ControllerClient:
            if voter.proc is not None and voter.proc.poll() is not None:
                raise AssertionError(f"controller {node_id} exited with {voter.proc.returncode}:\n{voter.log_text()}")
            connection = ControllerConnection("127.0.0.1", voter.port, client_id="quorum-tests")
            try:
                await connection.connect(timeout=1.0)
            except (OSError, TimeoutError):
                await connection.close()
                raise
            return ControllerClient(connection)

        return await eventually_async(
            connected, timeout=timeout, retry_on=(OSError, TimeoutError),
            what=lambda: f"controller {node_id} to listen on {voter.port}:\n{voter.log_text()}",
        )

    async def leader(
        self, among: list[int] | None = None, timeout: float = 30.0, not_epoch: int = -1
    ) -> tuple[int, int]:
        """(leader id, epoch) once exactly one of ``among`` (default all running) answers DescribeQuorum as the
        leader of an epoch other than ``not_epoch`` and the active controller accepts writes."""
        candidates = among if among is not None else [v.node_id for v in self.voters if v.running]

        async def active_leader() -> tuple[int, int] | None:
            for node_id in candidates:
                try:
                    client = await self.client(node_id, timeout=2.0)
                except AssertionError:
                    continue
                try:
                    partition = await client.describe_quorum()
                    if partition.error_code == ErrorCode.none and partition.leader_epoch != not_epoch:
                        dump = await client.dump()
                        if dump.leader_id == node_id and await client.is_active():
                            return node_id, int(partition.leader_epoch)
                except (OSError, TimeoutError):
                    pass
                finally:
                    await client.close()
            return None

        return await eventually_async(
            active_leader, timeout=timeout, what=lambda: f"an active controller among {candidates}\n{self.logs()}"
        )

    async def converged_dumps(self, nodes: list[int], timeout: float = 10.0) -> dict[int, MetadataDump]:
        """Every node's dump once all of them applied the same offset."""
        dumps: dict[int, MetadataDump] = {}

        async def converged() -> dict[int, MetadataDump] | None:
            for node_id in nodes:
                client = await self.client(node_id)
                try:
                    dumps[node_id] = await client.dump()
                finally:
                    await client.close()
            return dumps if len({d.offset for d in dumps.values()}) == 1 else None

        return await eventually_async(
            converged, timeout=timeout, interval=0.1,
            what=lambda: f"voters to converge: offsets {({n: d.offset for n, d in dumps.items()})}",
        )


def metadata_records(dump: MetadataDump) -> list[MetadataRecord]:
    return decode_metadata_records(dump.records, f"dump of controller {dump.node_id}")


class ControllerClient:
    """The CONTROLLER listener's RPCs, as a broker sends them."""

    def __init__(self, connection: ControllerConnection) -> None:
        self.connection = connection

    async def close(self) -> None:
        await self.connection.close()

    async def request(self, api_key: int, version: int, **fields: Any) -> Any:
        entity = schema.build(codec.request_class(api_key, version), **fields)
        return await self.connection.request(entity, timeout=10.0)

    async def stream(self, request: StreamRequest) -> StreamResponse:
        return await self.connection.stream_request(request, timeout=10.0)

    async def dump(self) -> MetadataDump:
        response = await self.stream(DescribeMetadata(NodeIdentity(-1, -1)))
        assert response.error_code == RpcError.NONE, response
        assert isinstance(response.result, MetadataDump)
        return response.result

    async def is_active(self) -> bool:
        response = await self.stream(GetKV(NodeIdentity(-1, -1), "__probe"))
        return response.error_code == RpcError.NONE

    async def describe_quorum(self, version: int = 2) -> Any:
        cls = codec.request_class(DESCRIBE_QUORUM, version)
        topic = schema.build_nested(
            cls, "topics", topic_name=METADATA_TOPIC,
            partitions=(schema.build_nested(schema.field_entity(cls, "topics"), "partitions", partition_index=0),),
        )
        response = await self.connection.request(schema.build(cls, topics=(topic,)), timeout=10.0)
        return response.topics[0].partitions[0]

    async def register_broker(self, broker_id: int, cluster_id: str, port: int = 9092) -> Any:
        cls = codec.request_class(BROKER_REGISTRATION, 2)
        listener = schema.build_nested(cls, "listeners", name="PLAINTEXT", host="127.0.0.1", port=port,
                                      security_protocol=0)
        return await self.request(
            BROKER_REGISTRATION, 2, broker_id=broker_id, cluster_id=cluster_id, incarnation_id=uuid.uuid4(),
            listeners=(listener,), rack=None,
        )

    async def heartbeat(self, broker_id: int, epoch: int, offset: int) -> Any:
        return await self.request(
            BROKER_HEARTBEAT, 1, broker_id=broker_id, broker_epoch=epoch, current_metadata_offset=offset
        )

    async def create_topic(self, name: str, partitions: int, replication: int = 1) -> Any:
        cls = codec.request_class(CREATE_TOPICS, 7)
        topic = schema.build_nested(cls, "topics", name=name, num_partitions=partitions,
                                   replication_factor=replication)
        response = await self.connection.request(schema.build(cls, topics=(topic,), timeout=10_000), timeout=10.0)
        return response.topics[0]
