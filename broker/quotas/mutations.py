"""A request's controller mutation quota (KIP-599): Kafka's strict and permissive ``ControllerMutationQuota``.

``controller_mutation_rate`` limits the partitions a (user, client id) creates (CreateTopics, CreatePartitions) or
deletes (DeleteTopics) per second, measured with the same windowed rate and entity precedence as the other client
quotas (``manager``, ``resolution``). ``metadata.admin.requests`` checks and charges each topic before the
controller creates or deletes anything, and gives back what the controller refused:

- strict (CreateTopics v6+, DeleteTopics v5+, CreatePartitions v3+, whose clients retry THROTTLING_QUOTA_EXCEEDED):
  a topic asked while the rate is already over the quota is refused, and so is every later topic of the request
  (Kafka's ``isExceeded``); the response carries how long until the rate is back within. A topic asked while it
  is within goes through and is charged in full, even when that takes the rate over (Kafka checks before it
  records), so a client's first burst is accepted and the response of the request that crossed the quota is not
  throttled;
- permissive (older versions, whose clients know no such error): every topic goes through and is charged, and the
  response is throttled once the rate is over the quota.

The throttle is counted in the metrics once per request, when the response takes it.

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
    """One request's controller mutation quota: a ``metadata.admin.requests.MutationQuota``.

    :meth:`admit` checks and charges a topic in one synchronous step, so concurrent requests of one client cannot
    all pass the check before any of them is charged; :meth:`adjust` corrects the charge once the controller
    answered (a topic it refused is given back)."""

    __slots__ = (
        "_client_id",
        "_clock",
        "_manager",
        "_measured_at",
        "_reported",
        "_resolved",
        "_strict",
        "_throttle",
        "_user",
    )

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
        self._reported = False

    @property
    def strict(self) -> bool:
        return self._strict

    def exhausted(self) -> bool:
        """Whether a strict quota refuses the next topic. Sticky once it refused one (Kafka's ``isExceeded``:
        the last throttle time is set), so a request's later topics are not let through by a rate that fell back
        meanwhile; always False for a permissive quota."""
        if not self._strict:
            return False
        if self._throttle > 0:
            return True
        now = self._clock()
        throttle = self._manager.over_quota(self._resolved, _KIND, now=now)
        if throttle <= 0:
            return False
        self._throttle, self._measured_at = throttle, now
        return True

    def admit(self, partitions: int) -> bool:
        """Checks the quota and charges ``partitions`` in one step (no await between them): False, nothing
        charged, when a strict quota is spent; a permissive quota charges and admits everything."""
        if self.exhausted():
            return False
        self.adjust(partitions)
        return True

    def adjust(self, partitions: int) -> None:
        """Adds ``partitions`` to the charge (negative: gives back what a refused topic was charged, off the newest
        windows and never below nothing: ``wire.sampled_rate``; a late give-back is never credit)."""
        if partitions == 0:
            return
        self._manager.record_resolved(
            self._resolved,
            _KIND,
            user=self._user,
            client_id=self._client_id,
            value=float(partitions),
            now=self._clock(),
            check=False,
        )

    def throttle_s(self) -> float:
        """How long the response throttles the client, asked once per request (that is when the throttle is
        counted in the metrics): a strict quota's what is left of the throttle measured when it refused, a
        permissive quota's the throttle its rate needs now; 0 for none."""
        now = self._clock()
        if self._strict:
            throttle = max(0.0, self._throttle - (now - self._measured_at)) if self._throttle > 0 else 0.0
        else:
            throttle = self._manager.over_quota(self._resolved, _KIND, now=now)
        if throttle > 0 and not self._reported:
            self._reported = True
            self._manager.report_throttle(_KIND, self._user, self._client_id, self._resolved, throttle)
        return throttle
