"""The admin APIs brokers forward to the CONTROLLER listener, asked of the active controller.

They are read and answered through ``metadata.admin``'s translations, the ones the broker's handlers use too, so a
request answers the same item for item whether a client sent it to a broker or a broker forwarded it here. Only
the party asked differs: here it is the active `Controller`, and a voter that is not active answers NOT_CONTROLLER
on every topic, resource or partition, which the forwarding broker reads as "try the next voter". A caller without
the API's right is answered CLUSTER_AUTHORIZATION_FAILED on every item, through the same per-item answers.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from controller.controller import Controller
from controller.rpc import item_authorization
from controller.rpc.protocol_error import ControllerProtocolError
from controller.rpc.served_quorum import ServedQuorum
from metadata.admin import config_wire, topic_wire
from metadata.admin import requests as admin_requests
from metadata.controller_api import ConfigResource
from metadata.errors import ControllerError
from metadata.rpc import kafka_apis

#: The admin APIs brokers forward (:func:`answer_admin`), answered item by item.
ADMIN_APIS = frozenset(
    {
        kafka_apis.CREATE_TOPICS,
        kafka_apis.DELETE_TOPICS,
        kafka_apis.CREATE_PARTITIONS,
        kafka_apis.ALTER_CONFIGS,
        kafka_apis.INCREMENTAL_ALTER_CONFIGS,
        kafka_apis.ELECT_LEADERS,
        kafka_apis.ALTER_PARTITION_REASSIGNMENTS,
        kafka_apis.ALTER_USER_SCRAM_CREDENTIALS,
        kafka_apis.CREATE_ACLS,
        kafka_apis.DELETE_ACLS,
        kafka_apis.ALTER_CLIENT_QUOTAS,
        kafka_apis.UPDATE_FEATURES,
    }
)


async def answer_admin(
    quorum: ServedQuorum,
    api_key: int,
    response_cls: type[Any],
    request: Any,
    *,
    refusal: str | None,
    check: item_authorization.Allowed | None,
    quiet: item_authorization.Allowed | None = None,
) -> Any:
    """The admin APIs brokers forward, asked of the active controller (NOT_CONTROLLER per item elsewhere). A
    ``refusal`` (the caller lacks the right) answers every item CLUSTER_AUTHORIZATION_FAILED instead, through
    the same per-item answers; ``check``: the caller's right on each item, for the APIs decided item by item
    (its refused items are answered before the controller is asked about the others); ``quiet``: its right
    where lacking one only leaves something out of the answer (None: every right)."""
    body = request.body
    active: admin_requests.ControllerFor = quorum.active_controller
    if refusal is not None:
        active = _refuse_with(refusal)
    if api_key == kafka_apis.CREATE_TOPICS:
        topics = topic_wire.read_create_topics(body, request.client_id)
        if check is not None:
            topics = item_authorization.create_topics(topics, check)
        describable = None if quiet is None else item_authorization.configs_describable(quiet)
        return await admin_requests.create_topics(response_cls, topics, active, describable=describable)
    if api_key == kafka_apis.DELETE_TOPICS:
        deletions = topic_wire.read_delete_topics(body)
        if check is not None:
            deletions = item_authorization.delete_topics(deletions, check, quorum.image.topics_by_id)
        return await admin_requests.delete_topics(response_cls, deletions, active)
    if api_key == kafka_apis.CREATE_PARTITIONS:
        partitions = topic_wire.read_create_partitions(body)
        if check is not None:
            partitions = item_authorization.create_partitions(partitions, check)
        return await admin_requests.create_partitions(response_cls, partitions, active)
    if api_key in (kafka_apis.ALTER_CONFIGS, kafka_apis.INCREMENTAL_ALTER_CONFIGS):
        ask = (
            config_wire.read_alter_configs(body)
            if api_key == kafka_apis.ALTER_CONFIGS
            else config_wire.read_incremental_alter_configs(body)
        )
        if check is not None:
            ask = item_authorization.alter_configs(ask, check)
        # The forwarding broker checked that a broker resource names itself; a request naming one broker is
        # therefore checked against that broker here (anything else against this voter's own id).
        named = {
            item.resource.name
            for item in ask.resources
            if item.resource.type == ConfigResource.BROKER and item.resource.name.isdigit()
        }
        broker_id = int(named.pop()) if len(named) == 1 else quorum.node_id
        return await admin_requests.alter_configs(response_cls, ask, active, broker_id=broker_id)
    if api_key == kafka_apis.ELECT_LEADERS:
        return await admin_requests.elect_leaders(response_cls, topic_wire.read_elect_leaders(body), active)
    if api_key == kafka_apis.ALTER_PARTITION_REASSIGNMENTS:
        asked = topic_wire.read_alter_partition_reassignments(body)
        return await admin_requests.alter_partition_reassignments(response_cls, asked, active)
    if api_key == kafka_apis.ALTER_USER_SCRAM_CREDENTIALS:
        return await admin_requests.alter_user_scram_credentials(response_cls, body, active)
    if api_key in (kafka_apis.CREATE_ACLS, kafka_apis.DELETE_ACLS):
        answer = admin_requests.create_acls if api_key == kafka_apis.CREATE_ACLS else admin_requests.delete_acls
        return await answer(response_cls, body, active)
    if api_key == kafka_apis.ALTER_CLIENT_QUOTAS:
        return await admin_requests.alter_client_quotas(response_cls, body, active)
    if api_key == kafka_apis.UPDATE_FEATURES:
        return await admin_requests.update_features(response_cls, body, request.api_version, active)
    raise ControllerProtocolError(f"api key {api_key} is listed as served on the controller listener but has no answer")


def _refuse_with(refusal: str) -> admin_requests.ControllerFor:
    """A ``controller_for`` that refuses every item of an admin request with CLUSTER_AUTHORIZATION_FAILED."""

    def refuse(_what: str) -> Controller:
        raise ControllerError(ErrorCode.cluster_authorization_failed, refusal)

    return refuse
