"""Altering client quotas (issue 13) below the wire: the controller's validation of an alteration, the metadata image
that keeps them and snapshots them, a broker of a quorum altering them through the active controller (in-process
voters), and the ACL checks on AlterClientQuotas/DescribeClientQuotas (on the dispatcher's guard).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from kio.schema.errors import ErrorCode

from broker.authorization import BrokerAuthorizer
from broker.handlers.context import RequestContext
from broker.handlers.table import serve_authorized
from broker.services import BrokerServices
from controller.quorum import QuorumController
from metadata.client_quotas import QuotaAlteration, plan_alter_client_quotas
from metadata.cluster_records import ClientQuotaRecord
from metadata.image import MetadataImage
from node.controller_handle import start_quorum_client
from settings.security import STANDARD_AUTHORIZER
from settings.server import ServerConfig
from tests.broker.quota_wire import Entity
from tests.quorum_fixtures import active_voter
from wire import codec, schema


def test_alterations_are_validated() -> None:
    def refusal(entity: Entity, ops: dict[str, float | None]) -> str | None:
        plan = plan_alter_client_quotas({}, [QuotaAlteration(tuple(entity), tuple(ops.items()))])
        result = plan.results[0]
        assert (result.error is ErrorCode.none) == (result.message is None)
        return result.message

    assert refusal([("user", "alice")], {"producer_byte_rate": 1024.0}) is None
    assert refusal([("user", None), ("client-id", "c")], {"request_percentage": 12.5}) is None
    assert "Invalid configuration key unknown_rate" in (refusal([("user", "a")], {"unknown_rate": 1.0}) or "")
    assert refusal([("user", "a")], {"producer_byte_rate": 1.5}) == "producer_byte_rate cannot be a fractional value."
    assert "greater than 0" in (refusal([("user", "a")], {"consumer_byte_rate": -1.0}) or "")
    assert "finite" in (refusal([("user", "a")], {"request_percentage": float("inf")}) or "")
    assert refusal([("user", "a")], {"controller_mutation_rate": 2.5}) is None  # partitions/s, not whole (KIP-599)
    assert "empty" in (refusal([], {"producer_byte_rate": 1.0}) or "")
    assert "Duplicate entity type" in (refusal([("user", "a"), ("user", "b")], {"producer_byte_rate": 1.0}) or "")
    assert "IP entity" in (refusal([("ip", "1.2.3.4"), ("user", "a")], {"producer_byte_rate": 1.0}) or "")
    assert "Unhandled client quota entity type: group" in (refusal([("group", "g")], {"producer_byte_rate": 1.0}) or "")
    # Kafka's keys by entity type (ClientQuotaControlManager.configKeysForEntityType): an ip entity takes
    # connection_creation_rate alone (which Fjord refuses: it does not apply it), a user or client-id entity never.
    for ip in ("10.0.0.1", "::1", None):
        assert refusal([("ip", ip)], {"producer_byte_rate": 1.0}) == "Invalid configuration key producer_byte_rate"
        assert "Fjord does not apply" in (refusal([("ip", ip)], {"connection_creation_rate": 5.0}) or "")
    assert refusal([("user", "a")], {"connection_creation_rate": 5.0}) == (
        "Invalid configuration key connection_creation_rate")
    assert refusal([("ip", "10.0.0.1")], {"connection_creation_rate": 0.5}) == (
        "connection_creation_rate cannot be a fractional value.")
    assert refusal([("user", "a")], {"consumer_byte_rate": float("inf")}) == (
        "Proposed value for consumer_byte_rate is too large for a LONG.")
    assert refusal([("ip", "10.0.0.1")], {"connection_creation_rate": 2.0**31}) == (
        "Proposed value for connection_creation_rate is too large for an INT.")
    # An empty name is no entity (None is the default one); an ip entity names an IP (Fjord resolves no host name).
    assert refusal([("user", "")], {"producer_byte_rate": 1.0}) == "Empty user not supported"
    assert refusal([("client-id", "")], {"producer_byte_rate": 1.0}) == "Empty client-id not supported"
    assert refusal([("ip", "")], {"connection_creation_rate": 1.0}) == "Empty ip not supported"
    assert refusal([("ip", "not an ip")], {"connection_creation_rate": 1.0}) == (
        "not an ip is not a valid IP or resolvable host.")
    assert refusal([("ip", "10.0.0.300")], {}) == "10.0.0.300 is not a valid IP or resolvable host."
    # A removal is not validated: removing a key that is not set, even one no entity takes, is a success.
    assert refusal([("user", "a")], {"unknown_rate": None, "connection_creation_rate": None}) is None
    assert refusal([("ip", "10.0.0.1")], {"producer_byte_rate": None}) is None


def test_an_alteration_writes_only_what_changes() -> None:
    alice = (("user", "alice"),)
    current = {alice: {"producer_byte_rate": 1024.0}}
    same = plan_alter_client_quotas(current, [QuotaAlteration(alice, (("producer_byte_rate", 1024.0),))])
    assert (same.records, same.results[0].error) == ([], ErrorCode.none)
    unset = plan_alter_client_quotas(current, [QuotaAlteration(alice, (("consumer_byte_rate", None),))])
    assert (unset.records, unset.results[0].error) == ([], ErrorCode.none)


def test_image_keeps_quotas_and_snapshots_them() -> None:
    entity = (("client-id", None), ("user", "alice"))
    image = MetadataImage("cluster").apply(
        [
            ClientQuotaRecord(entity, "producer_byte_rate", 1024.0),
            ClientQuotaRecord(entity, "request_percentage", 25.0),
            ClientQuotaRecord((("user", "bob"),), "consumer_byte_rate", 10.0),
            ClientQuotaRecord((("user", "bob"),), "consumer_byte_rate", 0.0, remove=True),
        ],
        3,
    )
    assert image.client_quotas == {entity: {"producer_byte_rate": 1024.0, "request_percentage": 25.0}}
    rebuilt = MetadataImage("cluster").apply(image.to_records(), 3)
    assert rebuilt.client_quotas == image.client_quotas


async def test_a_broker_of_a_quorum_alters_quotas_through_the_active_controller(
    voters: list[QuorumController], tmp_path: Path
) -> None:
    """The multi-process path, in this process: a broker's remote controller client forwards AlterClientQuotas to
    the active voter over the CONTROLLER listener, and sees the result in its own replica of the image."""
    await active_voter(voters)
    broker = ServerConfig.from_properties(
        {
            "process.roles": "broker",
            "node.id": "7",
            "controller.quorum.voters": ",".join(voters[0].config.value("controller.quorum.voters")),
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "controller.listener.names": "CONTROLLER",
            "log.dirs": str(tmp_path / "broker"),
            "s3.data.buckets": f"0@file://{tmp_path / 'objects'}",
        }
    )
    client = await start_quorum_client(broker, catch_up_timeout_s=20)
    try:
        alice = (("user", "alice"),)
        results = await client.alter_client_quotas(
            [
                QuotaAlteration(alice, (("producer_byte_rate", 1024.0),)),
                QuotaAlteration((("user", "bob"),), (("nonsense", 1.0),)),
            ],
            validate_only=False,
        )
        assert [r.error for r in results] == [ErrorCode.none, ErrorCode.invalid_request]
        assert "nonsense" in (results[1].message or "")
        assert client.image.client_quotas == {alice: {"producer_byte_rate": 1024.0}}
    finally:
        await client.close()


async def test_quota_apis_need_cluster_describe_configs_and_alter_configs() -> None:
    """Kafka's checks: DescribeClientQuotas needs DESCRIBE_CONFIGS and AlterClientQuotas ALTER_CONFIGS on the
    cluster; refused, the handler never runs and every entry carries CLUSTER_AUTHORIZATION_FAILED."""
    settings: dict[str, object] = {"authorizer.class.name": STANDARD_AUTHORIZER}
    authorizer = BrokerAuthorizer(settings.get, dict)  # no binding: nothing is allowed

    async def never(_ctx: RequestContext, _request: Any) -> Any:
        raise AssertionError("the handler ran without the ACL")

    def context(api_key: int) -> RequestContext:
        return RequestContext(
            api_key=api_key,
            api_version=1,
            correlation_id=1,
            client_id="quota-acl",
            client_host="127.0.0.1",
            broker=cast(BrokerServices, None),
            authorizer=authorizer,
        )

    describe = await serve_authorized(context(48), schema.build(codec.request_class(48, 1), components=()), never)
    assert describe.error_code == ErrorCode.cluster_authorization_failed
    alter_cls = codec.request_class(49, 1)
    entry = schema.build_nested(
        alter_cls,
        "entries",
        entity=(
            schema.build_nested(
                schema.field_entity(alter_cls, "entries"), "entity", entity_type="user", entity_name="alice"
            ),
        ),
        ops=(),
    )
    altered = await serve_authorized(context(49), schema.build(alter_cls, entries=(entry,)), never)
    assert [(e.error_code, [(x.entity_type, x.entity_name) for x in e.entity]) for e in altered.entries] == [
        (ErrorCode.cluster_authorization_failed, [("user", "alice")])
    ]
