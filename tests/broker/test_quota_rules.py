"""How a client quota is found and measured (issue 13), without a broker: Kafka's entity precedence, the windowed
rate and the throttle it gives, the quota window keys a node accepts, and the busy time ``request_percentage``
counts (a handler's own steps, not its waits).
"""

from __future__ import annotations

import asyncio
import time

import pytest

from broker.quotas.busy_time import BusyTime, timed
from broker.quotas.manager import ClientQuotas, QuotaType, QuotaWindows
from broker.quotas.resolution import QuotaTags, resolve
from settings.security import refusal


def test_entity_precedence_follows_kafka() -> None:
    user_client = (("client-id", "app"), ("user", "alice"))
    levels = [
        (user_client, QuotaTags("alice", "app")),
        ((("client-id", None), ("user", "alice")), QuotaTags("alice", "app")),
        ((("user", "alice"),), QuotaTags("alice", "")),
        ((("client-id", "app"), ("user", None)), QuotaTags("alice", "app")),
        ((("client-id", None), ("user", None)), QuotaTags("alice", "app")),
        ((("user", None),), QuotaTags("alice", "")),
        ((("client-id", "app"),), QuotaTags("", "app")),
        ((("client-id", None),), QuotaTags("", "app")),
    ]
    quotas = {entity: {"producer_byte_rate": float(1000 + i)} for i, (entity, _) in enumerate(levels)}
    # Remove the most specific level one at a time: the next one in Kafka's order takes over.
    for i, (entity, tags) in enumerate(levels):
        resolved = resolve(quotas, "producer_byte_rate", "alice", "app")
        assert resolved is not None
        assert (resolved.entity, resolved.tags, resolved.limit) == (entity, tags, 1000 + i)
        del quotas[entity]
    assert resolve(quotas, "producer_byte_rate", "alice", "app") is None
    # Another user's quota or another key never applies; each key resolves on its own.
    other = {(("user", "bob"),): {"producer_byte_rate": 5.0}, (("user", None),): {"consumer_byte_rate": 7.0}}
    assert resolve(other, "producer_byte_rate", "alice", "app") is None
    fetch = resolve(other, "consumer_byte_rate", "alice", "app")
    assert fetch is not None and fetch.limit == 7.0


def test_rate_throttles_to_the_quota() -> None:
    quotas = {(("client-id", "p"),): {"producer_byte_rate": 1000.0}}
    manager = ClientQuotas(QuotaWindows(samples=3, window_s=1.0))

    def record(value: float, now: float) -> float:
        return manager.record(quotas, QuotaType.PRODUCE, user="ANONYMOUS", client_id="p", value=value, now=now)

    assert record(1500, 0.0) == 0  # 1500 over the 2-window floor: 750/s
    # 3000 over 2.5 s (0.5 s elapsed plus the floor) is 1200/s, 20 % above: 0.2 x 2.5 s brings it back.
    assert record(1500, 0.5) == pytest.approx(0.5)
    assert (
        manager.record(quotas, QuotaType.PRODUCE, user="ANONYMOUS", client_id="other", value=10**6, now=0.5) == 0
    )  # no quota for that client
    assert manager.record(quotas, QuotaType.FETCH, user="ANONYMOUS", client_id="p", value=10**6, now=0.5) == 0


def test_quota_window_keys_are_accepted() -> None:
    """The quota keys Fjord reads no longer stop a node (any other quota key still does: test_security_refusals)."""
    assert refusal("quota.window.num", "3") is None
    assert refusal("quota.window.size.seconds", "1") is None
    assert refusal("quota.producer.default", "1") is not None


async def test_busy_time_counts_the_handlers_own_steps_not_its_waits() -> None:
    async def handler() -> str:
        spin_until = time.perf_counter() + 0.02
        while time.perf_counter() < spin_until:
            pass
        await asyncio.sleep(0.2)  # waiting (storage, a long poll) is not the handler's time
        return "done"

    busy = BusyTime()
    started = time.perf_counter()
    assert await timed(handler(), busy) == "done"
    assert 0.02 <= busy.seconds <= time.perf_counter() - started - 0.2
