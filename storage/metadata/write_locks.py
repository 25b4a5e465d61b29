"""Which stream-metadata writes may be in flight at the same time.

A write validates against the state, appends its records to the metadata log (durable, or committed by the Raft
quorum) and only then applies them. Holding one lock across the append made every write wait for the previous
one's commit round trip, so throughput could not grow with concurrency. Writes that touch disjoint entities
commute: each declares the keys it reads and changes (a stream, an object, a KV key) and holds only those, so
writes on other streams or keys validate and append while its records are still being committed, and a Raft
leader batches them into shared replication rounds. Writes on the same key still run one after the
other, each validating against the state its predecessor left (continuity checks, epoch fencing, idempotent
retries see exactly what they did before). Writes that scan the whole state (object sweeps, node registration,
compactions) hold everything. New stream and object ids are reserved when a write is validated (the id counters
only grow, also when records apply out of log order), so creating streams and preparing objects need no key.

An append that fails applied nothing, so there is nothing to roll back: validation never runs against records
that are not yet committed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Collection, Hashable

EVERYTHING: None = None
"""The key set of a write that must run alone."""


class WriteLocks:
    """Keyed exclusive locks plus an all-keys lock; a waiting all-keys writer holds back new keyed writers so a
    steady stream of keyed writes cannot starve it."""

    def __init__(self) -> None:
        self._held: set[Hashable] = set()
        self._holders = 0
        self._exclusive = False
        self._exclusive_waiting = 0
        self._changed = asyncio.Condition()

    def _free(self, keys: frozenset[Hashable] | None) -> bool:
        if self._exclusive:
            return False
        if keys is None:
            return self._holders == 0
        return self._exclusive_waiting == 0 and self._held.isdisjoint(keys)

    @contextlib.asynccontextmanager
    async def hold(self, keys: Collection[Hashable] | None) -> AsyncIterator[None]:
        """Holds ``keys`` (:data:`EVERYTHING` for all of them) for the body."""
        wanted = None if keys is None else frozenset(keys)
        async with self._changed:
            if wanted is None:
                self._exclusive_waiting += 1
                try:
                    await self._changed.wait_for(lambda: self._free(None))
                finally:
                    self._exclusive_waiting -= 1
                    self._changed.notify_all()  # keyed writers held back for it may go on if it gave up
                self._exclusive = True
            else:
                await self._changed.wait_for(lambda: self._free(wanted))
                self._held |= wanted
                self._holders += 1
        try:
            yield
        finally:
            async with self._changed:
                if wanted is None:
                    self._exclusive = False
                else:
                    self._held -= wanted
                    self._holders -= 1
                self._changed.notify_all()
