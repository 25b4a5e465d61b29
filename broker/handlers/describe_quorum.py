"""DescribeQuorum (key 55) v0-2 on a broker: the controller quorum as Kafka's ``kafka-metadata-quorum`` shows it.

In a cluster the request is forwarded unchanged to the Raft leader (KRaft brokers forward it too), so voters,
observers (the brokers replaying the metadata log), epoch and high watermark are the quorum's own. A combined
single node has no Raft quorum: it answers for itself as the only voter, leader of its local metadata log, and
(v2) names its CONTROLLER listener when it serves one (``controller.embedded_listener`` serves it), which is
how a client that knows only the bootstrap servers finds where to read the metadata, as it does in a cluster.
"""

from __future__ import annotations

from typing import Any, Final

from kio.schema.errors import ErrorCode

from broker.handlers.context import RequestContext
from broker.handlers.guards import Guard, cluster
from metadata.acl.binding import AclOperation
from metadata.controller_api import QuorumForwarder
from metadata.rpc.raft_codec import describe_quorum_refusal, describe_quorum_response, sole_voter_description


async def handle_describe_quorum(ctx: RequestContext, request: Any) -> Any:
    # Judged here, as the quorum leader would judge a forwarded one, so a single node answers as a quorum does.
    refusal = describe_quorum_refusal(ctx.response_class, request)
    if refusal is not None:
        return refusal
    controller = ctx.broker.controller
    if isinstance(controller, QuorumForwarder):
        return await controller.forward_to_quorum_leader(ctx.api_key, ctx.api_version, request)
    image = controller.image
    if "controller" not in ctx.broker.config.process_roles:
        return ctx.build(error_code=ErrorCode.unknown_server_error,
                         error_message="this broker has no controller quorum to describe")
    address = ctx.broker.controller_address
    return describe_quorum_response(
        ctx.response_class,
        sole_voter_description(ctx.broker.node_id, image),
        {ctx.broker.node_id: address} if address is not None else None,
        ctx.broker.config.controller_listener_names[0] if address is not None else "",
    )


#: CLUSTER DESCRIBE, as Kafka checks; a refusal refuses the whole request.
authorize_describe_quorum: Final[Guard] = cluster(AclOperation.DESCRIBE)
