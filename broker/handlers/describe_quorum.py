"""DescribeQuorum (key 55) v0-2 on a broker: the controller quorum as Kafka's ``kafka-metadata-quorum`` shows it.

In a cluster the request is forwarded unchanged to the Raft leader (KRaft brokers forward it too), so voters,
observers (the brokers replaying the metadata log), epoch and high watermark are the quorum's own. A combined
single node has no Raft quorum: it answers for itself as the only voter, leader of its local metadata log.
"""

from __future__ import annotations

import time
from typing import Any

from kio.schema.errors import ErrorCode

from broker.handlers.context import RequestContext
from controller.api import QuorumForwarder
from controller.raft.messages import DescribeQuorumResponse, Errors, ReplicaState
from controller.rpc.raft_codec import describe_quorum_response


async def handle_describe_quorum(ctx: RequestContext, request: Any) -> Any:
    controller = ctx.node.controller
    if isinstance(controller, QuorumForwarder):
        return await controller.forward_to_quorum_leader(ctx.api_key, ctx.api_version, request)
    image = controller.image
    if "controller" not in ctx.node.config.process_roles:
        return ctx.build(error_code=ErrorCode.unknown_server_error,
                         error_message="this broker has no controller quorum to describe")
    end = image.offset + 1
    # A leader reports itself as fetched and caught up just now, as the Raft core (and Kafka) do.
    now_ms = int(time.time() * 1000)
    me = ReplicaState(ctx.node.node_id, end, now_ms, now_ms)
    answer = DescribeQuorumResponse(Errors.NONE, ctx.node.node_id, 0, end, (me,), ())
    return describe_quorum_response(ctx.response_class, answer)
