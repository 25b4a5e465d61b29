"""The quorum controller as real processes: election, replication, failover, restarts, DescribeQuorum, and the
controller RPCs a broker uses (registration, heartbeats, stream/object metadata) with NOT_CONTROLLER redirects."""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from metadata.cluster_records import (
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
    WALFailoverRecord,
)
from metadata.errors import NodeFencedError, NotControllerError
from metadata.log import decode_metadata_records
from metadata.rpc.error_codes import RpcError, raise_for_error
from metadata.rpc.kafka_apis import (
    API_VERSIONS,
    BROKER_HEARTBEAT,
    BROKER_REGISTRATION,
    CREATE_PARTITIONS,
    CREATE_TOPICS,
    DELETE_TOPICS,
    DESCRIBE_CLUSTER,
    DESCRIBE_QUORUM,
    FETCH,
    INCREMENTAL_ALTER_CONFIGS,
    UNREGISTER_BROKER,
    VOTE,
)
from metadata.rpc.raft_codec import request_to_kio, response_from_kio
from metadata.rpc.stream_rpcs import (
    STREAM_API_BASE,
    CommitStreamSetObject,
    CreateStream,
    OpenStream,
    PrepareObjects,
    PutKV,
)
from metadata.wal_failover import wal_location_key
from raft.log import EntryKind
from raft.messages import Errors, FetchRequest, FetchResponse
from storage.metadata.api import CommitStreamSetObjectRequest, NodeIdentity, ObjectStreamRange
from storage.metadata.record_codec import MetadataRecord
from storage.metadata.stream_records import KVRecord, StreamSetObjectRecord
from testkit.quorum_cluster import QuorumCluster, metadata_records
from testkit.waiting import eventually_async
from wire import codec, schema

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[QuorumCluster]:
    """Three voters shared by the tests of this module that leave every voter running. Broker sessions are long:
    brokers registered by earlier tests stop heartbeating, and a fence would change the image under comparison."""
    quorum = QuorumCluster(tmp_path_factory.mktemp("quorum"), overrides={"broker.session.timeout.ms": "120000"})
    quorum.start_all()
    try:
        yield quorum
    finally:
        quorum.close()


@pytest.fixture
def own_cluster(tmp_path: Path) -> Iterator[QuorumCluster]:
    quorum = QuorumCluster(tmp_path)
    try:
        yield quorum
    finally:
        quorum.close()


async def _register_with_heartbeats(
    cluster: QuorumCluster, leader: int, broker_id: int
) -> tuple[int, asyncio.Task[None]]:
    """Registers ``broker_id`` at the leader and keeps it alive with heartbeats until the task is cancelled."""
    client = await cluster.client(leader)
    dump = await client.dump()
    response = await client.register_broker(broker_id, await _cluster_id(cluster, leader))
    assert response.error_code == ErrorCode.none, response
    epoch = int(response.broker_epoch)

    async def beat() -> None:
        try:
            while True:
                await client.heartbeat(broker_id, epoch, dump.offset + 1_000_000)
                await asyncio.sleep(0.3)
        finally:
            await client.close()

    return epoch, asyncio.create_task(beat())


async def _cluster_id(cluster: QuorumCluster, node_id: int) -> str:
    meta = (cluster.voters[node_id].data_dir / "kraft" / "meta.properties").read_text()
    return next(line.split("=", 1)[1] for line in meta.splitlines() if line.startswith("cluster.id="))


async def _write_some_metadata(cluster: QuorumCluster, leader: int, broker_id: int, topic: str) -> NodeIdentity:
    """A topic, a stream opened and committed to through a stream-set object, and a KV entry, via the leader."""
    epoch, heartbeats = await _register_with_heartbeats(cluster, leader, broker_id)
    node = NodeIdentity(broker_id, epoch)
    client = await cluster.client(leader)
    try:
        created = await client.create_topic(topic, 3)
        assert created.error_code == ErrorCode.none, created
        stream = await client.stream(CreateStream(node, (("topic", topic),)))
        assert stream.error_code == RpcError.NONE, stream
        stream_id = stream.result
        opened = await client.stream(OpenStream(node, stream_id, 0))
        assert opened.error_code == RpcError.NONE, opened
        prepared = await client.stream(PrepareObjects(node, 1, 60_000))
        object_id = prepared.result
        commit = CommitStreamSetObjectRequest(node, object_id, 1234, (ObjectStreamRange(stream_id, 0, 10, 0),))
        committed = await client.stream(CommitStreamSetObject(node, commit))
        assert committed.error_code == RpcError.NONE, committed
        put = await client.stream(PutKV(node, f"{topic}/0", b"\x00\x01"))
        assert put.error_code == RpcError.NONE, put
    finally:
        heartbeats.cancel()
        await client.close()
    return node


async def test_three_controllers_elect_one_leader_and_describe_the_quorum(cluster: QuorumCluster) -> None:
    async def describe_all() -> tuple[int, int, dict[int, Any]] | None:
        """Every voter's DescribeQuorum answer, or None while the leader has not heard from every voter yet or when an
        election moved on between the answers (a loaded machine may start one), so the answers are about one term."""
        leader, epoch = await cluster.leader()
        answers: dict[int, Any] = {}
        for voter in cluster.voters:
            client = await cluster.client(voter.node_id)
            try:
                answers[voter.node_id] = await client.describe_quorum()
            finally:
                await client.close()
        stable = answers[leader].error_code == ErrorCode.none and answers[leader].leader_epoch == epoch
        # A voter the new leader has not heard from yet shows log end offset -1, as in Kafka: wait for all three.
        stable = stable and all(v.log_end_offset >= 0 for v in answers[leader].current_voters)
        return (leader, epoch, answers) if stable and (await cluster.leader()) == (leader, epoch) else None

    leader, epoch, answers = await eventually_async(describe_all, timeout=60, attempts=20,
                                                    what="the quorum described in one term")
    assert epoch >= 1
    for node_id, partition in answers.items():
        if node_id == leader:
            assert partition.leader_id == leader and partition.leader_epoch == epoch
            assert sorted(v.replica_id for v in partition.current_voters) == [0, 1, 2]
            assert partition.high_watermark >= 1  # the leader's own epoch entry is committed
        else:
            assert partition.error_code == ErrorCode.not_leader_or_follower
            assert partition.leader_id in (leader, -1)


async def test_writes_through_the_leader_reach_every_voter_identically(cluster: QuorumCluster) -> None:
    leader, _ = await cluster.leader()
    node = await _write_some_metadata(cluster, leader, 100, "replicated")
    dumps = await cluster.converged_dumps([0, 1, 2])
    records = {n: metadata_records(d) for n, d in dumps.items()}
    assert records[0] == records[1] == records[2]
    assert any(isinstance(r, TopicRecord) and r.name == "replicated" for r in records[0])
    assert any(isinstance(r, RegisterBrokerRecord) and r.node_id == node.node_id for r in records[0])
    assert any(isinstance(r, StreamSetObjectRecord) for r in records[0])
    assert any(isinstance(r, KVRecord) and r.key == "replicated/0" for r in records[0])


async def test_followers_answer_not_controller_with_the_leader(cluster: QuorumCluster) -> None:
    leader, _ = await cluster.leader()
    follower = next(v.node_id for v in cluster.voters if v.node_id != leader)
    client = await cluster.client(follower)
    try:
        response = await client.stream(CreateStream(NodeIdentity(7, 1)))
        assert response.error_code == RpcError.NOT_CONTROLLER
        assert response.leader_id == leader
        with pytest.raises(NotControllerError) as raised:
            raise_for_error(response.error_code, response.error_message, response.leader_id)
        assert raised.value.leader_id == leader
        created = await client.create_topic("on-a-follower", 1)
        assert created.error_code == ErrorCode.not_controller
        registered = await client.register_broker(7, await _cluster_id(cluster, follower))
        assert registered.error_code == ErrorCode.not_controller
    finally:
        await client.close()


async def test_a_broker_replays_the_committed_metadata_log_as_an_observer(cluster: QuorumCluster) -> None:
    leader, epoch = await cluster.leader()
    await _write_some_metadata(cluster, leader, 102, "observed")
    cluster_id = await _cluster_id(cluster, leader)
    client = await cluster.client(leader)
    try:
        replayed: list[MetadataRecord] = []
        offset, last_epoch, high_watermark = 0, 0, 1
        for _ in range(100):
            if offset >= high_watermark:
                break
            request = FetchRequest(cluster_id, 102, 0, epoch, offset, last_epoch, 0, 1 << 20, 1)
            api_key, entity = request_to_kio(request)
            body = await client.connection.request(entity, timeout=10.0)
            response = response_from_kio(api_key, body, 1)
            assert isinstance(response, FetchResponse)
            assert response.error_code == Errors.NONE, response
            assert response.diverging_epoch is None and response.snapshot_id is None, response
            high_watermark = response.high_watermark
            for entry in response.records:
                if entry.offset >= high_watermark:
                    break
                if entry.kind is EntryKind.DATA:
                    replayed.extend(decode_metadata_records(entry.data, f"entry {entry.offset}"))
                offset, last_epoch = entry.offset + 1, entry.epoch
        assert offset == high_watermark
        assert any(isinstance(r, TopicRecord) and r.name == "observed" for r in replayed)
        assert any(isinstance(r, KVRecord) and r.key == "observed/0" for r in replayed)
        described = await client.describe_quorum()
        assert 102 in [o.replica_id for o in described.observers]
    finally:
        await client.close()


async def test_describe_cluster_and_api_versions_on_the_controller_listener(cluster: QuorumCluster) -> None:
    leader, _ = await cluster.leader()
    follower = next(v.node_id for v in cluster.voters if v.node_id != leader)
    client = await cluster.client(follower)
    try:
        described = await client.request(DESCRIBE_CLUSTER, 1, endpoint_type=2)
        assert described.error_code == ErrorCode.none
        assert described.controller_id == leader
        assert sorted((b.broker_id, b.port) for b in described.brokers) == [(v.node_id, v.port) for v in cluster.voters]
        # The brokers (v0's endpoint type) are not what a controller serves, as Kafka's controller answers.
        brokers = await client.request(DESCRIBE_CLUSTER, 1, endpoint_type=1)
        assert (brokers.error_code, brokers.brokers) == (ErrorCode.mismatched_endpoint_type, ())
        assert brokers.error_message and "CONTROLLER" in brokers.error_message
        unknown = await client.request(DESCRIBE_CLUSTER, 1, endpoint_type=7)
        assert unknown.error_code == ErrorCode.unsupported_endpoint_type
        versions = await client.request(API_VERSIONS, 3, client_software_name="tests", client_software_version="1")
        served = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
        for key in (VOTE, FETCH, DESCRIBE_QUORUM, BROKER_REGISTRATION, BROKER_HEARTBEAT, CREATE_TOPICS):
            assert key in served
        assert STREAM_API_BASE in served
    finally:
        await client.close()


async def test_forwarded_admin_requests_change_the_replicated_image(cluster: QuorumCluster) -> None:
    leader, _ = await cluster.leader()
    _, heartbeats = await _register_with_heartbeats(cluster, leader, 103)
    client = await cluster.client(leader)
    try:
        assert (await client.create_topic("admin", 1)).error_code == ErrorCode.none
        grown = await client.request(
            CREATE_PARTITIONS, 3, topics=(schema.build_nested(
                codec.request_class(CREATE_PARTITIONS, 3), "topics", name="admin", count=3, assignments=None
            ),), timeout=10_000, validate_only=False,
        )
        assert grown.results[0].error_code == ErrorCode.none, grown
        config_cls = codec.request_class(INCREMENTAL_ALTER_CONFIGS, 1)
        resource_cls = schema.field_entity(config_cls, "resources")
        altered = await client.request(
            INCREMENTAL_ALTER_CONFIGS, 1, validate_only=False, resources=(schema.build(
                resource_cls, resource_type=2, resource_name="admin",
                configs=(schema.build_nested(resource_cls, "configs", name="retention.ms", config_operation=0,
                                            value="60000"),),
            ),),
        )
        assert altered.responses[0].error_code == ErrorCode.none, altered
        dumps = await cluster.converged_dumps([0, 1, 2])
        for dump in dumps.values():
            state = metadata_records(dump)
            topic = next(r for r in state if isinstance(r, TopicRecord) and r.name == "admin")
            assert sum(isinstance(r, PartitionRecord) and r.topic_id == topic.topic_id for r in state) == 3
            assert ConfigRecord(2, "admin", "retention.ms", "60000") in state
        deleted = await client.request(
            DELETE_TOPICS, 6, timeout=10_000, topics=(schema.build_nested(
                codec.request_class(DELETE_TOPICS, 6), "topics", name="admin", topic_id=None
            ),),
        )
        assert deleted.responses[0].error_code == ErrorCode.none, deleted
        dumps = await cluster.converged_dumps([0, 1, 2])
        assert all(not any(isinstance(r, TopicRecord) and r.name == "admin" for r in metadata_records(d))
                   for d in dumps.values())
    finally:
        heartbeats.cancel()
        await client.close()


async def test_a_broker_asking_to_be_fenced_hands_its_partitions_and_its_s3_wal_over(
    own_cluster: QuorumCluster,
) -> None:
    """BrokerHeartbeat ``wantFence`` without ``wantShutDown`` (a broker whose S3 WAL cannot write hands over): with no
    other broker to lead its partitions it stays unfenced, and so it does while no live broker shares its WAL bucket;
    once one does, it is fenced, its partitions get that leader in the same write, and its WAL goes to that broker
    to replay, after which that incarnation's heartbeats are refused (it must register again)."""
    own_cluster.start_all()
    leader, _ = await own_cluster.leader()
    client = await own_cluster.client(leader)
    heartbeats: asyncio.Task[None] | None = None
    try:
        epoch = int((await client.register_broker(130, await _cluster_id(own_cluster, leader))).broker_epoch)
        cls = codec.request_class(CREATE_TOPICS, 7)
        assignments = tuple(
            schema.build_nested(schema.field_entity(cls, "topics"), "assignments", partition_index=p, broker_ids=(130,))
            for p in range(2)
        )
        topic = schema.build_nested(cls, "topics", name="handed-over", num_partitions=-1, replication_factor=-1,
                                   assignments=assignments)
        created = await client.connection.request(schema.build(cls, topics=(topic,), timeout=10_000), timeout=10.0)
        assert created.topics[0].error_code == ErrorCode.none, created

        async def beat(**wants: bool) -> Any:
            return await client.request(BROKER_HEARTBEAT, 1, broker_id=130, broker_epoch=epoch,
                                        current_metadata_offset=1 << 40, **wants)

        def leaders(state: list[MetadataRecord]) -> list[int]:
            topic_id = next(r.topic_id for r in state if isinstance(r, TopicRecord) and r.name == "handed-over")
            return [r.leader for r in state if isinstance(r, PartitionRecord) and r.topic_id == topic_id]

        alone = await beat(want_fence=True)
        assert alone.error_code == ErrorCode.none and not alone.is_fenced, alone
        assert leaders(metadata_records(await client.dump())) == [130, 130]

        target_epoch, heartbeats = await _register_with_heartbeats(own_cluster, leader, 131)

        async def announce(node_id: int, location: bytes) -> None:
            put = await client.stream(PutKV(NodeIdentity(-1, -1), wal_location_key(node_id), location))
            assert put.error_code == RpcError.NONE, put

        # 131 could lead its partitions but its WAL lives in another bucket: nobody could replay 130's WAL, so the
        # controller refuses (the partitions would move without their acknowledged tail) and 130 keeps them.
        await announce(130, b"s3://wal at http://s3")
        await announce(131, b"s3://other-wal at http://s3")
        no_replayer = await beat(want_fence=True)
        assert no_replayer.error_code == ErrorCode.none and not no_replayer.is_fenced, no_replayer
        state = metadata_records(await client.dump())
        assert leaders(state) == [130, 130]
        assert not any(isinstance(r, WALFailoverRecord) and r.node_id == 130 for r in state), state

        await announce(131, b"s3://wal at http://s3")
        answer = await beat(want_fence=True)
        assert answer.error_code == ErrorCode.none and answer.is_fenced and not answer.should_shut_down, answer
        state = metadata_records(await client.dump())
        assert any(isinstance(r, RegisterBrokerRecord) and r.node_id == 130 and r.fenced for r in state), state
        assert leaders(state) == [131, 131]
        failovers = [r for r in state if isinstance(r, WALFailoverRecord) and r.node_id == 130]
        assert [(r.node_epoch, r.target_id, r.target_epoch) for r in failovers] == [(epoch, 131, target_epoch)]
        refused = await beat()  # its WAL is taken over: this incarnation can never be unfenced
        assert refused.error_code != ErrorCode.none, refused
    finally:
        if heartbeats is not None:
            heartbeats.cancel()
        await client.close()


async def test_controlled_shutdown_moves_a_brokers_partitions_before_it_may_stop(cluster: QuorumCluster) -> None:
    """BrokerHeartbeat ``wantShutDown`` (KIP-631): the partitions move first, ``shouldShutDown`` once they have;
    ``wantFence`` fences; UnregisterBroker then removes the stopped broker (and refuses a live or unknown one)."""
    leader, _ = await cluster.leader()
    _, heartbeats = await _register_with_heartbeats(cluster, leader, 110)
    client = await cluster.client(leader)
    try:
        epoch = int((await client.register_broker(111, await _cluster_id(cluster, leader))).broker_epoch)
        cls = codec.request_class(CREATE_TOPICS, 7)
        assignments = tuple(
            schema.build_nested(schema.field_entity(cls, "topics"), "assignments", partition_index=p, broker_ids=(111,))
            for p in range(2)
        )
        topic = schema.build_nested(cls, "topics", name="leaving", num_partitions=-1, replication_factor=-1,
                                   assignments=assignments)
        created = await client.connection.request(schema.build(cls, topics=(topic,), timeout=10_000), timeout=10.0)
        assert created.topics[0].error_code == ErrorCode.none, created

        async def beat(**wants: bool) -> Any:
            answer = await client.request(BROKER_HEARTBEAT, 1, broker_id=111, broker_epoch=epoch,
                                          current_metadata_offset=1 << 40, **wants)
            assert answer.error_code == ErrorCode.none, answer
            return answer

        async def may_shut_down() -> bool:
            answer = await beat(want_shut_down=True)
            assert not answer.is_fenced
            return bool(answer.should_shut_down)

        assert not await may_shut_down()  # it leads both partitions: they start moving
        await eventually_async(may_shut_down, timeout=10, interval=0.1, what="broker 111 to lead nothing")
        state = metadata_records(await client.dump())
        assert BrokerRegistrationChangeRecord(111, epoch, True) in state
        topic_id = next(r.topic_id for r in state if isinstance(r, TopicRecord) and r.name == "leaving")
        moved = [r.leader for r in state if isinstance(r, PartitionRecord) and r.topic_id == topic_id]
        assert len(moved) == 2 and all(leader not in (111, -1) for leader in moved), moved
        fenced = await beat(want_fence=True, want_shut_down=True)
        assert fenced.is_fenced and fenced.should_shut_down

        async def unregister(broker_id: int) -> ErrorCode:
            answer = await client.request(UNREGISTER_BROKER, 0, broker_id=broker_id)
            return ErrorCode(answer.error_code)

        assert await unregister(110) == ErrorCode.invalid_request  # alive
        assert await unregister(111) == ErrorCode.none
        assert await unregister(111) == ErrorCode.broker_id_not_registered
        state = metadata_records(await client.dump())
        assert not any(isinstance(r, RegisterBrokerRecord) and r.node_id == 111 for r in state)
    finally:
        heartbeats.cancel()
        await client.close()


async def test_every_describe_quorum_version_reports_the_leader(cluster: QuorumCluster) -> None:
    leader, epoch = await cluster.leader()
    client = await cluster.client(leader)
    try:
        for version in (0, 1, 2):
            partition = await client.describe_quorum(version)
            assert partition.error_code == ErrorCode.none
            assert (partition.leader_id, partition.leader_epoch) == (leader, epoch)
            assert sorted(v.replica_id for v in partition.current_voters) == [0, 1, 2]
    finally:
        await client.close()


async def test_describe_quorum_of_anything_but_the_metadata_partition_is_unknown(cluster: QuorumCluster) -> None:
    """Kafka's leader answers UNKNOWN_TOPIC_OR_PARTITION on each partition named unless the request names exactly
    __cluster_metadata-0 (RaftUtil.hasValidTopicPartition)."""
    leader, _ = await cluster.leader()
    client = await cluster.client(leader)
    cls = codec.request_class(DESCRIBE_QUORUM, 2)
    topic_cls = schema.field_entity(cls, "topics")
    try:
        for name, partitions in (("other", (0,)), ("__cluster_metadata", (1,)), ("__cluster_metadata", (0, 1))):
            topic = schema.build(topic_cls, topic_name=name, partitions=tuple(
                schema.build_nested(topic_cls, "partitions", partition_index=i) for i in partitions))
            response = await client.request(DESCRIBE_QUORUM, 2, topics=(topic,))
            [answered] = response.topics
            assert answered.topic_name == name
            assert [(p.partition_index, p.error_code) for p in answered.partitions] == [
                (i, ErrorCode.unknown_topic_or_partition) for i in partitions]
            assert answered.partitions[0].error_message == "This server does not host this topic-partition."
    finally:
        await client.close()


async def test_registration_from_another_cluster_is_refused(cluster: QuorumCluster) -> None:
    leader, _ = await cluster.leader()
    client = await cluster.client(leader)
    try:
        response = await client.register_broker(150, "AAAAAAAAAAAAAAAAAAAAAA")
        assert response.error_code == ErrorCode.inconsistent_cluster_id
        state = metadata_records(await client.dump())
        assert not any(isinstance(r, RegisterBrokerRecord) and r.node_id == 150 for r in state)
    finally:
        await client.close()


async def test_restarting_every_controller_gives_the_same_image(cluster: QuorumCluster) -> None:
    leader, _ = await cluster.leader()
    await _write_some_metadata(cluster, leader, 101, "survives-restart")
    before = await cluster.converged_dumps([0, 1, 2])
    for voter in cluster.voters:
        assert cluster.stop(voter.node_id) == 0, voter.log_text()
    cluster.start_all()
    await cluster.leader()
    after = await cluster.converged_dumps([0, 1, 2])
    expected = metadata_records(before[0])
    for node_id in (0, 1, 2):
        # A restart adds only the new leader's epoch entry (not a metadata record): the state is the same.
        assert metadata_records(after[node_id]) == expected


async def test_killing_the_active_controller_elects_another_within_3s_and_loses_nothing(
    own_cluster: QuorumCluster,
) -> None:
    own_cluster.start_all()
    old_leader, old_epoch = await own_cluster.leader()
    await _write_some_metadata(own_cluster, old_leader, 200, "before-the-kill")
    committed = metadata_records((await own_cluster.converged_dumps([0, 1, 2]))[old_leader])

    killed_at = time.monotonic()
    own_cluster.kill(old_leader)
    survivors = [v.node_id for v in own_cluster.voters if v.node_id != old_leader]
    new_leader, new_epoch = await own_cluster.leader(among=survivors, not_epoch=old_epoch, timeout=10.0)
    elapsed = time.monotonic() - killed_at
    assert elapsed < 3.0, f"a new active controller took {elapsed:.2f}s"
    assert new_epoch > old_epoch

    client = await own_cluster.client(new_leader)
    try:
        state = metadata_records(await client.dump())
        for record in committed:
            assert record in state, f"{record} was lost by the failover"
        written = await client.stream(PutKV(NodeIdentity(-1, -1), "after-the-kill", b"new leader"))
        assert written.error_code == RpcError.NONE, written
    finally:
        await client.close()

    own_cluster.start(old_leader)
    dumps = await own_cluster.converged_dumps([0, 1, 2], timeout=15.0)
    assert metadata_records(dumps[old_leader]) == metadata_records(dumps[new_leader])
    assert KVRecord("after-the-kill", b"new leader") in metadata_records(dumps[old_leader])


async def test_broker_sessions_fence_a_silent_broker_and_refuse_its_writes(own_cluster: QuorumCluster) -> None:
    own_cluster.start_all()
    leader, _ = await own_cluster.leader()
    silent_epoch, silent_beats = await _register_with_heartbeats(own_cluster, leader, 300)
    live_epoch, live_beats = await _register_with_heartbeats(own_cluster, leader, 301)
    client = await own_cluster.client(leader)
    try:
        created = await client.create_topic("sessions", 4)
        assert created.error_code == ErrorCode.none, created
        silent = NodeIdentity(300, silent_epoch)
        stream = await client.stream(CreateStream(silent))
        assert stream.error_code == RpcError.NONE

        silent_beats.cancel()  # broker 300 goes quiet (as if paused with SIGSTOP)

        async def state_once_fenced() -> list[MetadataRecord] | None:
            state = metadata_records(await client.dump())
            registration = next(r for r in state if isinstance(r, RegisterBrokerRecord) and r.node_id == 300)
            return state if registration.fenced else None

        state = await eventually_async(state_once_fenced, timeout=10, interval=0.1, what="broker 300 to be fenced")
        partitions = [r for r in state if isinstance(r, PartitionRecord)]
        assert len(partitions) == 4 and all(p.leader == 301 for p in partitions)

        refused = await client.stream(OpenStream(silent, stream.result, 0))
        assert refused.error_code == RpcError.NODE_FENCED
        with pytest.raises(NodeFencedError):
            raise_for_error(refused.error_code, refused.error_message, refused.leader_id)

        stale = await client.heartbeat(300, silent_epoch - 1, 0)
        assert stale.error_code == ErrorCode.stale_broker_epoch
        # Heartbeating again with its current epoch and a caught-up offset unfences it.
        offset = (await client.dump()).offset

        async def unfenced_by_a_heartbeat() -> bool:
            beat = await client.heartbeat(300, silent_epoch, offset + 1)
            assert beat.error_code == ErrorCode.none
            return not beat.is_fenced

        await eventually_async(unfenced_by_a_heartbeat, timeout=5, interval=0.1,
                               what="broker 300 to be unfenced while heartbeating")
        reopened = await client.stream(OpenStream(silent, stream.result, 0))
        assert reopened.error_code == RpcError.NONE, reopened
        assert live_epoch > 0
    finally:
        live_beats.cancel()
        await client.close()


async def test_snapshots_bound_the_log_and_a_wiped_voter_catches_up(own_cluster: QuorumCluster) -> None:
    for voter in own_cluster.voters:
        text = voter.config_path.read_text()
        voter.config_path.write_text(text + "metadata.log.max.record.bytes.between.snapshots=2000\n")
    own_cluster.start_all()
    leader, _ = await own_cluster.leader()
    client = await own_cluster.client(leader)
    try:
        for i in range(60):
            put = await client.stream(PutKV(NodeIdentity(-1, -1), f"key-{i}", bytes(40)))
            assert put.error_code == RpcError.NONE
    finally:
        await client.close()
    # The leader writes its snapshot in the background once the log passes the threshold: wait for it, bounded.
    kraft_dir = own_cluster.voters[leader].data_dir / "kraft"
    await eventually_async(lambda: list(kraft_dir.rglob("*.checkpoint")), timeout=15, interval=0.1,
                           what="the leader to take a snapshot")

    wiped = next(v.node_id for v in own_cluster.voters if v.node_id != leader)
    assert own_cluster.stop(wiped) == 0
    shutil.rmtree(own_cluster.voters[wiped].data_dir / "kraft")
    own_cluster.start(wiped)
    dumps = await own_cluster.converged_dumps([0, 1, 2], timeout=15.0)
    assert metadata_records(dumps[wiped]) == metadata_records(dumps[leader])
    assert sum(isinstance(r, KVRecord) for r in metadata_records(dumps[wiped])) == 60
