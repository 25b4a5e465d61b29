"""ElectLeaders (key 43) v0-2: what ``kafka-leader-election.sh`` and admin clients' ``elect_leaders`` send.

The controller decides (``controller.decisions.leadership.elect``: preferred, or unclean, which in Fjord loses nothing
since every replica reads the same shared storage); a broker of a cluster forwards the request to the active controller,
which answers it through the same translation (``metadata.admin.wire``). The CLUSTER ALTER check is
``broker.handlers.acl_table``'s.
"""

from __future__ import annotations

from typing import Any

from broker.handlers.context import RequestContext
from metadata.admin import requests as admin_requests
from metadata.admin import wire as admin_wire


async def handle_elect_leaders(ctx: RequestContext, request: Any) -> Any:
    ask = admin_wire.read_elect_leaders(request)
    return await admin_requests.elect_leaders(ctx.response_class, ask, admin_requests.always(ctx.node.controller))
