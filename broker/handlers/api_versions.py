"""ApiVersions (key 18) v0-4, including the KIP-511 v0 fallback for versions newer than ours, and the KIP-584
features (v3+) that Java clients and Kafka's tools read. The answer itself is ``wire.api_versions``'s, which a
starting broker also gives before it serves (``wire.early_answers``)."""

from __future__ import annotations

from typing import Any

from broker.handlers.context import RequestContext
from wire.api_versions import api_versions_answer, valid_client_software


async def handle_api_versions(ctx: RequestContext, request: Any) -> Any:
    valid = ctx.api_version < 3 or valid_client_software(request.client_software_name,
                                                         request.client_software_version)
    if valid and ctx.api_version >= 3:
        ctx.connection.client_software = (request.client_software_name, request.client_software_version)
    image = ctx.broker.controller.image
    return api_versions_answer(ctx.api_version, ctx.api_versions, software_valid=valid,
                               finalized=image.finalized_features(), epoch=image.offset)
