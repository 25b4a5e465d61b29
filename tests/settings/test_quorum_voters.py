"""Kafka 4's ``controller.quorum.bootstrap.servers`` at a node's start: the standalone form gives the quorum its one
voter, a broker-only node leaves its voters to be found as it starts, and every other dynamic form stops the start
with one line naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from metadata.remote.discovery import QuorumDiscoveryError, with_bootstrap_voters
from settings.quorum_voters import KEEP_VOTERS_LISTED, QuorumVoter
from settings.server import ServerConfig
from storage.config import ConfigError
from wire.ports import free_ports


def load(*overrides: str) -> ServerConfig:
    return ServerConfig.load(None, list(overrides))


COMBINED_KAFKA4 = (
    "node.id=1",
    "process.roles=broker,controller",
    "listeners=PLAINTEXT://:9092,CONTROLLER://:9093",
    "controller.listener.names=CONTROLLER",
)


@pytest.mark.parametrize("server", ["localhost:9093", "127.0.0.1:9093", "[::1]:9093"])
def test_a_controller_naming_only_itself_is_the_quorums_one_voter(server: str) -> None:
    """Kafka 4's shipped server.properties, formatted with ``kafka-storage format --standalone`` on Kafka."""
    config = load(*COMBINED_KAFKA4, f"controller.quorum.bootstrap.servers={server}")
    host = server.rpartition(":")[0].strip("[]")
    assert config.voters == (QuorumVoter(1, host, 9093),)


def test_the_advertised_controller_address_names_the_controller_too() -> None:
    """A container publishes its controller listener under another name and port than it binds."""
    config = load(
        "node.id=3", "process.roles=controller", "listeners=CONTROLLER://0.0.0.0:9093",
        "advertised.listeners=CONTROLLER://ctrl.example:19093", "controller.listener.names=CONTROLLER",
        "controller.quorum.bootstrap.servers=ctrl.example:19093",
    )
    assert config.voters == (QuorumVoter(3, "ctrl.example", 19093),)


@pytest.mark.parametrize(
    "servers",
    [
        "localhost:9093,localhost:9094",  # several controllers: Kafka formats them with --initial-controllers
        "localhost:9193",  # another controller on this machine: joining a quorum, not founding one
        "ctrl-2.example:9093",  # another host
    ],
)
def test_any_other_dynamic_form_stops_the_start_naming_the_key(servers: str) -> None:
    with pytest.raises(ConfigError) as info:
        load(*COMBINED_KAFKA4, f"controller.quorum.bootstrap.servers={servers}")
    message = str(info.value)
    assert message.startswith("controller.quorum.bootstrap.servers: ") and "\n" not in message
    assert "fjord storage format --initial-controllers" in message and "controller.quorum.voters" in message


def test_a_static_quorums_controller_named_by_bootstrap_servers_takes_its_voters_from_its_log(tmp_path: Path) -> None:
    """Its directory was formatted at its first start, with no voters written: after kafka-features upgrade
    --feature kraft.version=1 its log names them, and Kafka's operators then replace the list by bootstrap servers.
    No voter is configured (its controller checks its log as it opens it), and formatting again is not asked for."""
    (tmp_path / "meta.properties").write_text("version=1\nnode.id=1\ncluster.id=qNH6MuZ1VuesZA3lEFlaKA\n")
    config = load(*COMBINED_KAFKA4, f"log.dirs={tmp_path}",
                  "controller.quorum.bootstrap.servers=localhost:9093,localhost:9094")
    assert config.voters == () and config.voters_in_log and not config.joins_quorum and config.dynamic_quorum
    assert "keep the voters in controller.quorum.voters" in KEEP_VOTERS_LISTED
    assert "kraft.version=1" in KEEP_VOTERS_LISTED


@pytest.mark.parametrize("server", ["localhost", "localhost:99999", ":9093", "localhost:\uff19\uff10\uff19\uff13"])
def test_a_bad_bootstrap_server_is_named(server: str) -> None:
    with pytest.raises(ConfigError) as info:
        load(*COMBINED_KAFKA4, f"controller.quorum.bootstrap.servers={server}")
    assert str(info.value) == (
        f"controller.quorum.bootstrap.servers: {server!r} is not host:port (a port from 0 to 65535)"
    )


def test_a_voter_port_past_65535_stops_the_start() -> None:
    """Taken before, a voter other controllers could never connect to (their connects failed in the socket layer)."""
    with pytest.raises(ConfigError) as info:
        load(*COMBINED_KAFKA4, "controller.quorum.voters=1@localhost:9093,2@localhost:70000")
    assert str(info.value) == (
        "controller.quorum.voters: '2@localhost:70000' is not id@host:port (a port from 0 to 65535)"
    )


def test_listed_voters_decide_when_both_keys_are_given() -> None:
    """As in Kafka: a static quorum's bootstrap servers only help find the leader."""
    config = load(
        *COMBINED_KAFKA4, "controller.quorum.voters=1@localhost:9093,2@localhost:9193",
        "controller.quorum.bootstrap.servers=localhost:9093,localhost:9193",
    )
    assert [v.node_id for v in config.voters] == [1, 2]


def test_a_broker_only_node_finds_its_voters_as_it_starts() -> None:
    """Kafka 4's shipped broker.properties: the voters are asked of the bootstrap servers when the node starts
    (``metadata.remote.discovery``), not guessed at load."""
    config = load(
        "node.id=2", "process.roles=broker", "listeners=PLAINTEXT://localhost:9092",
        "controller.listener.names=CONTROLLER", "controller.quorum.bootstrap.servers=localhost:9093",
    )
    assert config.voters == ()


def test_neither_key_keeps_the_embedded_single_node() -> None:
    assert [(v.node_id, v.host, v.port) for v in load().voters] == [(0, "127.0.0.1", 9093)]


async def test_a_broker_whose_bootstrap_servers_never_answer_gets_one_error_naming_them() -> None:
    (port,) = free_ports(1)  # nothing listens there
    config = load(
        "node.id=2", "process.roles=broker", "listeners=PLAINTEXT://127.0.0.1:0",
        "controller.listener.names=CONTROLLER", f"controller.quorum.bootstrap.servers=127.0.0.1:{port}",
        "controller.quorum.request.timeout.ms=100",
    )
    with pytest.raises(QuorumDiscoveryError) as info:
        await with_bootstrap_voters(config, timeout_s=1.5)
    message = str(info.value)
    assert message.startswith("controller.quorum.bootstrap.servers: broker 2 found no controller quorum in 2 s")
    assert f"127.0.0.1:{port}" in message and "ConnectionRefusedError" in message and "\n" not in message


async def test_a_broker_listing_its_voters_asks_nobody() -> None:
    config = load("node.id=2", "process.roles=broker", "listeners=PLAINTEXT://127.0.0.1:0",
                  "controller.listener.names=CONTROLLER", "controller.quorum.voters=1@127.0.0.1:1")
    assert await with_bootstrap_voters(config, timeout_s=0.1) is config
