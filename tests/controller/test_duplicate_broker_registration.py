"""A second live broker with a running broker's node.id is refused (DUPLICATE_BROKER_REGISTRATION, as Kafka's
controller refuses it) instead of fencing the running one: the controller tells them apart by their log
directories' ``directory.id``. The running broker keeps its registration; the second one's start fails with one line
once the first has kept heartbeating for a session. Two voters and two brokers' controller clients run in this
process, with a short broker session."""

from __future__ import annotations

from pathlib import Path

import pytest

from metadata.remote.client import RemoteControllerClient
from node.controller_handle import start_quorum_client
from settings.endpoint import Endpoint
from settings.meta_properties import read_meta_properties
from storage.config import ConfigError
from tests.quorum_fixtures import active_voter, broker_config, quorum_configs, running_voters

SESSION = {"broker.session.timeout.ms": "1500", "broker.heartbeat.interval.ms": "200"}


async def test_a_second_broker_with_a_live_brokers_node_id_is_refused_and_the_first_keeps_serving(
    tmp_path: Path,
) -> None:
    configs = quorum_configs(tmp_path, 2, extra=lambda _node: SESSION)
    clients: list[RemoteControllerClient] = []
    async with running_voters(configs) as started:
        try:
            active = await active_voter(started)
            first = await start_quorum_client(broker_config(tmp_path / "a", configs, SESSION), catch_up_timeout_s=60)
            clients.append(first)
            epoch = await first.register_broker(5, [Endpoint("PLAINTEXT", "127.0.0.1", 9092, "PLAINTEXT")], None)
            second = await start_quorum_client(broker_config(tmp_path / "b", configs, SESSION), catch_up_timeout_s=60)
            clients.append(second)
            with pytest.raises(ConfigError, match=r"^node\.id 5: another broker with this node\.id") as info:
                await second.register_broker(5, [Endpoint("PLAINTEXT", "127.0.0.1", 9093, "PLAINTEXT")], None)
            assert "\n" not in str(info.value)
            registered = active.controller.image.brokers[5]
            assert (registered.epoch, registered.fenced) == (epoch, False)
            assert registered.listeners[0].port == 9092
            # Each directory has its own id, which told them apart.
            metas = [read_meta_properties(tmp_path / root / "broker") for root in ("a", "b")]
            ids = {meta.directory_id for meta in metas if meta is not None}
            assert len(ids) == 2 and None not in ids
        finally:
            for client in clients:
                await client.close()


async def test_a_broker_restarting_from_its_directory_takes_its_registration_over_at_once(tmp_path: Path) -> None:
    """After a kill -9 the old session is still open; the broker's new process, from the same directory, registers
    without waiting for it (the hand-over a producer must not notice)."""
    configs = quorum_configs(tmp_path, 2, extra=lambda _node: {**SESSION, "broker.session.timeout.ms": "60000"})
    clients: list[RemoteControllerClient] = []
    async with running_voters(configs) as started:
        try:
            active = await active_voter(started)
            config = broker_config(tmp_path / "a", configs, SESSION)
            crashed = await start_quorum_client(config, catch_up_timeout_s=60)
            await crashed.register_broker(5, [Endpoint("PLAINTEXT", "127.0.0.1", 9092, "PLAINTEXT")], None)
            # As a kill -9 leaves it: heartbeats stop, nothing tells the controller, the session stays open.
            assert crashed._heartbeat_task is not None
            crashed._heartbeat_task.cancel()
            await crashed.channel.close()
            await crashed.replica.stop()
            restarted = await start_quorum_client(config, catch_up_timeout_s=60)
            clients.append(restarted)
            epoch = await restarted.register_broker(5, [Endpoint("PLAINTEXT", "127.0.0.1", 9094, "PLAINTEXT")], None)
            assert active.controller.image.brokers[5].epoch == epoch
        finally:
            for client in clients:
                await client.close()


async def test_a_crashed_broker_started_from_new_directories_registers_once_its_old_session_ends(
    tmp_path: Path,
) -> None:
    """A node moved to a new disk after a crash: refused while the old session may still be a live broker, then
    registered, without a word from the operator, once the controller's session timeout has passed."""
    configs = quorum_configs(tmp_path, 2, extra=lambda _node: SESSION)
    clients: list[RemoteControllerClient] = []
    async with running_voters(configs) as started:
        try:
            active = await active_voter(started)
            crashed = await start_quorum_client(broker_config(tmp_path / "a", configs, SESSION), catch_up_timeout_s=60)
            old = await crashed.register_broker(5, [Endpoint("PLAINTEXT", "127.0.0.1", 9092, "PLAINTEXT")], None)
            assert crashed._heartbeat_task is not None
            crashed._heartbeat_task.cancel()  # a kill -9: no more heartbeats, nothing said
            await crashed.channel.close()
            await crashed.replica.stop()
            moved = await start_quorum_client(broker_config(tmp_path / "b", configs, SESSION), catch_up_timeout_s=60)
            clients.append(moved)
            epoch = await moved.register_broker(5, [Endpoint("PLAINTEXT", "127.0.0.1", 9093, "PLAINTEXT")], None)
            registered = active.controller.image.brokers[5]
            assert epoch != old and registered.epoch == epoch and registered.listeners[0].port == 9093
        finally:
            for client in clients:
                await client.close()
