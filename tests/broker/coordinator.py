"""Finding a group's coordinator over the wire, waiting until its ``__consumer_offsets`` partition is loaded."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from testkit.node_process import WireClient
from testkit.waiting import eventually
from wire import codec, schema


def find_coordinator(client: WireClient, group: str) -> Any:
    """FindCoordinator v3 until the coordinator's partition is loaded (it is created on first use)."""

    def ask() -> Any:
        response = client.request(schema.build(codec.request_class(10, 3), key=group, key_type=0))
        assert response.error_code in (ErrorCode.none, ErrorCode.coordinator_not_available), response
        return response

    return eventually(ask, until=lambda response: response.error_code == ErrorCode.none, timeout=30, interval=0.1,
                      what=f"the coordinator of group {group} to load")
