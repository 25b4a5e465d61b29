"""Counting and logging authorization denials, shared by the broker's listeners (``broker.authorization``) and the
CONTROLLER listener (``controller.rpc.authorization``).

Every denial is counted (``fjord_broker_authorization_denials``, by listener, resource type and operation); each
distinct one (the caller says what makes it distinct: principal, operation, resource...) is logged once, so a client
retrying a forbidden request does not flood the log. How many are remembered is bounded: past it, further distinct
denials are still counted but no longer logged (a client probing names must not grow the node's memory without
bound).
"""

from __future__ import annotations

import logging
from collections.abc import Hashable
from typing import Final, Protocol

from metadata.acl.binding import AclOperation, ResourceType
from wire.log_text import untrusted

#: How many distinct denials are remembered for logging once.
LOGGED_DENIALS_MAX: Final = 10_000


class Incrementable(Protocol):
    def inc(self) -> None: ...


class DenialCounter(Protocol):
    """The denials metric (``ServerMetrics.authorization_denials``)."""

    def labels(self, *, listener: str, resource_type: str, operation: str) -> Incrementable: ...


class DenialLog:
    """``counter`` None: denials are only logged (a node built without metrics). ``log``: the logger of the module
    that decides, so the line names where the check is."""

    def __init__(self, counter: DenialCounter | None, log: logging.Logger, *, limit: int = LOGGED_DENIALS_MAX) -> None:
        self._counter = counter
        self._log = log
        self._limit = limit
        self._logged: set[Hashable] = set()

    def denied(
        self,
        key: Hashable,
        *,
        listener: str,
        resource_type: str,
        operation: str,
        message: str,
        args: tuple[object, ...],
    ) -> None:
        """Counts one denial and logs ``message % args`` at INFO unless a denial of the same ``key`` was logged.
        A client-supplied string in ``args`` must come escaped and capped (``wire.log_text.untrusted``): a newline
        in a topic name must not start a log line of the client's choosing."""
        if self._counter is not None:
            self._counter.labels(listener=listener, resource_type=resource_type, operation=operation).inc()
        if key in self._logged or len(self._logged) >= self._limit:
            return
        self._logged.add(key)
        self._log.info(message, *args)

    def operation_denied(
        self, principal: str, host: str, listener: str, op: AclOperation, *, resource: ResourceType, name: str
    ) -> None:
        """One denied operation on one resource, counted and logged in the words of Kafka's authorizer log, once
        per (principal, operation, resource). The remembered key holds the name as logged (capped), so names a
        client made up cost bounded memory each."""
        principal, host, name = untrusted(principal), untrusted(host), untrusted(name)
        self.denied(
            (principal, op, resource, name),
            listener=listener,
            resource_type=resource.name,
            operation=op.name,
            message="Principal = %s is Denied operation = %s from host = %s on resource = %s:%s (listener %s); "
            "further denials of it are counted, not logged",
            args=(principal, op.name, host, resource.name, name, listener),
        )
