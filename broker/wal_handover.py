"""Hand-over: a broker whose S3 WAL has been unable to write for ``s3.wal.handover.ms`` stops leading.

The S3 WAL rides out an S3 outage by retrying (appends wait, then are refused retriably after
``s3.wal.unwritable.max.ms``), but a broker that cannot write must not keep its partitions for as long as the outage
lasts when other brokers can write (the outage may be its own: a throttled prefix, its network path, its
credentials). Past the bound it asks the controller, in its heartbeats, to fence it (Kafka's BrokerHeartbeat
``wantFence`` without ``wantShutDown``): the controller moves its leaderships to unfenced brokers in the same write and
assigns its WAL to a broker of the same WAL bucket, which replays what this broker acknowledged exactly as after a
crash (``controller.decisions.wal_failover``). This incarnation can then never write again: once the metadata shows
its WAL taken over, ``broker.wal_ownership.TakeoverGuard`` restarts the process in place, and the new incarnation
waits for its WAL's bucket to take writes before it registers (``wait_for_wal_bucket``), so its partitions stay on the
healthy brokers until S3 is back for it too. When no other broker may lead its partitions, or no live broker
shares its WAL bucket (nobody could replay what it acknowledged), the controller refuses: it stays unfenced and keeps
its partitions (never leaderless, never moved without their tail), its WAL acknowledges nothing it has not written,
and it asks again every heartbeat until its WAL writes again, when it stops asking.

A broker that can neither write nor reach the controller needs nothing from here: its WAL acknowledges nothing that
is not durable, and the controller fences it when its session expires, which hands its WAL over the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from broker.wal_ownership import TakeoverGuard, inherited_handovers
from metadata.controller_api import WriteFencing
from storage.wal.base import WriteAheadLog

logger = logging.getLogger(__name__)


class WALHandover:
    """Watches the WAL once a second (or more often for a short bound) and asks to be fenced while it has been
    unwritable past ``bound_s``; counts the hand-overs (``fjord_wal_handovers_total``), going on from the count
    of the incarnations this process restarted in place from (``broker.wal_ownership.HANDOVERS_ENV``)."""

    def __init__(
        self, node_id: int, wal: Callable[[], WriteAheadLog], fencing: WriteFencing, bound_s: float,
        takeover: TakeoverGuard,
    ) -> None:
        self.node_id = node_id
        self._takeover = takeover
        self._wal = wal
        self._fencing = fencing
        self.bound_s = bound_s
        self.handovers = inherited_handovers()
        self._takeover.handovers = self.handovers
        self.handing_over = False
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._watch(), name=f"broker-{self.node_id}-wal-handover")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def check(self) -> None:
        """One look at the WAL: starts or ends a hand-over."""
        wal = self._wal()
        stuck_s = wal.unwritable_for
        if not self.handing_over and stuck_s >= self.bound_s:
            self.handing_over = True
            self.handovers += 1
            self._takeover.handovers = self.handovers
            self._takeover.handing_over = True
            self._fencing.want_fence(True)
            logger.warning(
                "broker %d: its WAL has been unable to write to S3 for %.1fs (s3.wal.handover.ms %.0f ms); it asks "
                "the controller to fence it, so that its partitions move to other brokers and its WAL is replayed "
                "by one of them", self.node_id, stuck_s, self.bound_s * 1000,
            )
        elif self.handing_over and not wal.unwritable:
            self.handing_over = False
            self._takeover.handing_over = False
            self._fencing.want_fence(False)
            logger.info("broker %d: its WAL writes to S3 again; it asks the controller to unfence it", self.node_id)

    async def _watch(self) -> None:
        interval = max(0.05, min(1.0, self.bound_s / 10))
        while True:
            await asyncio.sleep(interval)
            self.check()
