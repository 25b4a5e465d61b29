"""The share stream (DESIGN.md §4, the sixth piece): the durable state of the share groups reading the partition.

It is created when a share group first touches the partition (most partitions never have one) and named in the
LOG meta entry's ``streamMap["shr"]`` (-1 until then), like the txn stream. It is opened and closed with the
partition's other streams, before the meta stream closes, so a reassignment's target or an S3-WAL failover finds it
closed and opens it with the new leader epoch: the share state moves with the partition. What it holds and how it
is checkpointed is broker/share/'s business (``broker.share.state_records``).
"""

from __future__ import annotations

import logging

from kio.schema.errors import ErrorCode

from broker.partition.partition_log.opening import open_stream
from broker.partition.partition_log.state import PartitionState
from metadata.stream_tags import partition_stream_tags
from storage.stream_api import Stream
from wire.errors import KafkaError

logger = logging.getLogger(__name__)


async def ensure_share_stream(state: PartitionState) -> Stream:
    """The share stream, created (and named in LOG) when a share group first needs it."""
    async with state.share_create_lock:
        if state.share is not None:
            return state.share
        state.check_open()
        tags = partition_stream_tags(state.topic, state.topic_id, state.partition, "shr")
        stream_id = await state.streams.create_stream(tags)
        stream_map = dict(state.log_info.get("streamMap", {}), shr=stream_id)
        await state.put_log_info(streamMap=stream_map)
        stream = await open_stream(state.streams, stream_id, state.leader_epoch, state.where)
        if state.closed:  # closed while we were opening it: close() did not see it
            await stream.close()
            raise KafkaError(ErrorCode.not_leader_or_follower, f"{state.where} is no longer led by this broker")
        state.share = stream
        logger.info("%s: created share stream %d for share-group state", state.where, stream_id)
        return stream
