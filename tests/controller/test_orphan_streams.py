"""Streams of deleted topics that their broker could not delete are deleted by the active controller
(``controller.orphan_streams``): by the topic id their tags carry, or by name for streams tagged before; only closed
ones, and only once two looks in a row found them; the partition KV entries of deleted topics too. Then on a real
in-process node whose broker lost the controller half way through deleting a topic: the streams and the partition
entries it left are gone within a few looks, and a live topic keeps all of its streams."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer

from controller.orphan_streams import OrphanSweep, find_orphans
from metadata.image import MetadataImage, TopicImage
from metadata.kv_keys import partition_kv_key
from metadata.stream_tags import partition_stream_tags, stream_topic
from node.process import Node
from settings.server import ServerConfig
from storage.errors import StorageError
from storage.metadata.api import NodeIdentity
from storage.metadata.state_machine import StreamMetadataStateMachine
from storage.namespace import namespace_for
from testkit.node_process import default_overrides
from testkit.waiting import eventually_async
from tests.topics import create_topic, delete_topic

CLUSTER = "orphan-test-cluster"
NODE = NodeIdentity(1, 1)


def _image(*topics: tuple[str, uuid.UUID]) -> MetadataImage:
    images = [TopicImage(name=name, topic_id=topic_id) for name, topic_id in topics]
    return MetadataImage(cluster_id=CLUSTER, topics_by_name={t.name: t for t in images},
                         topics_by_id={t.topic_id: t for t in images})


async def test_only_closed_streams_and_entries_of_missing_topics_found_twice_are_deleted() -> None:
    live, gone = uuid.uuid4(), uuid.uuid4()
    image = _image(("live", live))
    streams = StreamMetadataStateMachine()
    kept = [
        await streams.create_stream(NODE, partition_stream_tags("live", live, 0, "log")),
        await streams.create_stream(NODE, (("topic", "live"), ("partition", "0"), ("type", "log"))),  # by name
        await streams.create_stream(NODE, (("type", "log"),)),  # no partition's
    ]
    opened = await streams.create_stream(NODE, partition_stream_tags("gone", gone, 1, "log"))
    await streams.open_stream(NODE, opened, 0)
    orphans = [
        await streams.create_stream(NODE, partition_stream_tags("gone", gone, 0, "meta")),
        await streams.create_stream(NODE, (("topic", "old"), ("partition", "0"), ("type", "log"))),  # by name
        # A topic created again under the old name does not keep the old topic's streams alive.
        await streams.create_stream(NODE, partition_stream_tags("live", uuid.uuid4(), 0, "log")),
    ]
    namespace = namespace_for(CLUSTER)
    for key in (partition_kv_key(namespace, live, 0), partition_kv_key(namespace, gone, 0), f"{namespace}/wal/1",
                "elsewhere"):
        await streams.put_kv(key, b"\x00" * 8)

    found = find_orphans(image, streams.closed_streams(), streams.kv_keys(""))
    assert found.streams == set(orphans)
    assert found.kv_keys == {partition_kv_key(namespace, gone, 0)}

    config = ServerConfig.load(None, ["deleted.topic.streams.check.interval.ms=3600000"])
    sweep = OrphanSweep(config, lambda: streams, lambda: image)
    assert not await sweep.look()  # the first look only notes them: a broker may be deleting them this moment
    deleted = await sweep.look()
    assert deleted.streams == set(orphans)
    assert deleted.kv_keys == {partition_kv_key(namespace, gone, 0)}
    left = {s.stream_id for s in await streams.get_streams([*kept, opened, *orphans])}
    assert left == {*kept, opened}
    assert await streams.get_kv(partition_kv_key(namespace, live, 0)) is not None
    assert not await sweep.look()


def test_tags_name_the_topic_by_id_and_name() -> None:
    topic_id = uuid.uuid4()
    found = stream_topic(partition_stream_tags("orders", topic_id, 3, "time"))
    assert found is not None and (found.name, found.topic_id) == ("orders", topic_id)
    assert stream_topic((("topic", "orders"), ("topic_id", "not-a-uuid"))) is None


def _produce(bootstrap: str, topic: str, partitions: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, value=b"x" * 1000, partition=i % partitions)
    assert producer.flush(30) == 0


@pytest.mark.timeout(120)
async def test_a_topic_whose_broker_lost_the_controller_while_deleting_it_leaves_nothing_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    overrides = {**default_overrides(tmp_path), "deleted.topic.streams.check.interval.ms": "300",
                 "s3.wal.upload.interval.ms": "200"}
    node = Node(ServerConfig.load(None, [f"{k}={v}" for k, v in overrides.items()]))
    await node.start()
    try:
        bootstrap = f"127.0.0.1:{node.broker.server.bound_port}"
        for topic, partitions in (("kept", 1), ("doomed", 4)):
            await asyncio.to_thread(create_topic, bootstrap, topic, partitions)
            await asyncio.to_thread(_produce, bootstrap, topic, partitions, 400)
        controller = node.broker.controller
        streams: StreamMetadataStateMachine = controller.stream_metadata  # type: ignore[attr-defined]
        doomed_id = controller.image.topics_by_name["doomed"].topic_id

        async def streams_of(name: str) -> list[int]:
            return [s.stream_id for s in await streams.get_streams(range(1_000))
                    if (t := stream_topic(s.tags)) is not None and t.name == name]

        kept_streams = await streams_of("kept")
        doomed_streams = await streams_of("doomed")
        assert len(kept_streams) == 3 and len(doomed_streams) == 12  # meta, log and time of each partition

        async def objects_with_doomed_data() -> set[int]:
            return {o.object_id for i in doomed_streams for o in await streams.get_objects(i, 0, -1, 100)}

        await eventually_async(objects_with_doomed_data, timeout=30, interval=0.1,
                               what="the doomed topic's records uploaded")

        async def lost(*_args: object) -> None:
            raise StorageError("injected: the controller is unreachable")

        monkeypatch.setattr(StreamMetadataStateMachine, "delete_stream", lost)
        monkeypatch.setattr(StreamMetadataStateMachine, "delete_kv", lost)
        await asyncio.to_thread(delete_topic, bootstrap, "doomed")

        async def left_closed() -> bool:
            left = await streams.get_streams(doomed_streams)
            return len(left) == len(doomed_streams) and all(s.state.name == "CLOSED" for s in left)

        await eventually_async(left_closed, timeout=30, interval=0.05, what="the broker's deletion to fail half way")
        monkeypatch.undo()  # the controller is reachable again; the broker does not try again

        async def swept() -> bool:
            return not await streams.get_streams(doomed_streams)

        await eventually_async(swept, timeout=30, interval=0.1, what="the controller to delete the streams left")
        key = partition_kv_key(namespace_for(controller.image.cluster_id), doomed_id, 0)
        assert await streams.get_kv(key) is None
        assert {s.stream_id for s in await streams.get_streams(kept_streams)} == set(kept_streams)
    finally:
        await node.stop()
