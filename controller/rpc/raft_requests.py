"""The CONTROLLER listener's Raft requests: Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch and FetchSnapshot handed
to the Raft core through the network transport, and DescribeQuorum answered from the driver. A request for another
partition than ``__cluster_metadata``-0 is answered with Kafka's error and never reaches the core.

A request the core does not answer within ``controller.quorum.request.timeout.ms`` gets NOT_LEADER_OR_FOLLOWER
with no leader, which a peer retries on its own timers, as it would a lost reply.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from controller.rpc.protocol_error import ControllerProtocolError
from controller.rpc.served_quorum import ServedQuorum
from metadata.rpc.raft_codec import (
    OtherPartitionError,
    RaftCodecError,
    describe_quorum_refusal,
    describe_quorum_response,
    other_partition_refusal,
    request_from_kio,
    response_to_kio,
)
from raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    Errors,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    LeaderIdAndEpoch,
    RaftRequest,
    RaftResponse,
    VoteRequest,
    VoteResponse,
)

if TYPE_CHECKING:
    from wire.dispatch import Peer


async def answer_raft(
    quorum: ServedQuorum, api_key: int, body: Any, correlation_id: int, peer: Peer, *, timeout_s: float
) -> Any:
    """The core's reply to one Raft request (a kio response entity), or its stand-in after ``timeout_s``."""
    try:
        sender, raft_request = request_from_kio(api_key, body, correlation_id)
    except OtherPartitionError:
        return other_partition_refusal(api_key, body, quorum.cluster_id)
    except RaftCodecError as exc:
        raise ControllerProtocolError(f"{exc} (from {peer})") from None
    reply = await quorum.transport.deliver_request(sender, raft_request, timeout_s)
    if reply is None:
        reply = _unanswered(raft_request)
    _, entity = response_to_kio(reply)
    return entity


def describe_quorum(quorum: ServedQuorum, response_cls: type[Any], request: Any) -> Any:
    refusal = describe_quorum_refusal(response_cls, request)
    if refusal is not None:
        return refusal
    return describe_quorum_response(
        response_cls, quorum.driver.describe(), quorum.voters, quorum.config.controller_listener_names[0]
    )


def _unanswered(request: RaftRequest) -> RaftResponse:
    """What a peer gets when the core did not answer in time: an error it retries on its own timers."""
    error = Errors.NOT_LEADER_OR_FOLLOWER
    no_leader = LeaderIdAndEpoch(-1, -1)
    match request:
        case VoteRequest():
            return VoteResponse(error, -1, -1, False, request.correlation_id)
        case BeginQuorumEpochRequest():
            return BeginQuorumEpochResponse(error, -1, -1, request.correlation_id)
        case EndQuorumEpochRequest():
            return EndQuorumEpochResponse(error, -1, -1, request.correlation_id)
        case FetchRequest():
            return FetchResponse(error, -1, -1, no_leader, correlation_id=request.correlation_id)
        case FetchSnapshotRequest():
            return FetchSnapshotResponse(error, request.snapshot_id, no_leader, 0, 0, b"", request.correlation_id)
    raise TypeError(f"{type(request).__name__} is not answered by the Raft core")
