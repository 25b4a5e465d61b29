"""CommitStreamSetObjects over the CONTROLLER listener: a broker commits several stream-set objects in one call,
each continuing where the one before it leaves its streams, or none of them when one does not continue (the
error named as a single commit's). Two voters and a broker's controller client run in this process."""

from __future__ import annotations

from pathlib import Path

import pytest

from metadata.remote.client import RemoteControllerClient
from node.controller_handle import start_quorum_client
from settings.endpoint import Endpoint
from storage.errors import OffsetNotMatchedError
from storage.metadata.api import CommitStreamSetObjectRequest, NodeIdentity, ObjectStreamRange
from tests.quorum_fixtures import active_voter, broker_config, quorum_configs, running_voters


def _commit(node: NodeIdentity, object_id: int, *ranges: tuple[int, int, int]) -> CommitStreamSetObjectRequest:
    return CommitStreamSetObjectRequest(node, object_id, 100, tuple(ObjectStreamRange(*r, 0) for r in ranges))


async def test_a_batch_of_commits_is_applied_whole_or_refused_whole(tmp_path: Path) -> None:
    configs = quorum_configs(tmp_path, 2)
    client: RemoteControllerClient | None = None
    async with running_voters(configs) as started:
        try:
            active = await active_voter(started)
            client = await start_quorum_client(broker_config(tmp_path, configs), catch_up_timeout_s=60)
            node = NodeIdentity(5, await client.register_broker(5, [Endpoint("PLAINTEXT", "127.0.0.1", 9092)], None))
            metadata = client.stream_metadata
            a, b = await metadata.create_stream(node), await metadata.create_stream(node)
            for stream_id in (a, b):
                await metadata.open_stream(node, stream_id, 0)
            first = await metadata.prepare_objects(node, 3, 60_000)

            with pytest.raises(OffsetNotMatchedError, match=f"stream {a}"):
                await metadata.commit_stream_set_objects(
                    [_commit(node, first, (a, 0, 10)), _commit(node, first + 1, (a, 11, 20))])
            assert [s.end_offset for s in await metadata.get_streams([a, b])] == [0, 0]

            batch = [_commit(node, first, (a, 0, 10), (b, 0, 3)), _commit(node, first + 1, (a, 10, 20)),
                     _commit(node, first + 2, (a, 20, 25), (b, 3, 7))]
            await metadata.commit_stream_set_objects(batch)
            await metadata.commit_stream_set_objects(batch)  # a retry: nothing committed twice
            assert [s.end_offset for s in await metadata.get_streams([a, b])] == [25, 7]
            served = active.controller.stream_metadata
            assert [o.object_id for o in await served.get_objects(a, 0, -1, 10)] == [first, first + 1, first + 2]
        finally:
            if client is not None:
                await client.close()
