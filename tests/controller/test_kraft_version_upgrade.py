"""A static quorum made dynamic (Kafka 4.1's ``kafka-features upgrade --feature kraft.version=1``, KIP-853): three
controller voters of ``controller.quorum.voters`` in this process over real TCP, and a broker's metadata replica
following them. The upgrade goes as Kafka's tools send it (UpdateFeatures on the CONTROLLER listener); afterwards the
voters are the log's: each voter announces its directory (which the static list never named), RemoveRaftVoter works,
the broker and every controller report ``kraft.version`` 1, and a controller restarted with the same static list
takes the log's voters instead."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from controller.metadata_replica import MetadataReplica
from controller.quorum import QuorumController
from metadata.rpc.kafka_apis import ADD_RAFT_VOTER, API_VERSIONS, DESCRIBE_QUORUM, REMOVE_RAFT_VOTER, UPDATE_FEATURES
from metadata.rpc.raft_codec import describe_quorum_request
from raft.effects import Role
from settings.kafka_uuid import parse_kafka_uuid
from settings.meta_properties import read_meta_properties
from settings.quorum_voters import KEEP_VOTERS_LISTED
from settings.server import ServerConfig
from settings.storage_format import FormatRequest, format_storage
from storage.config import ConfigError
from testkit.waiting import eventually_async
from tests.controller.test_voter_changes_api import _FAST, _add
from tests.quorum_fixtures import active_voter, ask_controller, broker_config
from wire import codec, schema
from wire.ports import free_ports

pytestmark = pytest.mark.timeout(90)

UPGRADE, SAFE_DOWNGRADE = 1, 2


async def _update(port: int, level: int, upgrade_type: int = UPGRADE, *, validate_only: bool = False) -> Any:
    cls = codec.request_class(UPDATE_FEATURES, 1)
    update = schema.build_nested(cls, "feature_updates", feature="kraft.version", max_version_level=level,
                                 upgrade_type=upgrade_type)
    return await ask_controller(port, UPDATE_FEATURES, 1, timeout=40, feature_updates=(update,),
                                validate_only=validate_only, timeout_ms=30_000)


def _directory_id(quorum: QuorumController) -> uuid.UUID:
    meta = read_meta_properties(quorum.config.metadata_dir)
    assert meta is not None and meta.directory_id is not None
    return parse_kafka_uuid(meta.directory_id)


async def _finalized_kraft_version(port: int) -> int | None:
    answer = await ask_controller(port, API_VERSIONS, 4, client_software_name="test", client_software_version="1")
    return next((f.max_version_level for f in answer.finalized_features if f.name == "kraft.version"), None)


def _port(quorum: QuorumController) -> int:
    return quorum.config.listeners[0].port


async def test_a_static_quorum_upgraded_to_kraft_version_1_takes_its_voters_from_the_log(
    voters: list[QuorumController], tmp_path: Path,
) -> None:
    leader = await active_voter(voters)
    replica = MetadataReplica(broker_config(tmp_path, [q.config for q in voters]), leader.cluster_id)
    await replica.start()
    try:
        assert replica.kraft_version == 0 and all(q.kraft_version == 0 for q in voters)

        checked = await _update(_port(leader), 1, validate_only=True)
        assert checked.error_code is ErrorCode.none and checked.results[0].error_code is ErrorCode.none, checked
        assert all(q.kraft_version == 0 for q in voters)  # only checked: nothing written
        assert not any(q.driver.node.voters_from_log for q in voters)

        upgraded = await _update(_port(leader), 1)
        assert upgraded.results[0].error_code is ErrorCode.none, upgraded
        assert leader.kraft_version == 1 and await _finalized_kraft_version(_port(leader)) == 1

        async def everywhere() -> bool:
            levels = [await _finalized_kraft_version(_port(q)) for q in voters]
            return levels == [1, 1, 1] and replica.kraft_version == 1 and replica.driver.node.voters_from_log

        await eventually_async(everywhere, timeout=20, interval=0.1, what="every node at kraft.version 1")
        assert all(q.driver.node.voter_set.addresses("CONTROLLER") == {q2.node_id: ("127.0.0.1", _port(q2))
                                                                         for q2 in voters} for q in voters)
        # Each voter announces its directory, which the static list never named: the set names every voter's, and
        # DescribeQuorum shows them, as a dynamic quorum's.
        directories = {q.node_id: _directory_id(q) for q in voters}

        async def directories_named() -> bool:
            return all({v.node_id: v.directory_id for v in q.driver.node.voter_set.voters} == directories
                       for q in voters)

        await eventually_async(directories_named, timeout=20, interval=0.1, what="every voter's directory in the set")
        described = await ask_controller(_port(leader), DESCRIBE_QUORUM, 2, topics=describe_quorum_request().topics)
        assert {v.replica_id: v.replica_directory_id
                for v in described.topics[0].partitions[0].current_voters} == directories
        # Asking again finds it done; going back is refused with Kafka's sentence.
        again = await _update(_port(leader), 1)
        assert again.results[0].error_code is ErrorCode.none
        downgrade = await _update(_port(leader), 0, SAFE_DOWNGRADE)
        assert downgrade.error_code is ErrorCode.invalid_update_version  # the whole request fails, as Kafka's
        assert "Can't downgrade the version of this feature." in downgrade.error_message

        # The voters may change now: a follower leaves the quorum.
        follower = next(q for q in voters if q is not leader)
        async def answered_once_committed() -> Any:  # the last announcement may still be committing
            answer = await ask_controller(_port(leader), REMOVE_RAFT_VOTER, 0, cluster_id=None,
                                          voter_id=follower.node_id, voter_directory_id=uuid.uuid4())
            return None if answer.error_code is ErrorCode.request_timed_out else answer

        another = await eventually_async(answered_once_committed, timeout=20, interval=0.1, what="an answer")
        assert another.error_code is ErrorCode.voter_not_found, another  # not that voter's directory
        removed = await ask_controller(_port(leader), REMOVE_RAFT_VOTER, 0, cluster_id=None, voter_id=follower.node_id,
                                       voter_directory_id=directories[follower.node_id])
        assert removed.error_code is ErrorCode.none, removed
        remaining = frozenset(q.node_id for q in voters) - {follower.node_id}
        assert leader.driver.node.voters == remaining

        async def broker_follows() -> bool:
            return replica.driver.node.voters == remaining

        await eventually_async(broker_follows, timeout=20, interval=0.1, what="the broker's replica sees the removal")
        # Restarted with controller.quorum.voters still naming it, the removed controller takes the log's voters.
        await follower.stop(resign=False)
        voters.remove(follower)
        restarted = await QuorumController.start(follower.config)
        voters.append(restarted)
        assert restarted.driver.node.voters == remaining and restarted.driver.node.is_observer
        assert restarted.kraft_version == 1
    finally:
        await replica.stop()


async def test_a_static_quorum_refuses_voter_changes_until_upgraded_and_only_the_active_controller_upgrades(
    voters: list[QuorumController],
) -> None:
    leader = await active_voter(voters)
    follower = next(q for q in voters if q is not leader)
    # A static quorum refuses voter changes until it is upgraded (the message says how).
    answer = await ask_controller(_port(leader), REMOVE_RAFT_VOTER, 0, cluster_id=None, voter_id=follower.node_id,
                                  voter_directory_id=None)
    assert answer.error_code is ErrorCode.unsupported_version
    assert "upgrade kraft.version to 1" in answer.error_message
    elsewhere = await _update(_port(follower), 1)
    assert elsewhere.error_code is ErrorCode.not_controller or (
        elsewhere.results and elsewhere.results[0].error_code is ErrorCode.not_controller), elsewhere
    assert all(q.kraft_version == 0 for q in voters)


async def test_an_upgraded_static_quorum_adds_a_controller_formatted_to_join_it(
    voters: list[QuorumController], tmp_path: Path,
) -> None:
    """The point of the upgrade: a new controller, formatted --no-initial-controllers with the quorum as its bootstrap
    servers, observes it and is added with AddRaftVoter, as in a quorum that was dynamic from the start."""
    leader = await active_voter(voters)
    assert (await _update(_port(leader), 1)).results[0].error_code is ErrorCode.none
    (port,) = free_ports(1)
    overrides = ("node.id=7", "process.roles=controller", f"listeners=CONTROLLER://127.0.0.1:{port}",
                 "controller.listener.names=CONTROLLER", f"log.dirs={tmp_path / 'c7'}",
                 f"controller.quorum.bootstrap.servers=127.0.0.1:{_port(leader)}", *_FAST)
    format_storage(FormatRequest(cluster_id=leader.cluster_id, overrides=overrides, no_initial_controllers=True))
    config = ServerConfig.load(None, list(overrides))
    meta = read_meta_properties(config.metadata_dir)
    assert meta is not None and meta.directory_id is not None
    joining = await QuorumController.start(config)
    voters.append(joining)

    async def add() -> Any:
        answer = await ask_controller(_port(leader), ADD_RAFT_VOTER, 1,
                                      **_add(7, port, parse_kafka_uuid(meta.directory_id)))
        return answer if answer.error_code is ErrorCode.none else None

    await eventually_async(add, timeout=30, interval=0.2, what="controller 7 added once it caught up")
    everyone = frozenset({0, 1, 2, 7})
    assert leader.driver.node.voters == everyone

    async def all_know() -> bool:
        return all(q.driver.node.voters == everyone for q in voters) and joining.kraft_version == 1

    await eventually_async(all_know, timeout=20, interval=0.1, what="every controller names controller 7")


async def test_after_the_upgrade_a_controller_restarts_from_bootstrap_servers_alone(
    voters: list[QuorumController],
) -> None:
    """Kafka's upgrade steps end by replacing controller.quorum.voters with controller.quorum.bootstrap.servers in
    every node's file. Before the upgrade such a start stops with one line that says to keep the list (the log names
    no voters yet); after it, the controller comes back as the voter its log names."""
    leader = await active_voter(voters)
    follower = next(q for q in voters if q is not leader)
    bootstrap = ",".join(f"127.0.0.1:{_port(q)}" for q in voters)
    properties = {k: v for k, v in follower.config.static.items() if k != "controller.quorum.voters"}
    properties["controller.quorum.bootstrap.servers"] = bootstrap
    rolled = ServerConfig.from_properties(properties)
    assert rolled.voters_in_log and rolled.voters == ()

    await follower.stop(resign=False)
    voters.remove(follower)
    with pytest.raises(ConfigError) as refused:
        await QuorumController.start(rolled)
    assert str(refused.value) == KEEP_VOTERS_LISTED
    voters.append(await QuorumController.start(follower.config))  # the static list still starts it
    assert (await _update(_port(leader), 1)).results[0].error_code is ErrorCode.none

    async def upgraded_there() -> bool:
        return voters[-1].driver.node.voters_from_log

    await eventually_async(upgraded_there, timeout=20, interval=0.1, what="the upgrade reaching the follower")
    restarted = voters.pop()
    await restarted.stop(resign=False)
    rolled_back = await QuorumController.start(rolled)
    voters.append(rolled_back)
    everyone = frozenset(q.node_id for q in voters)
    assert rolled_back.driver.node.voters == everyone and not rolled_back.driver.node.is_observer
    assert rolled_back.kraft_version == 1 and rolled_back.config.dynamic_quorum

    async def fetching() -> bool:
        return rolled_back.leader_id == leader.node_id and rolled_back.driver.role is Role.FOLLOWER

    await eventually_async(fetching, timeout=20, interval=0.1, what="the rolled controller following the leader")
    # The leader's log names it a voter: RemoveRaftVoter of it is committed (once the voters' directory announcements
    # after the upgrade, one voter change at a time, are).

    async def removed() -> Any:
        answer = await ask_controller(_port(leader), REMOVE_RAFT_VOTER, 0, cluster_id=None,
                                      voter_id=rolled_back.node_id, voter_directory_id=None)
        return answer if answer.error_code is ErrorCode.none else None

    await eventually_async(removed, timeout=20, interval=0.2, what=f"controller {rolled_back.node_id} removed")
    assert leader.driver.node.voters == everyone - {rolled_back.node_id}
