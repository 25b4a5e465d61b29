"""ApiVersions (key 18) v0-4, including the KIP-511 v0 fallback for versions newer than ours, and the KIP-584
features (v3+) that Java clients and Kafka's tools read. The answer itself is ``wire.api_versions``'s, which a
starting broker also gives before it serves (``wire.early_answers``).

The finalized ``kraft.version`` is the quorum's, as a Kafka broker reports its Raft client's: 1 for a broker of a
dynamic quorum (or of a static one upgraded since: its log names the voters), 0 (not named) for a static one, and
for a node keeping its metadata in a local log, whose voters cannot change either (``broker.handlers.raft_voters``)."""

from __future__ import annotations

from typing import Any

from broker.handlers.context import RequestContext
from metadata.controller_api import QuorumForwarder
from wire.api_versions import api_versions_answer, valid_client_software, with_kraft_version


async def handle_api_versions(ctx: RequestContext, request: Any) -> Any:
    valid = ctx.api_version < 3 or valid_client_software(request.client_software_name,
                                                         request.client_software_version)
    if valid and ctx.api_version >= 3:
        ctx.connection.client_software = (request.client_software_name, request.client_software_version)
    controller = ctx.broker.controller
    image = controller.image
    kraft = controller.kraft_version if isinstance(controller, QuorumForwarder) else 0
    return api_versions_answer(ctx.api_version, ctx.api_versions, software_valid=valid,
                               finalized=with_kraft_version(image.finalized_features(), kraft), epoch=image.offset)
