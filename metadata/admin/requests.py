"""Answering the admin APIs against a controller, item by item: the one place that asks and reports failures.

Both a broker (its handlers, with the node's controller client) and a controller voter (its CONTROLLER listener,
with the active controller) answer CreateTopics, DeleteTopics, CreatePartitions, AlterConfigs, ElectLeaders,
IncrementalAlterConfigs, AlterPartitionReassignments, AlterUserScramCredentials, CreateAcls,
DeleteAcls, AlterClientQuotas and UpdateFeatures. They differ only in where the
controller comes from:
``controller_for(what)`` returns it, or raises :class:`~metadata.errors.NotControllerError` when there is none
here (a voter that is not active), which every item it concerns answers as NOT_CONTROLLER so the client retries
elsewhere. Any other failure becomes the item's error code (``metadata.errors``), logged with what it concerns.
The bytes both ways are the ``metadata.admin`` translations' (``topic_wire``, ``config_wire``, ...).

CreateTopics, DeleteTopics and CreatePartitions also take the client's controller mutation quota (KIP-599), a
:class:`MutationQuota`, or None when none applies (no quota set, or a controller answering a broker's forwarded
request: the broker charged the client already). As in Kafka, the quota comes after validation and is checked
and charged before anything is created: every topic of a request is decided at once, with no await in between (so
concurrent requests of one client cannot all pass the check before any is charged), on the partitions it is
predicted to create or delete; the topics admitted go to the controller in one batch, and what it refuses is given
back. A strict quota refuses a topic with THROTTLING_QUOTA_EXCEEDED only when it is already spent before it, so the
topic that crosses the quota still goes through, and every topic after a refused one is refused too. A topic that
fails anyway keeps its own error: the image screens out existing (CreateTopics) and absent (DeleteTopics) topics,
which are not charged, and a throttled topic is validated by the controller (validate only) before it is answered
THROTTLING_QUOTA_EXCEEDED.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Final, Protocol

from kio.schema.errors import ErrorCode

from metadata.admin import acl_wire, config_wire, feature_wire, quota_wire, scram_wire, topic_wire
from metadata.admin.config_wire import ResourceRefused
from metadata.client_quotas import QuotaAlterResult, describe_entity
from metadata.controller_api import (
    AclCreateResult,
    AclDeleteResult,
    ConfigResource,
    ControllerClient,
    CreateTopicResult,
    DeleteTopicResult,
    ElectLeaderResult,
    FeatureUpdateResult,
    NewTopic,
    PartitionReassignment,
    ReassignmentResult,
    ScramAlterResult,
)
from metadata.delegation_tokens import TokenRequest, TokenResult
from metadata.errors import NotControllerError, error_code_for, error_code_logged, error_message_for
from metadata.image import MetadataImage
from wire.log_text import LOG_TEXT_MAX, untrusted

logger = logging.getLogger(__name__)

#: Kafka's message for THROTTLING_QUOTA_EXCEEDED.
THROTTLED: Final = "The throttling quota has been exceeded."


class MutationQuota(Protocol):
    """One request's controller mutation quota (KIP-599), measured by the broker for the request's (user, client id)
    (``broker.quotas.mutations``). A strict quota (the request versions whose clients retry THROTTLING_QUOTA_EXCEEDED)
    refuses what is asked once the quota is spent; a permissive one (older versions) never refuses, it only makes
    the response throttle the client."""

    def admit(self, partitions: int) -> bool:
        """Checks the quota and charges a topic's ``partitions`` in one step: False (nothing charged) when a strict
        quota refuses it; always True for a permissive one."""
        ...

    def adjust(self, partitions: int) -> None:
        """Corrects the charge once the controller answered: negative gives back what a refused topic was charged."""
        ...

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
    # The items' names are the client's: escaped and capped in the log line (wire.log_text).
    logged = tuple(arg if isinstance(arg, int) else untrusted(str(arg), 4 * LOG_TEXT_MAX) for arg in args)
    if code == ErrorCode.unknown_server_error:
        logger.error(failed + ": %s", *logged, untrusted(message, 4 * LOG_TEXT_MAX), exc_info=exc)
    else:
        logger.info(failed + ": %s (%s)", *logged, untrusted(message, 4 * LOG_TEXT_MAX), code.name)
    return code, message


async def create_topics(
    response_cls: type[Any],
    ask: topic_wire.CreateTopicsAsk,
    controller_for: ControllerFor,
    quota: MutationQuota | None = None,
    *,
    default_partitions: int = 1,
    describable: Callable[[str], bool] | None = None,
) -> Any:
    """``default_partitions``: the broker's ``num.partitions``, the charge predicted for a topic that asks for -1
    (corrected by what the controller created). ``describable``: whether the caller may DESCRIBE_CONFIGS a topic
    (``topic_wire.create_topics_response``: the others are answered without their settings)."""
    topics = list(ask.topics)
    created: list[CreateTopicResult] = []
    try:
        controller = controller_for("create topics")
    except Exception as exc:
        code, message = _refusal(exc, "create_topics %s failed", [t.name for t in topics])
        refused = topic_wire.create_topics_refused(topics, code, message)
        return topic_wire.create_topics_response(response_cls, ask, refused)
    charged: dict[str, int] = {}
    throttled: list[NewTopic] = []
    if quota is not None:
        image = controller.image
        for topic in topics:
            if topic.name in image.topics_by_name:
                continue  # refused by the controller as TOPIC_ALREADY_EXISTS, whatever the quota: nothing charged
            partitions = _predicted_partitions(topic, default_partitions)
            if partitions <= 0:
                continue  # refused by the controller as invalid: nothing charged
            if quota.admit(partitions):
                charged[topic.name] = partitions
            else:
                throttled.append(topic)
    refused_names = {t.name for t in throttled}
    asked = [t for t in topics if t.name not in refused_names]
    if asked:
        created.extend(await _ask_create(controller, asked, ask.validate_only))
    if throttled:
        # Kafka validates a topic before it applies the quota: one that would fail anyway gets its own error.
        validated = await _ask_create(controller, throttled, True)
        throttled_result = ErrorCode.throttling_quota_exceeded, THROTTLED
        created.extend(r if r.error != ErrorCode.none else CreateTopicResult(r.name, None, *throttled_result)
                       for r in validated)
    if quota is not None:
        for result in created:
            if result.error == ErrorCode.throttling_quota_exceeded:
                continue
            done = result.num_partitions if result.error == ErrorCode.none else 0
            quota.adjust(done - charged.get(result.name, 0))
    return topic_wire.create_topics_response(response_cls, ask, created, describable)


def _predicted_partitions(topic: NewTopic, default_partitions: int) -> int:
    """The partitions CreateTopics will make of ``topic``, charged before the controller is asked."""
    if topic.assignments:
        return len(topic.assignments)
    return default_partitions if topic.num_partitions == -1 else topic.num_partitions


async def _ask_create(
    controller: ControllerClient, topics: Sequence[NewTopic], validate_only: bool
) -> list[CreateTopicResult]:
    try:
        return await controller.create_topics(topics, validate_only)
    except Exception as exc:
        code, message = _refusal(exc, "create_topics %s failed", [t.name for t in topics])
        return topic_wire.create_topics_refused(topics, code, message)


def _partition_count(image: MetadataImage, name: str | None, topic_id: uuid.UUID | None) -> int:
    """The partitions a topic has now (0 for an unknown one: the controller refuses it, nothing is charged)."""
    if name is not None:
        topic = image.topics_by_name.get(name)
    else:
        topic = None if topic_id is None else image.topics_by_id.get(topic_id)
    return 0 if topic is None else len(topic.partitions)


async def delete_topics(
    response_cls: type[Any],
    ask: topic_wire.DeleteTopicsAsk,
    controller_for: ControllerFor,
    quota: MutationQuota | None = None,
) -> Any:
    asked: list[tuple[str | None, uuid.UUID | None]] = [(n, None) for n in ask.names] + [(None, i) for i in ask.ids]
    deleted: list[DeleteTopicResult] = []
    charged: dict[str | uuid.UUID, int] = {}
    try:
        controller = controller_for("delete topics")
        if quota is not None:
            image = controller.image
            admitted: list[tuple[str | None, uuid.UUID | None]] = []
            for name, topic_id in asked:
                partitions = _partition_count(image, name, topic_id)
                key: str | uuid.UUID | None = name if name is not None else topic_id
                assert key is not None
                if partitions == 0:  # refused by the controller as UNKNOWN_TOPIC_OR_PARTITION: nothing charged
                    admitted.append((name, topic_id))
                elif quota.admit(partitions):
                    charged[key] = partitions
                    admitted.append((name, topic_id))
                else:
                    deleted.extend(topic_wire.delete_topics_refused(
                        [name] if name is not None else [], [topic_id] if topic_id is not None else [],
                        ErrorCode.throttling_quota_exceeded, THROTTLED,
                    ))
            asked = admitted
        names = [n for n, _ in asked if n is not None]
        ids = [i for _, i in asked if i is not None]
        results = await controller.delete_topics(names, ids) if asked else []
    except Exception as exc:
        names = [n for n, _ in asked if n is not None]
        ids = [i for _, i in asked if i is not None]
        code, message = _refusal(exc, "delete_topics %s failed", [*names, *ids])
        results = topic_wire.delete_topics_refused(names, ids, code, message)
    if quota is not None:
        # Refunded: every charge but a deleted topic's, an item the controller leaves unanswered included (the id of
        # a topic also asked by name: neither is deleted, and only the name is answered).
        gone = {key for result in results if result.error == ErrorCode.none for key in (result.name, result.topic_id)}
        for key, partitions in charged.items():
            if key not in gone:
                quota.adjust(-partitions)
    deleted.extend(results)
    return topic_wire.delete_topics_response(response_cls, ask, deleted)


async def create_partitions(
    response_cls: type[Any],
    ask: topic_wire.PartitionsAsk,
    controller_for: ControllerFor,
    quota: MutationQuota | None = None,
) -> Any:
    answers: list[tuple[str, ErrorCode, str | None]] = []
    try:
        controller = controller_for("create partitions")
    except Exception as exc:
        code, message = _refusal(exc, "create_partitions for topics %s failed", [t.topic for t in ask.topics])
        return topic_wire.create_partitions_response(
            response_cls, [(t.topic, *(t.refused or (code, message))) for t in ask.topics]
        )
    # Every topic is checked and charged before the controller is asked about any (Kafka's order).
    charged: dict[int, int] = {}
    throttled: set[int] = set()
    if quota is not None:
        image = controller.image
        for index, topic in enumerate(ask.topics):
            added = topic.count - _partition_count(image, topic.topic, None)
            if topic.refused is not None or added <= 0 or topic.topic not in image.topics_by_name:
                continue  # refused by the controller (or already): nothing charged
            if quota.admit(added):
                charged[index] = added
            else:
                throttled.add(index)
    for index, topic in enumerate(ask.topics):
        outcome = topic.refused
        if outcome is None:
            validate_only = ask.validate_only or index in throttled
            try:
                outcome = await controller.create_partitions(topic.topic, topic.count, topic.assignments,
                                                             validate_only)
            except Exception as exc:
                outcome = _refusal(exc, "create_partitions for topic %s failed", topic.topic)
            if index in throttled and outcome[0] == ErrorCode.none:
                outcome = ErrorCode.throttling_quota_exceeded, THROTTLED
            elif quota is not None and outcome[0] != ErrorCode.none:
                quota.adjust(-charged.get(index, 0))
        answers.append((topic.topic, *outcome))
    return topic_wire.create_partitions_response(response_cls, answers)


async def alter_configs(
    response_cls: type[Any], ask: config_wire.ConfigAlterations, controller_for: ControllerFor, *, broker_id: int
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
                    config_wire.check_broker_resource(resource.name, broker_id)
                outcome = await controller_for("alter configs").alter_configs(
                    resource, item.changes, incremental_ops=item.incremental_ops, validate_only=ask.validate_only
                )
            except ResourceRefused as exc:
                outcome = exc.code, str(exc)
            except NotControllerError as exc:
                outcome = ErrorCode.not_controller, str(exc)
            except Exception as exc:
                code = error_code_logged(exc, logger, "altering configs of resource type %d '%s' failed",
                                         resource.type, untrusted(resource.name))
                outcome = code, error_message_for(exc)
        answers.append((resource, *outcome))
    return config_wire.alter_configs_response(response_cls, answers)


async def elect_leaders(response_cls: type[Any], ask: topic_wire.ElectLeadersAsk, controller_for: ControllerFor) -> Any:
    results: list[ElectLeaderResult]
    try:
        results = await controller_for("elect leaders").elect_leaders(ask.partitions, ask.election_type)
    except Exception as exc:
        what = "all partitions" if ask.partitions is None else f"{len(ask.partitions)} partitions"
        code, message = _refusal(exc, "electing leaders of %s failed", what)
        refused = topic_wire.elect_leaders_refused(ask, code, message)
        return topic_wire.elect_leaders_response(response_cls, refused, code)
    return topic_wire.elect_leaders_response(response_cls, results)


async def alter_partition_reassignments(
    response_cls: type[Any],
    asked: Sequence[PartitionReassignment],
    controller_for: ControllerFor,
    *,
    refused: Sequence[ReassignmentResult] = (),
) -> Any:
    """``refused``: items already answered with an error at the edge, answered beside the controller's results."""
    results: list[ReassignmentResult] = []
    if asked or not refused:
        try:
            results = await controller_for("reassign partitions").alter_partition_reassignments(asked)
        except Exception as exc:
            code, message = _refusal(exc, "reassigning %d partitions failed", len(asked))
            results = topic_wire.reassignments_refused(asked, code, message)
    return topic_wire.alter_partition_reassignments_response(response_cls, [*results, *refused])


async def alter_user_scram_credentials(response_cls: type[Any], request: Any, controller_for: ControllerFor) -> Any:
    deletions, upsertions = scram_wire.read_alter_user_scram_credentials(request)
    results: list[ScramAlterResult] = []
    if deletions or upsertions:
        try:
            results = await controller_for("alter SCRAM credentials").alter_user_scram_credentials(deletions,
                                                                                                    upsertions)
        except Exception as exc:
            users = sorted({*(d.name for d in deletions), *(u.name for u in upsertions)})
            code, message = _refusal(exc, "altering the SCRAM credentials of users %s failed", users)
            results = scram_wire.scram_results_refused(deletions, upsertions, code, message)
    return scram_wire.alter_user_scram_credentials_response(response_cls, results)


async def change_delegation_token(request: TokenRequest, controller_for: ControllerFor) -> TokenResult:
    """Create, Renew or ExpireDelegationToken at the controller; a failure to ask it is the request's error."""
    try:
        return await controller_for(f"{request.kind} a delegation token").change_delegation_token(request)
    except Exception as exc:
        code, _ = _refusal(exc, "%s of a delegation token asked by %s failed", request.kind, request.requester)
        return TokenResult(code)


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
    alterations, validate_only = quota_wire.read_alter_client_quotas(request)
    results: list[QuotaAlterResult] = []
    if alterations:
        try:
            results = await controller_for("alter client quotas").alter_client_quotas(alterations, validate_only)
        except Exception as exc:
            code, message = _refusal(exc, "altering the client quotas of %s failed",
                                     [describe_entity(a.entity) for a in alterations])
            results = quota_wire.alter_client_quotas_refused(alterations, code, message)
    return quota_wire.alter_client_quotas_response(response_cls, results)


async def update_features(response_cls: type[Any], request: Any, version: int, controller_for: ControllerFor) -> Any:
    updates, validate_only = feature_wire.read_update_features(request, version)
    results: list[FeatureUpdateResult] = []
    if updates:
        try:
            results = await controller_for("update features").update_features(updates, validate_only)
        except Exception as exc:
            code, message = _refusal(exc, "updating features %s failed", [u.feature for u in updates])
            results = feature_wire.update_features_refused(updates, code, message)
    return feature_wire.update_features_response(response_cls, results)
