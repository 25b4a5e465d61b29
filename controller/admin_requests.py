"""Answering the admin APIs against a controller, item by item: the one place that asks and reports failures.

Both a broker (its handlers, with the node's controller client) and a controller voter (its CONTROLLER listener,
with the active controller) answer CreateTopics, DeleteTopics, CreatePartitions, AlterConfigs, ElectLeaders,
IncrementalAlterConfigs, AlterPartitionReassignments, AlterUserScramCredentials, CreateAcls,
DeleteAcls and AlterClientQuotas. They differ only in where the
controller comes from:
``controller_for(what)`` returns it, or raises :class:`~controller.errors.NotControllerError` when there is none
here (a voter that is not active), which every item it concerns answers as NOT_CONTROLLER so the client retries
elsewhere. Any other failure becomes the item's error code (``controller.errors``), logged with what it concerns.
The bytes both ways are ``controller.admin_wire``'s.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from controller import acl_wire, admin_wire, client_quota_wire
from controller.admin_wire import ResourceRefused
from controller.api import (
    AclCreateResult,
    AclDeleteResult,
    ConfigResource,
    ControllerClient,
    CreateTopicResult,
    DeleteTopicResult,
    ElectLeaderResult,
    PartitionReassignment,
    ReassignmentResult,
    ScramAlterResult,
)
from controller.client_quotas import QuotaAlterResult, describe_entity
from controller.errors import NotControllerError, error_code_for, error_code_logged, error_message_for

logger = logging.getLogger(__name__)

#: The controller to ask, given what is being done (for the NOT_CONTROLLER message); raises NotControllerError.
ControllerFor = Callable[[str], ControllerClient]


def always(client: ControllerClient) -> ControllerFor:
    """A broker's ``controller_for``: its controller client, whatever is asked (the client itself finds the
    active controller of a quorum)."""
    return lambda _what: client


def _refusal(exc: Exception, failed: str, *args: object) -> tuple[ErrorCode, str]:
    """The (code, message) an item gets when asking the controller about it failed. A refusal with a Kafka code of
    its own (a ControllerError: an unknown election type, say) is one info line; only a failure that becomes
    UNKNOWN_SERVER_ERROR is logged with its traceback, as ``error_code_logged`` does."""
    if isinstance(exc, NotControllerError):
        return ErrorCode.not_controller, str(exc)
    code = error_code_for(exc)
    message = error_message_for(exc)
    if code == ErrorCode.unknown_server_error:
        logger.error(failed + ": %s", *args, message, exc_info=exc)
    else:
        logger.info(failed + ": %s (%s)", *args, message, code.name)
    return code, message


async def create_topics(response_cls: type[Any], ask: admin_wire.CreateTopicsAsk, controller_for: ControllerFor) -> Any:
    created: list[CreateTopicResult] = []
    if ask.topics:
        try:
            created = await controller_for("create topics").create_topics(ask.topics, ask.validate_only)
        except Exception as exc:
            code, message = _refusal(exc, "create_topics %s failed", [t.name for t in ask.topics])
            created = admin_wire.create_topics_refused(ask.topics, code, message)
    return admin_wire.create_topics_response(response_cls, ask, created)


async def delete_topics(response_cls: type[Any], ask: admin_wire.DeleteTopicsAsk, controller_for: ControllerFor) -> Any:
    deleted: list[DeleteTopicResult] = []
    if ask.names or ask.ids:
        try:
            deleted = await controller_for("delete topics").delete_topics(ask.names, ask.ids)
        except Exception as exc:
            code, message = _refusal(exc, "delete_topics %s failed", [*ask.names, *ask.ids])
            deleted = admin_wire.delete_topics_refused(ask.names, ask.ids, code, message)
    return admin_wire.delete_topics_response(response_cls, ask, deleted)


async def create_partitions(
    response_cls: type[Any], ask: admin_wire.PartitionsAsk, controller_for: ControllerFor
) -> Any:
    answers: list[tuple[str, ErrorCode, str | None]] = []
    for topic in ask.topics:
        outcome = topic.refused
        if outcome is None:
            try:
                outcome = await controller_for(f"create partitions of {topic.topic}").create_partitions(
                    topic.topic, topic.count, topic.assignments, ask.validate_only
                )
            except Exception as exc:
                outcome = _refusal(exc, "create_partitions for topic %s failed", topic.topic)
        answers.append((topic.topic, *outcome))
    return admin_wire.create_partitions_response(response_cls, answers)


async def alter_configs(
    response_cls: type[Any], ask: admin_wire.ConfigAlterations, controller_for: ControllerFor, *, broker_id: int
) -> Any:
    """``broker_id``: the only broker whose resource may be altered here (a broker's own configs are asked of
    that broker, as Kafka's admin clients do); the cluster-wide default ("") may be altered anywhere."""
    answers: list[tuple[ConfigResource, ErrorCode, str | None]] = []
    for item in ask.resources:
        resource = item.resource
        outcome = item.refused
        if outcome is None:
            try:
                if resource.type == ConfigResource.BROKER:
                    admin_wire.check_broker_resource(resource.name, broker_id)
                outcome = await controller_for("alter configs").alter_configs(
                    resource, item.changes, incremental_ops=item.incremental_ops, validate_only=ask.validate_only
                )
            except ResourceRefused as exc:
                outcome = exc.code, str(exc)
            except NotControllerError as exc:
                outcome = ErrorCode.not_controller, str(exc)
            except Exception as exc:
                code = error_code_logged(exc, logger, "altering configs of resource type %d %r failed",
                                         resource.type, resource.name)
                outcome = code, error_message_for(exc)
        answers.append((resource, *outcome))
    return admin_wire.alter_configs_response(response_cls, answers)


async def elect_leaders(response_cls: type[Any], ask: admin_wire.ElectLeadersAsk, controller_for: ControllerFor) -> Any:
    results: list[ElectLeaderResult]
    try:
        results = await controller_for("elect leaders").elect_leaders(ask.partitions, ask.election_type)
    except Exception as exc:
        what = "all partitions" if ask.partitions is None else f"{len(ask.partitions)} partitions"
        code, message = _refusal(exc, "electing leaders of %s failed", what)
        refused = admin_wire.elect_leaders_refused(ask, code, message)
        return admin_wire.elect_leaders_response(response_cls, refused, code)
    return admin_wire.elect_leaders_response(response_cls, results)


async def alter_partition_reassignments(
    response_cls: type[Any], asked: Sequence[PartitionReassignment], controller_for: ControllerFor
) -> Any:
    results: list[ReassignmentResult]
    try:
        results = await controller_for("reassign partitions").alter_partition_reassignments(asked)
    except Exception as exc:
        code, message = _refusal(exc, "reassigning %d partitions failed", len(asked))
        results = admin_wire.reassignments_refused(asked, code, message)
    return admin_wire.alter_partition_reassignments_response(response_cls, results)


async def alter_user_scram_credentials(response_cls: type[Any], request: Any, controller_for: ControllerFor) -> Any:
    deletions, upsertions = admin_wire.read_alter_user_scram_credentials(request)
    results: list[ScramAlterResult] = []
    if deletions or upsertions:
        try:
            results = await controller_for("alter SCRAM credentials").alter_user_scram_credentials(deletions,
                                                                                                    upsertions)
        except Exception as exc:
            users = sorted({*(d.name for d in deletions), *(u.name for u in upsertions)})
            code, message = _refusal(exc, "altering the SCRAM credentials of users %s failed", users)
            results = admin_wire.scram_results_refused(deletions, upsertions, code, message)
    return admin_wire.alter_user_scram_credentials_response(response_cls, results)


async def create_acls(response_cls: type[Any], request: Any, controller_for: ControllerFor) -> Any:
    bindings = acl_wire.read_create_acls(request)
    results: list[AclCreateResult] = []
    if bindings:
        try:
            results = await controller_for("create ACLs").create_acls(bindings)
        except Exception as exc:
            code, message = _refusal(exc, "creating ACLs %s failed", [b.describe() for b in bindings])
            results = acl_wire.create_acls_refused(bindings, code, message)
    return acl_wire.create_acls_response(response_cls, results)


async def delete_acls(response_cls: type[Any], request: Any, controller_for: ControllerFor) -> Any:
    filters = acl_wire.read_delete_acls(request)
    results: list[AclDeleteResult] = []
    if filters:
        try:
            results = await controller_for("delete ACLs").delete_acls(filters)
        except Exception as exc:
            code, message = _refusal(exc, "deleting ACLs matching %s failed", filters)
            results = acl_wire.delete_acls_refused(filters, code, message)
    return acl_wire.delete_acls_response(response_cls, results)


async def alter_client_quotas(response_cls: type[Any], request: Any, controller_for: ControllerFor) -> Any:
    alterations, validate_only = client_quota_wire.read_alter_client_quotas(request)
    results: list[QuotaAlterResult] = []
    if alterations:
        try:
            results = await controller_for("alter client quotas").alter_client_quotas(alterations, validate_only)
        except Exception as exc:
            code, message = _refusal(exc, "altering the client quotas of %s failed",
                                     [describe_entity(a.entity) for a in alterations])
            results = client_quota_wire.alter_client_quotas_refused(alterations, code, message)
    return client_quota_wire.alter_client_quotas_response(response_cls, results)
