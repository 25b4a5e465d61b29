"""The ``fjord`` source's direct path on the embedded single node: ``make run``'s config/server.properties (ports
and directories overridden) serves its CONTROLLER listener read-only, so the driver finds the uploaded data as in a
cluster (DescribeQuorum on the broker names the listener; GetKV, GetStreams and GetObjects answer there) and Spark
reads it straight from the node's file:// bucket. Directness is proved as in test_direct_reads: the broker's Fetch
counter stays put while Spark reads a range that is all uploaded. The listener refuses writes: the node's own go
through its broker, which authorizes them, and the dump of the whole metadata is not served either.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from metadata.remote.discovery import quorum_voters
from metadata.rpc.connection import ConnectionClosedError, ControllerConnection
from metadata.rpc.error_codes import RpcError
from metadata.rpc.stream_rpcs import CreateStream, DescribeMetadata, GetStreams, StreamResponse
from storage.metadata.api import NodeIdentity
from testkit.node_process import REPO, BrokerProcess, start_broker
from tests.spark_connector.test_direct_reads import (
    UPLOAD_THRESHOLD,
    direct_read,
    fetched_bytes,
    produce_mixed,
    settled_fetched_bytes,
    uploaded_head,
)
from tests.spark_connector.test_fjord_source import consume, new_topic, without_headers


@dataclass(frozen=True)
class Embedded:
    """The node as test_direct_reads' helpers use a cluster: its address, its bucket, its log."""

    process: BrokerProcess
    store: str

    @property
    def bootstrap(self) -> str:
        return self.process.bootstrap

    @property
    def port(self) -> int:
        return self.process.port

    @property
    def broker_logs(self) -> list[Path]:
        return [self.process.log_path]


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Embedded]:
    data = tmp_path_factory.mktemp("embedded-direct")
    overrides = {
        "s3.wal.upload.threshold": str(UPLOAD_THRESHOLD),
        "s3.wal.upload.interval.ms": "3600000",
        "metrics.port": "0",
    }
    process = start_broker(data, overrides, config=REPO / "config" / "server.properties")
    try:
        yield Embedded(process, f"0@file://{data / 'objects'}")
    finally:
        assert process.stop() == 0, process.log_text()


def test_embedded_node_reads_uploaded_range_directly(spark: SparkSession, embedded: Embedded) -> None:
    topic = new_topic(embedded.bootstrap, 2)
    produce_mixed(embedded.bootstrap, topic, 3000, partitions=2, codec="lz4")
    planned = uploaded_head(embedded, topic, 2)
    ends = {t.offsets.partition: t.direct_end for t in planned}
    ending = ", ".join(f'"{p}": {end}' for p, end in ends.items())
    before = settled_fetched_bytes(embedded, topic)
    got = direct_read(spark, embedded, topic, endingOffsets=f'{{"{topic}": {{{ending}}}}}')
    assert fetched_bytes(embedded, topic) == before
    expected = without_headers(consume(embedded.bootstrap, topic, partitions=2, end=ends))
    assert got == expected
    assert len(got) == sum(ends.values())


def test_embedded_controller_listener_is_read_only(embedded: Embedded) -> None:
    async def ask() -> tuple[dict[int, tuple[str, int]], StreamResponse, StreamResponse, StreamResponse]:
        voters = await quorum_voters([("127.0.0.1", embedded.port)], 5.0, "fjord-test")
        host, port = voters[0]
        connection = ControllerConnection(host, port, client_id="embedded-test")
        try:
            await connection.connect(timeout=5.0)
            write = await connection.stream_request(CreateStream(NodeIdentity(0, 1)), timeout=5.0)
            dump = await connection.stream_request(DescribeMetadata(NodeIdentity(-1, -1)), timeout=5.0)
            read = await connection.stream_request(GetStreams(NodeIdentity(-1, -1), (1,)), timeout=5.0)
        finally:
            await connection.close()
        return voters, write, dump, read

    voters, write, dump, read = asyncio.run(ask())
    assert list(voters) == [0]
    assert voters[0][1] not in (0, embedded.port)
    assert write.error_code == RpcError.INVALID_REQUEST
    assert "serves only reads" in (write.error_message or "")
    assert dump.error_code == RpcError.INVALID_REQUEST  # the whole metadata, SCRAM credentials among it
    assert read.error_code == RpcError.NONE

    # `fjord metadata shell --bootstrap` asks for that dump: the refusal names what works here, and it does.
    shell = [sys.executable, "-m", "node.cli", "metadata", "shell", "-c", "ls /brokers"]
    refused = subprocess.run([*shell, "--bootstrap", embedded.bootstrap], capture_output=True, text=True,
                             timeout=60, cwd=REPO, check=False)
    assert refused.returncode == 1, refused
    suggested = refused.stderr.split("instead: fjord metadata shell ", 1)[1].split()
    assert suggested[0] == "--metadata-dir", refused.stderr
    offline = subprocess.run([*shell, *suggested], capture_output=True, text=True, timeout=60, cwd=REPO, check=False)
    assert offline.returncode == 0 and offline.stdout.splitlines()[0].split()[:2] == ["ID", "EPOCH"], offline


def test_with_an_authorizer_only_super_users_read_the_controller_listener(tmp_path: Path) -> None:
    """A node with ACLs does not hand its stream metadata to whoever reaches the CONTROLLER port: a stream read asks
    CLUSTER_ACTION on the cluster (User:ANONYMOUS on PLAINTEXT is neither a super user here nor granted it), so the
    connection closes at the first read."""
    overrides = {
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin",
    }
    process = start_broker(tmp_path / "acl-node", overrides, config=REPO / "config" / "server.properties")
    try:

        port = process.listener_ports["CONTROLLER"]  # the broker's DescribeQuorum is refused to ANONYMOUS too

        async def ask() -> StreamResponse:
            connection = ControllerConnection("127.0.0.1", port, client_id="anonymous-reader")
            try:
                await connection.connect(timeout=5.0)
                return await connection.stream_request(GetStreams(NodeIdentity(-1, -1), (1,)), timeout=5.0)
            finally:
                await connection.close()

        with pytest.raises(ConnectionClosedError):
            asyncio.run(ask())
        assert "User:ANONYMOUS is not a super user" in process.log_text()
    finally:
        assert process.stop() == 0, process.log_text()
