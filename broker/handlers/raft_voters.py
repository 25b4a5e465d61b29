"""AddRaftVoter (key 80) v0-1 and RemoveRaftVoter (key 81) v0 on a broker: KIP-853's voter changes, as Kafka 4's
``kafka-metadata-quorum --bootstrap-server ... add-controller`` sends them.

A broker of a Raft quorum forwards them unchanged to the quorum's leader, as Kafka's brokers do; the leader decides
and answers (``controller.rpc.voter_changes``). A combined single node keeps its metadata in a local log, not a Raft
quorum, so its voters cannot change: UNSUPPORTED_VERSION, as Kafka answers a quorum at ``kraft.version`` 0.
"""

from __future__ import annotations

from typing import Any, Final

from kio.schema.errors import ErrorCode

from broker.handlers.context import RequestContext
from broker.handlers.guards import Guard, cluster
from metadata.acl.binding import AclOperation
from metadata.controller_api import QuorumForwarder
from metadata.errors import error_code_for, error_message_for


async def handle_raft_voter_change(ctx: RequestContext, request: Any) -> Any:
    controller = ctx.broker.controller
    if not isinstance(controller, QuorumForwarder):
        return ctx.build(throttle_time=0, error_code=ErrorCode.unsupported_version,
                         error_message="this node keeps its metadata in a local log, not a Raft quorum: its voters "
                                       "cannot change (a quorum of controller-only nodes, or of several voters, can)")
    try:
        return await controller.forward_to_quorum_leader(ctx.api_key, ctx.api_version, request)
    except Exception as exc:  # no controller reached: an error code in the answer, never a dropped connection
        return ctx.build(throttle_time=0, error_code=error_code_for(exc), error_message=error_message_for(exc))


#: CLUSTER ALTER, as Kafka checks; a refusal refuses the whole request.
authorize_raft_voter_change: Final[Guard] = cluster(AclOperation.ALTER)
