"""Producer ids are unique across a cluster: every block comes from the controller's metadata log.

In process against one controller (several registered brokers allocating at once, restarts, snapshots, the KV
reservation of clusters from before the record), and through the controller RPC against a 3-voter quorum (several
brokers at once, then the active controller stopped: the new one never answers a block again).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from broker.partition.producer_ids import BLOCK_SIZE, ProducerIdAllocator
from controller.controller import Controller
from controller.quorum import QuorumController
from controller.shell import MetadataShell, build_tree
from metadata.errors import ControllerError
from metadata.producer_ids import encode_legacy_floor, legacy_kv_key
from metadata.rpc import kafka_apis as m
from metadata.rpc.connection import ControllerConnection
from settings.endpoint import Endpoint
from settings.server import ServerConfig
from tests.quorum_fixtures import active_voter
from wire import codec, schema

pytestmark = pytest.mark.timeout(60)

EP = (Endpoint("PLAINTEXT", "127.0.0.1", 9092),)


def _config(tmp_path: Path) -> ServerConfig:
    return ServerConfig.load(None, [f"log.dirs={tmp_path}"])


def _fixed(identity: tuple[int, int]) -> Callable[[], tuple[int, int]]:
    return lambda: identity


async def _allocators(client: Controller, brokers: int) -> list[ProducerIdAllocator]:
    out = []
    for node_id in range(brokers):
        epoch = await client.register_broker(node_id, EP, None)
        out.append(ProducerIdAllocator(client, _fixed((node_id, epoch))))
    return out


async def _take(allocator: ProducerIdAllocator, count: int) -> list[int]:
    ids = []
    for _ in range(count):
        ids.append(await allocator.allocate())
        await asyncio.sleep(0)  # let the other brokers' allocations interleave
    return ids


async def test_brokers_allocating_at_once_never_share_an_id(tmp_path: Path) -> None:
    controller = await Controller.start(_config(tmp_path))
    try:
        client = controller
        allocators = await _allocators(client, 3)
        per_broker = 2 * BLOCK_SIZE + 10  # three blocks each, fetched while the others fetch theirs
        results = await asyncio.gather(*(_take(a, per_broker) for a in allocators))
        every = [pid for ids in results for pid in ids]
        assert len(set(every)) == len(every), "two brokers handed out the same producer id"
        assert controller.image.producer_ids.next_producer_id == 9 * BLOCK_SIZE
        # Any broker knows an id another broker handed out (KIP-360 epoch bumps may land elsewhere).
        assert await allocators[2].was_allocated(results[0][0])
        assert not await allocators[2].was_allocated(9 * BLOCK_SIZE)
        high = max(every)
    finally:
        await controller.close()

    restarted = await Controller.start(_config(tmp_path))
    try:
        allocators = await _allocators(restarted, 1)
        assert await allocators[0].allocate() > high, "a restarted controller handed out a block again"
        await restarted.take_snapshot()
        shell = MetadataShell(build_tree(restarted.snapshot_records(), restarted.image.cluster_id))
        assert f"next producer id        : {10 * BLOCK_SIZE}" in shell.run("cat /producerIds")
    finally:
        await restarted.close()

    from_snapshot = await Controller.start(_config(tmp_path))
    try:
        assert from_snapshot.image.producer_ids.next_producer_id == 10 * BLOCK_SIZE
    finally:
        await from_snapshot.close()


async def test_the_first_block_starts_above_the_kv_reservation_of_an_older_cluster(tmp_path: Path) -> None:
    controller = await Controller.start(_config(tmp_path))
    try:
        await controller.stream_metadata.put_kv(legacy_kv_key(controller.image.cluster_id), encode_legacy_floor(7000))
        [allocator] = await _allocators(controller, 1)
        assert await allocator.allocate() == 7000
        assert await allocator.was_allocated(6999), "an id reserved before the upgrade is no longer known"
    finally:
        await controller.close()


async def test_a_stale_or_unknown_broker_is_refused(tmp_path: Path) -> None:
    controller = await Controller.start(_config(tmp_path))
    try:
        client = controller
        old = await client.register_broker(0, EP, None)
        await client.register_broker(0, EP, None)
        with pytest.raises(ControllerError) as stale:
            await client.allocate_producer_ids(0, old)
        assert stale.value.error is ErrorCode.stale_broker_epoch
        with pytest.raises(ControllerError) as unknown:
            await client.allocate_producer_ids(5, 1)
        assert unknown.value.error is ErrorCode.broker_id_not_registered
        assert controller.image.producer_ids.next_producer_id == 0
    finally:
        await controller.close()


# ------------------------------------------------------------------------------ through the controller RPC


async def _rpc_blocks(port: int, broker_id: int, epoch: int, count: int) -> list[tuple[int, int]]:
    """``count`` AllocateProducerIds requests of one broker, pipelined on one connection."""
    connection = ControllerConnection("127.0.0.1", port, client_id=f"broker-{broker_id}")
    await connection.connect(timeout=5)
    try:
        cls = codec.request_class(m.ALLOCATE_PRODUCER_IDS, 0)
        request = schema.build(cls, broker_id=broker_id, broker_epoch=epoch)
        responses = await asyncio.gather(*(connection.request(request, timeout=10) for _ in range(count)))
    finally:
        await connection.close()
    blocks = []
    for response in responses:
        assert response.error_code == ErrorCode.none, f"broker {broker_id}: {response.error_code}"
        blocks.append((int(response.producer_id_start), int(response.producer_id_len)))
    return blocks


def _assert_disjoint(blocks: list[tuple[int, int]]) -> None:
    ordered = sorted(blocks)
    for (start, length), (next_start, _) in itertools.pairwise(ordered):
        assert start + length <= next_start, f"blocks overlap: {ordered}"


async def test_allocations_through_the_rpc_are_disjoint_across_a_failover(voters: list[QuorumController]) -> None:
    active = await active_voter(voters)
    epochs = {b: await active.register_broker(b, EP, None) for b in (10, 11, 12)}
    port = active.voters[active.node_id][1]
    batches = await asyncio.gather(*(_rpc_blocks(port, b, e, 5) for b, e in epochs.items()))
    before = [block for batch in batches for block in batch]
    assert len(before) == 15
    _assert_disjoint(before)

    await active.stop(resign=False)
    survivors = [v for v in voters if v is not active]
    successor = await active_voter(survivors)
    epochs = {b: await successor.register_broker(b, EP, None) for b in (10, 11)}
    port = successor.voters[successor.node_id][1]
    after = [block for batch in await asyncio.gather(*(_rpc_blocks(port, b, e, 3) for b, e in epochs.items()))
             for block in batch]
    _assert_disjoint(before + after)
    assert min(start for start, _ in after) >= max(start + length for start, length in before)
