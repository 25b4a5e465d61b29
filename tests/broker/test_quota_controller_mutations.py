"""``controller_mutation_rate`` (KIP-599) on an in-process controller: what CreateTopics, DeleteTopics and
CreatePartitions charge (each topic's partitions, once the controller made the change), Kafka's strict quota of the
newer versions deciding before the controller, a refused topic's charge given back, and a topic named twice. On a
broker process with real requests: ``test_quotas.py``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.static.constants import uuid_zero

from broker.quotas.manager import ClientQuotas, QuotaType, QuotaWindows
from broker.quotas.mutations import RequestMutations
from broker.quotas.resolution import resolve
from controller.controller import Controller
from metadata.admin import requests as admin_requests
from metadata.admin import topic_wire
from settings.endpoint import Endpoint
from settings.server import ServerConfig
from tests.broker.quota_wire import create_topics_request
from wire import codec, schema


async def test_admin_requests_charge_each_topics_partitions_checking_before_recording(tmp_path: Path) -> None:
    """Kafka's strict quota: a topic is refused only when the quota is already spent before it, and a topic
    charges its partitions (created, deleted, or added) once the controller made the change; the permissive quota
    of older versions refuses nothing and throttles the response."""
    controller = await Controller.start(ServerConfig.load(None, [f"log.dirs={tmp_path}"]))
    try:
        await controller.register_broker(1, (Endpoint("PLAINTEXT", "127.0.0.1", 9092),), None)
        now = [0.0]
        manager = ClientQuotas(QuotaWindows(samples=3, window_s=1.0))  # the rate is measured over >= 2 s
        alice = resolve(
            {(("user", "alice"),): {"controller_mutation_rate": 2.0}}, "controller_mutation_rate", "alice", "app"
        )
        assert alice is not None
        assert (
            resolve({(("user", "alice"),): {"controller_mutation_rate": 2.0}}, "controller_mutation_rate", "bob", "app")
            is None
        )  # another user has no quota: unbounded

        def quota(strict: bool) -> RequestMutations:
            return RequestMutations(manager, alice, user="alice", client_id="app", strict=strict, clock=lambda: now[0])

        ask_of = admin_requests.always(controller)
        # CreateTopics v6: 3 partitions (rate 0 before), 3 more (1.5/s before: within), then over (3/s): refused.
        strict = quota(True)
        ask = topic_wire.read_create_topics(create_topics_request(6, {"m1": 3, "m2": 3, "m3": 1}), "app")
        response = await admin_requests.create_topics(codec.response_class(19, 6), ask, ask_of, strict)
        assert [(t.name, t.error_code) for t in response.topics] == [
            ("m1", ErrorCode.none),
            ("m2", ErrorCode.none),
            ("m3", ErrorCode.throttling_quota_exceeded),
        ]
        assert response.topics[2].error_message == admin_requests.THROTTLED
        assert "m3" not in controller.image.topics_by_name
        assert strict.throttle_s() == pytest.approx(1.0)  # (3/s - 2/s) / 2/s over the 2 s measured
        now[0] = 0.5
        assert strict.throttle_s() == pytest.approx(0.5)  # what is left of it when the response is sent

        # DeleteTopics v5, still over: refused, nothing deleted. Once the windows passed: both go, 6 charged.
        delete = topic_wire.read_delete_topics(
            schema.build(codec.request_class(20, 5), topic_names=("m1", "m2"), timeout=5000)
        )
        refused = await admin_requests.delete_topics(codec.response_class(20, 5), delete, ask_of, quota(True))
        assert {r.error_code for r in refused.responses} == {ErrorCode.throttling_quota_exceeded}
        assert {"m1", "m2"} <= set(controller.image.topics_by_name)
        now[0] = 3.0
        deleted = await admin_requests.delete_topics(codec.response_class(20, 5), delete, ask_of, quota(True))
        assert [(r.name, r.error_code) for r in deleted.responses] == [("m1", ErrorCode.none), ("m2", ErrorCode.none)]
        assert manager.over_quota(alice, QuotaType.CONTROLLER_MUTATION, now=3.0) == pytest.approx(1.0)

        # CreatePartitions v2 (permissive): over the quota, still done; charged the added partitions; throttled.
        now[0] = 6.0
        await admin_requests.create_topics(
            codec.response_class(19, 6),
            topic_wire.read_create_topics(create_topics_request(6, {"grown": 1}), "app"),
            ask_of,
            None,
        )
        permissive = quota(False)
        assert not permissive.exhausted()
        grow_cls = codec.request_class(37, 2)
        grow = topic_wire.read_create_partitions(
            schema.build(
                grow_cls,
                topics=(schema.build_nested(grow_cls, "topics", name="grown", count=6, assignments=None),),
                timeout=5000,
                validate_only=False,
            )
        )
        grown = await admin_requests.create_partitions(codec.response_class(37, 2), grow, ask_of, permissive)
        assert [r.error_code for r in grown.results] == [ErrorCode.none]
        assert len(controller.image.topics_by_name["grown"].partitions) == 6
        assert permissive.throttle_s() == pytest.approx(0.5)  # 5 added: (2.5/s - 2/s) / 2/s over 2 s
    finally:
        await controller.close()


async def test_strict_quota_decides_before_the_controller_and_validates_first(tmp_path: Path) -> None:
    """Concurrent CreateTopics v6 of one client cannot overshoot the quota (each topic is checked and charged before
    any controller round trip: no more get through than sent one after the other), and a throttled client still gets
    TOPIC_ALREADY_EXISTS / INVALID_PARTITIONS for topics that would fail anyway, charged nothing; the throttle is
    counted once per request."""
    controller = await Controller.start(ServerConfig.load(None, [f"log.dirs={tmp_path}"]))
    try:
        await controller.register_broker(1, (Endpoint("PLAINTEXT", "127.0.0.1", 9092),), None)
        throttles: list[float] = []
        quotas = {(("user", "alice"),): {"controller_mutation_rate": 2.0}}
        alice = resolve(quotas, "controller_mutation_rate", "alice", "app")
        assert alice is not None
        ask_of = admin_requests.always(controller)

        def created_of(managers: ClientQuotas, names: list[str], sequential: bool) -> Any:
            def quota() -> RequestMutations:
                return RequestMutations(managers, alice, user="alice", client_id="app", strict=True, clock=lambda: 0.0)

            async def one(name: str) -> ErrorCode:
                ask = topic_wire.read_create_topics(create_topics_request(6, {name: 1}), "app")
                response = await admin_requests.create_topics(codec.response_class(19, 6), ask, ask_of, quota())
                return ErrorCode(int(response.topics[0].error_code))

            async def run() -> list[ErrorCode]:
                if sequential:
                    return [await one(name) for name in names]
                return list(await asyncio.gather(*(one(name) for name in names)))

            return run()

        sequential = await created_of(ClientQuotas(QuotaWindows(3, 1.0)), [f"seq{i}" for i in range(8)], True)
        concurrent = await created_of(ClientQuotas(QuotaWindows(3, 1.0)), [f"par{i}" for i in range(8)], False)
        admitted = sequential.count(ErrorCode.none)
        assert 1 <= admitted < 8
        assert set(sequential[admitted:]) == {ErrorCode.throttling_quota_exceeded}
        assert concurrent.count(ErrorCode.none) <= admitted, concurrent
        assert set(concurrent) == {ErrorCode.none, ErrorCode.throttling_quota_exceeded}

        manager = ClientQuotas(QuotaWindows(3, 1.0), on_throttle=lambda _k, _u, seconds: throttles.append(seconds))
        manager.record_resolved(alice, QuotaType.CONTROLLER_MUTATION, user="alice", client_id="app", value=6.0,
                                now=0.0, check=False)
        spent = RequestMutations(manager, alice, user="alice", client_id="app", strict=True, clock=lambda: 0.0)
        bad = create_topics_request(6, {"seq0": 1, "zero": 0, "fresh-a": 1, "fresh-b": 2})
        response = await admin_requests.create_topics(
            codec.response_class(19, 6), topic_wire.read_create_topics(bad, "app"), ask_of, spent
        )
        assert [(t.name, t.error_code) for t in response.topics] == [
            ("seq0", ErrorCode.topic_already_exists),
            ("zero", ErrorCode.invalid_partitions),
            ("fresh-a", ErrorCode.throttling_quota_exceeded),
            ("fresh-b", ErrorCode.throttling_quota_exceeded),
        ]
        assert "fresh-a" not in controller.image.topics_by_name
        assert manager.over_quota(alice, QuotaType.CONTROLLER_MUTATION, now=0.0) == pytest.approx(1.0)  # the 6 only
        gone = topic_wire.read_delete_topics(
            schema.build(codec.request_class(20, 5), topic_names=("seq0", "never-was"), timeout=5000)
        )
        deleted = await admin_requests.delete_topics(codec.response_class(20, 5), gone, ask_of, spent)
        assert [(r.name, r.error_code) for r in deleted.responses] == [
            ("seq0", ErrorCode.throttling_quota_exceeded),
            ("never-was", ErrorCode.unknown_topic_or_partition),
        ]
        assert spent.throttle_s() > 0 and spent.throttle_s() > 0
        assert len(throttles) == 1, "counted once for the request, not per refused topic"
    finally:
        await controller.close()


def test_a_late_give_back_is_never_credit() -> None:
    """A refused topic's charge is given back. Given back after the charge's window was forgotten, it once left a
    negative window that let the client's next topics through uncharged; now it takes off only what the windows
    hold, and a give-back within the window still cancels its charge."""
    quotas = {(("user", "alice"),): {"controller_mutation_rate": 2.0}}
    alice = resolve(quotas, "controller_mutation_rate", "alice", "app")
    assert alice is not None
    manager = ClientQuotas(QuotaWindows(samples=3, window_s=1.0))  # measured over >= 2 s, forgotten after 3 s
    now = [0.0]

    def quota() -> RequestMutations:
        return RequestMutations(manager, alice, user="alice", client_id="app", strict=True, clock=lambda: now[0])

    assert quota().admit(6)
    now[0] = 0.5
    quota().adjust(-6)
    assert manager.over_quota(alice, QuotaType.CONTROLLER_MUTATION, now=0.5) == 0.0, "given back in its window"
    assert quota().admit(4)
    now[0] = 10.0  # the 4's window is long forgotten when they are given back
    quota().adjust(-4)
    assert quota().admit(6)
    assert manager.over_quota(alice, QuotaType.CONTROLLER_MUTATION, now=10.0) == pytest.approx(1.0), (
        "the 6 charged in full: (3/s - 2/s) / 2/s over 2 s"
    )


async def test_a_topic_named_twice_is_refused_once_and_charged_nothing(tmp_path: Path) -> None:
    """DeleteTopics naming (or identifying) a topic twice, or both naming and identifying it: Kafka's controller
    answers INVALID_REQUEST once for it, and it must not be charged twice to the mutation quota (nor at all);
    CreateTopics likewise."""
    controller = await Controller.start(ServerConfig.load(None, [f"log.dirs={tmp_path}"]))
    try:
        await controller.register_broker(1, (Endpoint("PLAINTEXT", "127.0.0.1", 9092),), None)
        ask_of = admin_requests.always(controller)
        setup = topic_wire.read_create_topics(create_topics_request(6, {"twice": 2, "by-id": 2, "once": 1}), "app")
        await admin_requests.create_topics(codec.response_class(19, 6), setup, ask_of, None)
        quotas = {(("user", "alice"),): {"controller_mutation_rate": 0.5}}
        alice = resolve(quotas, "controller_mutation_rate", "alice", "app")
        assert alice is not None
        manager = ClientQuotas(QuotaWindows(3, 1.0))

        def quota() -> RequestMutations:
            return RequestMutations(manager, alice, user="alice", client_id="app", strict=True, clock=lambda: 0.0)

        create_cls = codec.request_class(19, 6)
        twice = schema.build_nested(
            create_cls, "topics", name="new", num_partitions=1, replication_factor=1, assignments=(), configs=()
        )
        create = schema.build(create_cls, topics=(twice, twice), timeout=15_000, validate_only=False)
        created = await admin_requests.create_topics(
            codec.response_class(19, 6), topic_wire.read_create_topics(create, "app"), ask_of, quota()
        )
        assert [(t.name, t.error_code) for t in created.topics] == [("new", ErrorCode.invalid_request)]

        by_name = topic_wire.read_delete_topics(
            schema.build(codec.request_class(20, 5), topic_names=("twice", "twice"), timeout=5000)
        )
        deleted = await admin_requests.delete_topics(codec.response_class(20, 5), by_name, ask_of, quota())
        assert [(r.name, r.error_code, r.error_message) for r in deleted.responses] == [
            ("twice", ErrorCode.invalid_request, "Duplicate topic name.")
        ]
        cls = codec.request_class(20, 6)
        topic_id = controller.image.topics_by_name["by-id"].topic_id
        by_id = topic_wire.read_delete_topics(
            schema.build(
                cls,
                topics=(
                    schema.build_nested(cls, "topics", name=None, topic_id=topic_id),
                    schema.build_nested(cls, "topics", name=None, topic_id=topic_id),
                    schema.build_nested(cls, "topics", name="once", topic_id=uuid_zero),
                ),
                timeout=5000,
            )
        )
        deleted = await admin_requests.delete_topics(codec.response_class(20, 6), by_id, ask_of, quota())
        assert [(r.name, r.error_code, r.error_message) for r in deleted.responses] == [
            (None, ErrorCode.invalid_request, "Duplicate topic id."),
            ("once", ErrorCode.none, None),
        ]
        assert deleted.responses[0].topic_id == topic_id
        # Named in one entry and identified in another: Kafka's controller answers only the name and deletes nothing,
        # so both charges (a permissive quota admits both) are given back.
        separate = ClientQuotas(QuotaWindows(3, 1.0))
        permissive = RequestMutations(separate, alice, user="alice", client_id="app", strict=False, clock=lambda: 0.0)
        both = topic_wire.read_delete_topics(
            schema.build(
                cls,
                topics=(
                    schema.build_nested(cls, "topics", name=None, topic_id=topic_id),
                    schema.build_nested(cls, "topics", name="by-id", topic_id=uuid_zero),
                ),
                timeout=5000,
            )
        )
        deleted = await admin_requests.delete_topics(codec.response_class(20, 6), both, ask_of, permissive)
        assert [(r.name, r.topic_id, r.error_code, r.error_message) for r in deleted.responses] == [
            ("by-id", topic_id, ErrorCode.invalid_request,
             "The provided topic name maps to an ID that was already supplied.")
        ]
        assert separate.over_quota(alice, QuotaType.CONTROLLER_MUTATION, now=0.0) == 0.0
        assert {"twice", "by-id"} <= set(
            controller.image.topics_by_name
        ) and "new" not in controller.image.topics_by_name
        assert manager.over_quota(alice, QuotaType.CONTROLLER_MUTATION, now=0.0) == 0.0, "only once's 1 partition"
    finally:
        await controller.close()
