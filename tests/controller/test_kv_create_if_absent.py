"""PutKVIfAbsent over the CONTROLLER listener: a partition's KV entry (which names its meta stream) is created by
whichever opener gets there first, and every later opener is answered with that first value instead of replacing
it (two brokers opening a new partition at once must share one meta stream). Two voters and a broker's controller
client run in this process."""

from __future__ import annotations

from pathlib import Path

from metadata.remote.client import RemoteControllerClient
from node.controller_handle import start_quorum_client
from settings.endpoint import Endpoint
from tests.quorum_fixtures import active_voter, broker_config, quorum_configs, running_voters


async def test_the_first_creator_of_a_kv_entry_wins_and_later_ones_are_told_its_value(tmp_path: Path) -> None:
    configs = quorum_configs(tmp_path, 2)
    client: RemoteControllerClient | None = None
    async with running_voters(configs) as started:
        try:
            active = await active_voter(started)
            client = await start_quorum_client(broker_config(tmp_path, configs), catch_up_timeout_s=60)
            assert await client.register_broker(5, [Endpoint("PLAINTEXT", "127.0.0.1", 9092)], None) > 0
            kv = client.stream_metadata
            assert await kv.put_kv_if_absent("ns/topic/4", b"first") == b"first"
            assert await kv.put_kv_if_absent("ns/topic/4", b"second") == b"first"
            assert await kv.get_kv("ns/topic/4") == b"first"
            assert await active.controller.stream_metadata.get_kv("ns/topic/4") == b"first"
        finally:
            if client is not None:
                await client.close()
