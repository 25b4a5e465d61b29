"""A PrepareCommit/PrepareAbort whose markers are being written, in process: the coordinator's MarkerSender writes
them to the partitions' leaders (here two peers, one of which cannot be reached), and DescribeTransactions lists
only the partitions still waiting for their marker, as Kafka's coordinator removes each partition from the
transaction (in memory) as its marker is written."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from typing import Any, cast

from kio.schema.errors import ErrorCode

from broker.broker_context import BrokerContext
from broker.groups.coordinator import GroupCoordinator
from broker.handlers.context import RequestContext
from broker.handlers.describe_transactions import handle_describe_transactions
from broker.partition.manager import PartitionManager
from broker.services import BrokerServices
from broker.transactions.marker_sender import MarkerSender
from broker.transactions.peers import Peers, PeerUnavailable
from broker.transactions.state import TransactionMetadata, TxnState, TxnTransit
from metadata.cluster_records import PartitionRecord, TopicRecord
from metadata.image import MetadataImage
from testkit.waiting import eventually_async
from wire import codec, schema

TOPIC_ID = uuid.uuid4()
#: Partition 0 is led by broker 1, which takes markers; partition 1 by broker 2, which cannot be reached.
IMAGE = MetadataImage("c").apply(
    [
        TopicRecord("orders", str(TOPIC_ID)),
        PartitionRecord(str(TOPIC_ID), 0, (1,), (1,), 1, 0),
        PartitionRecord(str(TOPIC_ID), 1, (2,), (2,), 2, 0),
    ],
    5,
)


@dataclass
class _Controller:
    image: MetadataImage = IMAGE


@dataclass
class _Context:
    node_id: int = 0
    controller: _Controller = field(default_factory=_Controller)


class _Peers:
    """Broker 1 writes every marker it is sent; broker 2 is down."""

    async def request(self, node_id: int, request: Any) -> Any:
        if node_id == 2:
            raise PeerUnavailable("broker 2 is down")
        response_cls = codec.response_class(27, 2)
        marker_cls = schema.field_entity(response_cls, "markers")
        topic_cls = schema.field_entity(marker_cls, "topics")
        return schema.build(response_cls, markers=tuple(
            schema.build(marker_cls, producer_id=m.producer_id, topics=tuple(
                schema.build(topic_cls, name=t.name, partitions=tuple(
                    schema.build_nested(topic_cls, "partitions", partition_index=p, error_code=ErrorCode.none)
                    for p in t.partition_indexes
                ))
                for t in m.topics
            ))
            for m in request.markers
        ))


@dataclass
class _Transactions:
    metadata: TransactionMetadata

    def describe(self, transactional_id: str) -> tuple[ErrorCode, TransactionMetadata | None]:
        return ErrorCode.none, self.metadata


@dataclass
class _Broker:
    transactions: _Transactions


def _apply(metadata: TransactionMetadata, transit: TxnTransit | ErrorCode) -> None:
    """Installs a transit as the coordinator does once it is durable."""
    assert isinstance(transit, TxnTransit), transit
    metadata.complete_transition(transit)


async def _described(metadata: TransactionMetadata) -> Any:
    ctx = RequestContext(api_key=65, api_version=0, correlation_id=1, client_id="t", client_host="127.0.0.1",
                         broker=cast(BrokerServices, _Broker(_Transactions(metadata))))
    response = await handle_describe_transactions(ctx, schema.build(codec.request_class(65, 0),
                                                                    transactional_ids=("tx",)))
    [state] = response.transaction_states
    return state


async def test_a_commit_stuck_on_one_partition_describes_only_that_partition() -> None:
    metadata = TransactionMetadata.new("tx", 1000, 60_000, 0)
    _apply(metadata, metadata.init_producer_id(60_000, None, 0, None))
    _apply(metadata, metadata.add_partitions(1000, 0, [("orders", 0), ("orders", 1)], 1))
    _apply(metadata, metadata.prepare_end(TxnState.PREPARE_COMMIT, 2))
    assert [(t.topic, t.partitions) for t in (await _described(metadata)).topics] == [("orders", (0, 1))]

    sender = MarkerSender(cast(BrokerContext, _Context()), cast(PartitionManager, None),
                          cast(GroupCoordinator, None), cast(Peers, _Peers()))
    sending = asyncio.create_task(sender.send(
        transactional_id="tx", producer_id=1000, producer_epoch=0, coordinator_epoch=0, commit=True,
        partitions=set(metadata.partitions), still_valid=lambda: True, done=metadata.markers_done.add,
    ))
    try:
        state = await eventually_async(
            lambda: _described(metadata),
            until=lambda s: [(t.topic, t.partitions) for t in s.topics] == [("orders", (1,))],
            timeout=10, what="only orders-1 waiting for its marker",
        )
        assert state.transaction_state == "PrepareCommit"
        assert metadata.partitions == {("orders", 0), ("orders", 1)}  # what a reload would restore is untouched
    finally:
        sending.cancel()
