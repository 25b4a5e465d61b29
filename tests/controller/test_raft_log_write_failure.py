"""A controller whose Raft log can no longer be written (a full disk) stops with one line and exit status 1, as
Kafka's fault handler halts it, instead of running on as a voter that neither votes nor replicates: its supervisor
sees it and starts it again. The others go on without it. Real ``fjord server start`` processes; the failed writes
are the kernel's own (RLIMIT_FSIZE on one voter: a write past it fails with EFBIG, as one on a full disk does with
ENOSPC); every wait is bounded."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from metadata.rpc.error_codes import RpcError
from metadata.rpc.stream_rpcs import PutKV
from storage.metadata.api import NodeIdentity
from storage.metadata.stream_records import KVRecord
from testkit.quorum_cluster import QuorumCluster, metadata_records
from testkit.waiting import eventually, eventually_async

pytestmark = pytest.mark.timeout(120)

#: No file the failing voter writes may grow past this: its Raft log segment reaches it after a few dozen writes.
LIMIT_BYTES = 256 << 10
VALUE = b"x" * (16 << 10)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[QuorumCluster]:
    quorum = QuorumCluster(tmp_path)
    try:
        yield quorum
    finally:
        quorum.close()


async def _put(cluster: QuorumCluster, key: str) -> None:
    """Writes one KV entry through the active controller, as a broker does: again through the next one when the
    write was refused (NOT_CONTROLLER from a leader that failed while writing it)."""

    async def written() -> bool:
        leader, _ = await cluster.leader(among=[v.node_id for v in cluster.voters if v.running])
        client = await cluster.client(leader)
        try:
            put = await client.stream(PutKV(NodeIdentity(-1, -1), key, VALUE))
        finally:
            await client.close()
        assert put.error_code in (RpcError.NONE, RpcError.NOT_CONTROLLER), put
        return put.error_code == RpcError.NONE

    await eventually_async(written, timeout=60, what=f"{key} to be written")


async def test_a_controller_that_cannot_write_its_raft_log_stops_and_the_others_go_on(cluster: QuorumCluster) -> None:
    cluster.start(0)
    cluster.start(1)
    cluster.start(2, file_bytes_limit=LIMIT_BYTES)
    failing = cluster.voters[2]
    assert failing.proc is not None
    written = 0
    for n in range(4 * LIMIT_BYTES // len(VALUE)):
        if not failing.running:
            break
        # Through whichever voter leads (the failing one too, until it fails): a majority commits without it.
        await _put(cluster, f"filler-{n}")
        written += 1
    status = await asyncio.to_thread(_exit_status, failing.proc)
    log = failing.log_text()
    assert status == 1, log
    assert "node 2 stops: its copy of the metadata log failed" in log, log
    assert "writing the Raft log failed" in log and "File too large" in log, log
    assert "Traceback" not in log, log

    await _put(cluster, "after-the-failure")
    dumps = await cluster.converged_dumps([0, 1], timeout=15.0)
    for dump in dumps.values():
        records = metadata_records(dump)
        assert KVRecord("after-the-failure", VALUE) in records
        assert KVRecord(f"filler-{written - 1}", VALUE) in records


def _exit_status(proc: subprocess.Popen[bytes]) -> int:
    return eventually(proc.poll, until=lambda code: code is not None, timeout=60, what="the failing voter to exit")
