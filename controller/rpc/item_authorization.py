"""The admin APIs Kafka's controller authorizes item by item, as its ControllerApis does: each topic or config
resource of the request asks its own right, and a refused one is answered with its own error while the others go
on to the controller.

- CreateTopics: CREATE on each topic (unless the caller has CREATE on the cluster, which grants every topic); a
  created topic's settings are shown only with DESCRIBE_CONFIGS on it;
- DeleteTopics: DELETE on each topic (unless DELETE on the cluster); a topic named by id is refused without its
  name unless the caller may DESCRIBE it, so ids cannot be used to learn names;
- CreatePartitions: ALTER on each topic;
- AlterConfigs and IncrementalAlterConfigs: ALTER_CONFIGS on the topic for a TOPIC resource (refused
  TOPIC_AUTHORIZATION_FAILED), ALTER_CONFIGS on the cluster for a BROKER or BROKER_LOGGER one (refused
  CLUSTER_AUTHORIZATION_FAILED).

Pure: each function takes the request as read (``metadata.admin.topic_wire`` and ``config_wire``) and
``allowed``, the caller's check of one operation on one resource (``ControllerAuthorizer.item_check``: it counts and
logs what it refuses), and returns the request with the refused items answered already.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Mapping
from typing import Final

from kio.schema.errors import ErrorCode

from metadata.acl.binding import CLUSTER_NAME, AclOperation, ResourceType
from metadata.admin.config_wire import ConfigAlterations
from metadata.admin.topic_wire import CreateTopicsAsk, DeleteTopicsAsk, PartitionsAsk
from metadata.controller_api import ConfigResource, CreateTopicResult, DeleteTopicResult
from metadata.image import TopicImage

#: May the caller do this operation on this resource (``allowed(operation, resource_type, name)``)?
Allowed = Callable[[AclOperation, ResourceType, str], bool]

#: Kafka's message for a topic CreateTopics refuses.
_AUTHORIZATION_FAILED: Final = "Authorization failed."
_TOPIC_DENIED = ErrorCode.topic_authorization_failed


def create_topics(ask: CreateTopicsAsk, allowed: Allowed) -> CreateTopicsAsk:
    """The topics the caller may not CREATE move to the answered ones, TOPIC_AUTHORIZATION_FAILED."""
    denied = {t.name for t in ask.topics if not allowed(AclOperation.CREATE, ResourceType.TOPIC, t.name)}
    if not denied:
        return ask
    refused = dict(ask.refused)
    refused.update((name, CreateTopicResult(name, None, _TOPIC_DENIED, _AUTHORIZATION_FAILED)) for name in denied)
    return dataclasses.replace(ask, topics=tuple(t for t in ask.topics if t.name not in denied), refused=refused)


def configs_describable(quiet: Allowed) -> Callable[[str], bool]:
    """The created topics whose settings CreateTopics v5+ shows: those the caller may DESCRIBE_CONFIGS (``quiet``:
    its check that neither counts nor logs, ``ControllerAuthorizer.quiet_check``), as Kafka's ControllerApis asks."""
    return lambda name: quiet(AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, name)


def delete_topics(
    ask: DeleteTopicsAsk, allowed: Allowed, topics_by_id: Mapping[uuid.UUID, TopicImage]
) -> DeleteTopicsAsk:
    """The topics the caller may not DELETE move to the answered ones, TOPIC_AUTHORIZATION_FAILED. A topic asked
    by an id this voter does not know goes on (the controller answers it UNKNOWN_TOPIC_ID, as Kafka does)."""
    refused = list(ask.refused)
    names = []
    for name in ask.names:
        if allowed(AclOperation.DELETE, ResourceType.TOPIC, name):
            names.append(name)
        else:
            refused.append(DeleteTopicResult(name, None, _TOPIC_DENIED, _AUTHORIZATION_FAILED))
    ids = []
    for topic_id in ask.ids:
        topic = topics_by_id.get(topic_id)
        if topic is None or allowed(AclOperation.DELETE, ResourceType.TOPIC, topic.name):
            ids.append(topic_id)
            continue
        shown = topic.name if allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, topic.name) else None
        refused.append(DeleteTopicResult(shown, topic_id, _TOPIC_DENIED, _AUTHORIZATION_FAILED))
    return DeleteTopicsAsk(tuple(names), tuple(ids), tuple(refused))


def create_partitions(ask: PartitionsAsk, allowed: Allowed) -> PartitionsAsk:
    """The topics the caller may not ALTER are answered TOPIC_AUTHORIZATION_FAILED."""
    topics = tuple(
        t
        if t.refused is not None or allowed(AclOperation.ALTER, ResourceType.TOPIC, t.topic)
        else dataclasses.replace(t, refused=(_TOPIC_DENIED, _AUTHORIZATION_FAILED))
        for t in ask.topics
    )
    return dataclasses.replace(ask, topics=topics)


def alter_configs(ask: ConfigAlterations, allowed: Allowed) -> ConfigAlterations:
    """Each resource the caller may not ALTER_CONFIGS is answered with the error Kafka's controller gives it."""
    resources = []
    for item in ask.resources:
        refused = item.refused if item.refused is not None else _config_refusal(item.resource, allowed)
        resources.append(item if refused is item.refused else dataclasses.replace(item, refused=refused))
    return dataclasses.replace(ask, resources=tuple(resources))


def _config_refusal(resource: ConfigResource, allowed: Allowed) -> tuple[ErrorCode, str | None] | None:
    op = AclOperation.ALTER_CONFIGS
    if resource.type == ConfigResource.TOPIC:
        return None if allowed(op, ResourceType.TOPIC, resource.name) else (_TOPIC_DENIED, _AUTHORIZATION_FAILED)
    if resource.type in (ConfigResource.BROKER, ConfigResource.BROKER_LOGGER, ConfigResource.CLIENT_METRICS):
        if allowed(op, ResourceType.CLUSTER, CLUSTER_NAME):
            return None
        return ErrorCode.cluster_authorization_failed, _AUTHORIZATION_FAILED
    if resource.type == ConfigResource.GROUP:
        if allowed(op, ResourceType.GROUP, resource.name):
            return None
        return ErrorCode.group_authorization_failed, _AUTHORIZATION_FAILED
    return ErrorCode.invalid_request, f"Unexpected resource type {resource.type}."
