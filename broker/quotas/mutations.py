"""A request's controller mutation quota (KIP-599): Kafka's strict and permissive ``ControllerMutationQuota``.

``controller_mutation_rate`` limits the partitions a (user, client id) creates (CreateTopics, CreatePartitions) or
deletes (DeleteTopics) per second, measured with the same windowed rate and entity precedence as the other client
quotas (``manager``, ``resolution``). ``controller.admin_requests`` asks it about each topic:

- strict (CreateTopics v6+, DeleteTopics v5+, CreatePartitions v3+, whose clients retry THROTTLING_QUOTA_EXCEEDED):
  a topic asked while the rate is already over the quota is refused, and the response carries how long until it
  is back within; a topic asked while it is within goes through and is charged in full, even when that takes the
  rate over (Kafka checks before it records), so a client's first burst is accepted and the response of the
  request that crossed the quota is not throttled;
- permissive (older versions, whose clients know no such error): every topic goes through and is charged, and the
  response is throttled once the rate is over the quota.

Kafka measures this quota with a token bucket holding ``quota.window.num`` windows' worth of mutations; Fjord
reuses its sampled rate, whose floor of ``quota.window.num - 1`` windows gives a new client the same kind of
initial burst and the same throttle times within a window's worth. A throttle shrinks by the time spent since it
was measured (the rest of the request's topics may take a while), as Kafka's does. Kafka's active controller
measures the rate for the whole cluster; Fjord's broker that receives the request measures it, as it does the other
client quotas (the controller never sees the client's principal: the broker forwards the request as itself).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from broker.quotas.manager import ClientQuotas, QuotaType
from broker.quotas.resolution import ResolvedQuota

_KIND = QuotaType.CONTROLLER_MUTATION


class RequestMutations:
    """One request's controller mutation quota: a ``controller.admin_requests.MutationQuota``."""

    __slots__ = ("_client_id", "_clock", "_manager", "_measured_at", "_resolved", "_strict", "_throttle", "_user")

    def __init__(
        self,
        manager: ClientQuotas,
        resolved: ResolvedQuota,
        *,
        user: str,
        client_id: str,
        strict: bool,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._manager = manager
        self._resolved = resolved
        self._user = user
        self._client_id = client_id
        self._strict = strict
        self._clock = clock
        self._throttle = 0.0
        self._measured_at = 0.0

    @property
    def strict(self) -> bool:
        return self._strict

    def exhausted(self) -> bool:
        if not self._strict:
            return False
        now = self._clock()
        throttle = self._manager.over_quota(self._resolved, _KIND, user=self._user, client_id=self._client_id, now=now)
        if throttle <= 0:
            return False
        self._throttle, self._measured_at = throttle, now
        return True

    def record(self, partitions: int) -> None:
        if partitions <= 0:
            return
        now = self._clock()
        throttle = self._manager.record_resolved(
            self._resolved,
            _KIND,
            user=self._user,
            client_id=self._client_id,
            value=float(partitions),
            now=now,
            check=not self._strict,
        )
        if throttle > 0:
            self._throttle, self._measured_at = throttle, now

    def throttle_s(self) -> float:
        """How long the response throttles the client: what is left of the last throttle measured, 0 for none."""
        if self._throttle <= 0:
            return 0.0
        return max(0.0, self._throttle - (self._clock() - self._measured_at))
