"""How a client quota is found and measured (issue 13), without a broker: Kafka's entity precedence, the windowed
rate and the throttle it gives, the quota window keys a node accepts, and the busy time ``request_percentage``
counts (a handler's own steps, not its waits).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time

import pytest

from broker.quotas.busy_time import BusyTime, timed
from broker.quotas.enforcer import QuotaEnforcer
from broker.quotas.manager import ClientQuotas, QuotaType, QuotaWindows
from broker.quotas.resolution import QuotaTags, resolve
from settings.security import refusal
from wire import codec, schema
from wire.dispatch import Peer


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


def test_a_huge_request_is_throttled_until_the_average_is_back_at_the_quota_a_busy_one_one_window_at_most() -> None:
    """Kafka bounds only the request-time throttle (one window): a 1 MiB produce against 10 KiB/s waits ~100 s,
    not the 11 s of all the windows after which a client would start over with a clean slate."""
    quotas = {(("client-id", "p"),): {"producer_byte_rate": 10_240.0, "request_percentage": 10.0}}
    manager = ClientQuotas(QuotaWindows(samples=11, window_s=1.0))
    produced = manager.record(quotas, QuotaType.PRODUCE, user="ANONYMOUS", client_id="p", value=2**20, now=0.0)
    # 1 MiB over the 10-window floor is 104,858 B/s, 9.24 times the quota over: 92 s at 10 s of window.
    assert produced == pytest.approx((2**20 / 10 - 10_240) / 10_240 * 10, rel=1e-6)
    assert 2**20 / (produced + 10) <= 10_240 * 1.01  # the request's bytes over its throttle: the quota
    busy = manager.record(quotas, QuotaType.REQUEST, user="ANONYMOUS", client_id="p", value=300.0, now=0.0)
    assert busy == pytest.approx(1.0)  # 30 %-seconds a second against 10: bounded at one window


async def test_share_fetch_is_capped_and_charged_like_fetch_and_an_acks_0_produce_owes_no_request_time() -> None:
    """Kafka's handleShareFetchRequest caps max_bytes at the consumer_byte_rate allowance and charges the answer's
    size; handleProduceRequest charges no request time to acks=0 (it has no answer to carry the throttle)."""
    quotas = {
        (("client-id", "c"),): {"consumer_byte_rate": 1000.0, "request_percentage": 0.001, "producer_byte_rate": 1e9}
    }
    enforcer = QuotaEnforcer(lambda: quotas, lambda: QuotaWindows(samples=3, window_s=1.0))
    muted: list[float] = []
    peer = Peer("127.0.0.1", 1, "PLAINTEXT", mute=muted.append)
    share_fetch = schema.build(codec.request_class(78, 1), group_id="g", member_id="m", share_session_epoch=0,
                               max_wait=0, min_bytes=1, max_bytes=10**6, max_records=500, batch_size=500,
                               topics=(), forgotten_topics_data=())
    charge = enforcer.charge(78, "User:ANONYMOUS", "c")
    assert charge is not None
    assert charge.admit(share_fetch, 100).max_bytes == 2000  # two windows' allowance
    answer = schema.build(codec.response_class(78, 1), throttle_time=0, error_code=0, error_message=None,
                          acquisition_lock_timeout_ms=15_000, responses=(), node_endpoints=())
    parts = charge.respond(1, answer, peer)
    assert parts is not None and muted == []  # a small answer: within the quota
    big = dataclasses.replace(answer, error_message="x" * 5000)
    assert enforcer.charge(78, "User:ANONYMOUS", "c").respond(2, big, peer) is not None  # type: ignore[union-attr]
    assert len(muted) == 1 and muted[0] > 0  # throttled by its size, as a Fetch

    for acks, charged in ((0, False), (-1, True)):
        produce = enforcer.charge(0, "User:ANONYMOUS", "c")
        assert produce is not None
        produce.admit(schema.build(codec.request_class(0, 9), transactional_id=None, acks=acks, timeout=1000,
                                   topic_data=()), 100)

        async def busy() -> None:
            spin_until = time.perf_counter() + 0.01
            while time.perf_counter() < spin_until:
                pass

        await produce.timed(busy())
        muted.clear()
        produce.respond(3, None, peer)
        assert bool(muted) is charged, (acks, muted)


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
