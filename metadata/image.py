"""The metadata image: an immutable snapshot of topics, partitions, brokers and configs (DESIGN.md §8).

An image is built by replaying metadata records; applying a batch returns a new image and leaves the old one
untouched, so readers (request handlers, listeners comparing old and new) never see a half-applied batch and need no
locks. Only the maps a batch touches are copied. Stream/object/KV records are not part of this image: the stream
metadata replays them (``storage.metadata``), and :func:`is_cluster_record` tells the two apart.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from metadata.acl.binding import AclBinding, operation, pattern_type, permission, resource_type
from metadata.client_quotas import QuotaEntity
from metadata.cluster_records import (
    CLUSTER_RECORD_TYPES,
    AccessControlEntryRecord,
    BrokerRegistrationChangeRecord,
    ClientQuotaRecord,
    ConfigRecord,
    DelegationTokenRecord,
    FeatureLevelRecord,
    FenceBrokerRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveAccessControlEntryRecord,
    RemoveDelegationTokenRecord,
    RemoveTopicRecord,
    RemoveUserScramCredentialRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    UserScramCredentialRecord,
    WALFailoverDoneRecord,
    WALFailoverRecord,
)
from metadata.delegation_tokens import DelegationToken
from settings.config_resources import RESOURCE_BROKER, RESOURCE_CLIENT_METRICS, RESOURCE_GROUP, RESOURCE_TOPIC
from settings.endpoint import Endpoint
from storage.metadata.record_codec import MetadataRecord
from wire.api_versions import FEATURES_BY_NAME, METADATA_VERSION
from wire.sasl.scram import ScramCredential

__all__ = [
    "BrokerImage",
    "Endpoint",
    "MetadataImage",
    "PartitionImage",
    "ProducerIdsImage",
    "TopicImage",
    "WALFailoverImage",
    "is_cluster_record",
]

logger = logging.getLogger(__name__)

_EMPTY: Mapping[Any, Any] = MappingProxyType({})


def _frozen(values: dict[Any, Any]) -> Mapping[Any, Any]:
    return MappingProxyType(values)


@dataclass(frozen=True, slots=True)
class PartitionImage:
    topic_id: uuid.UUID
    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int  # -1: no leader
    leader_epoch: int
    partition_epoch: int
    #: Non-empty while a reassignment moves the partition away from these brokers to ``replicas`` (which then has
    #: no leader until the source closed its streams or the election timer fired; DESIGN §9).
    removing_replicas: tuple[int, ...] = ()

    @property
    def reassigning(self) -> bool:
        return bool(self.removing_replicas)

    @property
    def holder(self) -> int:
        """The broker that leads the partition or is receiving it (a reassignment's target): whom the
        balancer and controlled shutdown count it for, so a move in flight is not planned twice."""
        return self.replicas[0] if self.reassigning and self.replicas else self.leader


@dataclass(frozen=True, slots=True)
class TopicImage:
    name: str
    topic_id: uuid.UUID
    partitions: Mapping[int, PartitionImage] = field(default_factory=lambda: _EMPTY)
    configs: Mapping[str, str] = field(default_factory=lambda: _EMPTY)  # only explicitly set topic configs


@dataclass(frozen=True, slots=True)
class BrokerImage:
    node_id: int
    epoch: int
    listeners: tuple[Endpoint, ...]
    rack: str | None
    fenced: bool
    #: Asked for a controlled shutdown (``controller.decisions.controlled_shutdown``): serving, but given no leadership.
    in_controlled_shutdown: bool = False


@dataclass(frozen=True, slots=True)
class WALFailoverImage:
    """The latest WAL failover of a broker (see ``metadata.cluster_records.WALFailoverRecord``); ``done`` once the
    target reported it finished. Kept after it is done so a resumed zombie of that incarnation stays fenced."""

    node_id: int
    node_epoch: int
    target_id: int  # -1: waiting for a live broker
    target_epoch: int
    attempt: int
    done: bool = False

    @property
    def pending(self) -> bool:
        return not self.done

    def delegated_to(self, node_id: int, node_epoch: int) -> bool:
        """Whether this (pending) failover is assigned to broker ``node_id`` at registration ``node_epoch``."""
        return not self.done and self.target_id == node_id and self.target_epoch == node_epoch


@dataclass(frozen=True, slots=True)
class ProducerIdsImage:
    """The last producer id block handed out (``metadata.cluster_records.ProducerIdsRecord``): every id below
    ``next_producer_id`` belongs to some broker's block, the next block starts at it."""

    broker_id: int = -1
    broker_epoch: int = -1
    next_producer_id: int = 0


def is_cluster_record(record: object) -> bool:
    """True for the records this image applies; the rest belong to the stream metadata."""
    return isinstance(record, CLUSTER_RECORD_TYPES)


@dataclass(frozen=True, slots=True)
class MetadataImage:
    cluster_id: str
    offset: int = -1  # offset of the last applied metadata log record (of any kind); -1 for an empty log
    topics_by_name: Mapping[str, TopicImage] = field(default_factory=lambda: _EMPTY)
    topics_by_id: Mapping[uuid.UUID, TopicImage] = field(default_factory=lambda: _EMPTY)
    brokers: Mapping[int, BrokerImage] = field(default_factory=lambda: _EMPTY)
    broker_configs: Mapping[str, str] = field(default_factory=lambda: _EMPTY)  # dynamic cluster-wide configs
    controller_id: int = -1
    # Dynamic per-broker configs (ConfigRecord with a node id as resource name): node id -> key -> value.
    node_configs: Mapping[int, Mapping[str, str]] = field(default_factory=lambda: _EMPTY)
    # The latest WAL failover of each broker whose S3 WAL another broker replays (or replayed) after it died.
    wal_failovers: Mapping[int, WALFailoverImage] = field(default_factory=lambda: _EMPTY)
    producer_ids: ProducerIdsImage = ProducerIdsImage()
    #: SCRAM credentials: user -> mechanism id (1 SCRAM-SHA-256, 2 SCRAM-SHA-512) -> salted keys, never a password.
    scram_credentials: Mapping[str, Mapping[int, ScramCredential]] = field(default_factory=lambda: _EMPTY)
    #: Delegation tokens by token id (``metadata.delegation_tokens``), as the controller issued them.
    delegation_tokens: Mapping[str, DelegationToken] = field(default_factory=lambda: _EMPTY)
    #: ACL bindings by id (``metadata.acl``), as AccessControlEntryRecords made them.
    acls: Mapping[str, AclBinding] = field(default_factory=lambda: _EMPTY)
    #: Client quotas (``metadata.client_quotas``): entity -> quota key -> value.
    client_quotas: Mapping[QuotaEntity, Mapping[str, float]] = field(default_factory=lambda: _EMPTY)
    #: KIP-714 client-metrics subscriptions (``settings.client_metrics``): subscription name -> key -> value.
    client_metrics: Mapping[str, Mapping[str, str]] = field(default_factory=lambda: _EMPTY)
    #: Groups' dynamic configs (GROUP resources, ``settings.group_configs``): group id -> key -> value.
    group_configs: Mapping[str, Mapping[str, str]] = field(default_factory=lambda: _EMPTY)
    #: KIP-584 finalized feature levels as FeatureLevelRecords set them (``controller.decisions.features``); empty
    #: until a cluster first finalizes its features, and then the defaults of ``wire.api_versions.FEATURES`` apply.
    features: Mapping[str, int] = field(default_factory=lambda: _EMPTY)

    @property
    def features_finalized(self) -> bool:
        """Whether the cluster's levels are records (else the software's defaults are in force)."""
        return METADATA_VERSION.name in self.features

    def feature_level(self, name: str) -> int:
        """The finalized level of feature ``name`` (0: off or unknown), e.g. ``transaction.version`` 2 for
        transactions v2 or ``group.version`` 1 for the KIP-848 consumer protocol."""
        if self.features_finalized:
            return self.features.get(name, 0)
        feature = FEATURES_BY_NAME.get(name)
        return 0 if feature is None else feature.finalized_level

    def finalized_features(self) -> dict[str, int]:
        """Every feature at a level above 0, as ApiVersions reports them."""
        levels = {f: self.feature_level(f) for f in FEATURES_BY_NAME}
        levels.update((name, level) for name, level in self.features.items() if name not in levels)
        return {name: level for name, level in sorted(levels.items()) if level > 0}

    def scram_credential(self, user: str, mechanism: int) -> ScramCredential | None:
        return self.scram_credentials.get(user, _EMPTY).get(mechanism)

    def partition(self, topic: str, partition: int) -> PartitionImage | None:
        image = self.topics_by_name.get(topic)
        return None if image is None else image.partitions.get(partition)

    def live_brokers(self) -> list[BrokerImage]:
        """Registered, unfenced brokers in node-id order: the ones that may lead partitions."""
        return [b for _, b in sorted(self.brokers.items()) if not b.fenced]

    def leader_candidates(self) -> list[BrokerImage]:
        """Live brokers that may be given leadership: not fenced and not in controlled shutdown."""
        return [b for b in self.live_brokers() if not b.in_controlled_shutdown]

    def partitions_led_by(self, node_id: int) -> list[tuple[str, PartitionImage]]:
        return [
            (topic.name, p)
            for topic in self.topics_by_name.values()
            for p in topic.partitions.values()
            if p.leader == node_id
        ]

    def failovers_delegated_to(self, node_id: int, node_epoch: int) -> list[int]:
        """The dead brokers whose WAL broker ``node_id`` (at ``node_epoch``) is assigned to replay now."""
        return [f.node_id for f in self.wal_failovers.values() if f.delegated_to(node_id, node_epoch)]

    def apply(self, records: Iterable[object], last_offset: int) -> MetadataImage:
        """A new image with ``records`` applied (non-cluster records are skipped) ending at ``last_offset``."""
        builder = _Builder(self)
        for record in records:
            builder.apply(record)
        return builder.build(last_offset)

    def with_controller(self, controller_id: int) -> MetadataImage:
        return replace(self, controller_id=controller_id)

    def with_offset(self, offset: int) -> MetadataImage:
        """The same content at a later log offset (records that do not concern the image were applied)."""
        return replace(self, offset=offset)

    def to_records(self) -> list[MetadataRecord]:
        """Records that rebuild this image from an empty one (snapshot content)."""
        out: list[MetadataRecord] = []
        for broker in sorted(self.brokers.values(), key=lambda b: b.node_id):
            out.append(RegisterBrokerRecord(broker.node_id, broker.epoch, broker.listeners, broker.rack, broker.fenced))
            if broker.in_controlled_shutdown:
                out.append(BrokerRegistrationChangeRecord(broker.node_id, broker.epoch, True))
        for key, value in sorted(self.broker_configs.items()):
            out.append(ConfigRecord(RESOURCE_BROKER, "", key, value))
        for node_id, configs in sorted(self.node_configs.items()):
            for key, value in sorted(configs.items()):
                out.append(ConfigRecord(RESOURCE_BROKER, str(node_id), key, value))
        for name, configs in sorted(self.client_metrics.items()):
            for key, value in sorted(configs.items()):
                out.append(ConfigRecord(RESOURCE_CLIENT_METRICS, name, key, value))
        for name, configs in sorted(self.group_configs.items()):
            for key, value in sorted(configs.items()):
                out.append(ConfigRecord(RESOURCE_GROUP, name, key, value))
        for failover in sorted(self.wal_failovers.values(), key=lambda f: f.node_id):
            out.append(WALFailoverRecord(failover.node_id, failover.node_epoch, failover.target_id,
                                         failover.target_epoch, failover.attempt))
            if failover.done:
                out.append(WALFailoverDoneRecord(failover.node_id, failover.node_epoch))
        for user, credentials in sorted(self.scram_credentials.items()):
            for mechanism, credential in sorted(credentials.items()):
                out.append(UserScramCredentialRecord(user, mechanism, credential.salt, credential.stored_key,
                                                     credential.server_key, credential.iterations))
        out.extend(DelegationTokenRecord(t.owner, t.requester, t.renewers, t.issue_ms, t.max_ms, t.expiry_ms,
                                         t.token_id) for _, t in sorted(self.delegation_tokens.items()))
        for acl_id, acl in sorted(self.acls.items()):
            out.append(AccessControlEntryRecord(acl_id, acl.resource_type, acl.resource_name, acl.pattern_type,
                                                acl.principal, acl.host, acl.operation, acl.permission))
        for entity, quotas in sorted(self.client_quotas.items(), key=lambda item: repr(item[0])):
            for quota_key, quota in sorted(quotas.items()):
                out.append(ClientQuotaRecord(entity, quota_key, quota))
        for name, level in sorted(self.features.items()):
            out.append(FeatureLevelRecord(name, level))
        if self.producer_ids.next_producer_id > 0:
            ids = self.producer_ids
            out.append(ProducerIdsRecord(ids.broker_id, ids.broker_epoch, ids.next_producer_id))
        for topic in sorted(self.topics_by_name.values(), key=lambda t: t.name):
            out.append(TopicRecord(topic.name, str(topic.topic_id)))
            for key, value in sorted(topic.configs.items()):
                out.append(ConfigRecord(RESOURCE_TOPIC, topic.name, key, value))
            for index in sorted(topic.partitions):
                p = topic.partitions[index]
                out.append(
                    PartitionRecord(
                        str(p.topic_id), p.partition, p.replicas, p.isr, p.leader, p.leader_epoch, p.partition_epoch,
                        p.removing_replicas,
                    )
                )
        return out


class _Builder:
    """Copy-on-write application of one batch: each top-level map is copied at most once per batch."""

    def __init__(self, base: MetadataImage) -> None:
        self._base = base
        self._by_id: dict[uuid.UUID, TopicImage] | None = None
        self._names: dict[str, uuid.UUID] = {}
        self._brokers: dict[int, BrokerImage] | None = None
        self._broker_configs: dict[str, str] | None = None
        self._node_configs: dict[int, Mapping[str, str]] | None = None
        self._failovers: dict[int, WALFailoverImage] | None = None
        self._scram: dict[str, Mapping[int, ScramCredential]] | None = None
        self._tokens: dict[str, DelegationToken] | None = None
        self._acls: dict[str, AclBinding] | None = None
        self._quotas: dict[QuotaEntity, Mapping[str, float]] | None = None
        self._client_metrics: dict[str, Mapping[str, str]] | None = None
        self._group_configs: dict[str, Mapping[str, str]] | None = None
        self._features: dict[str, int] | None = None
        self._producer_ids = base.producer_ids

    def _topics(self) -> dict[uuid.UUID, TopicImage]:
        if self._by_id is None:
            self._by_id = dict(self._base.topics_by_id)
            self._names = {name: topic.topic_id for name, topic in self._base.topics_by_name.items()}
        return self._by_id

    def _topic_named(self, name: str) -> TopicImage | None:
        """Topic by name as of this point of the batch (a topic and its configs arrive in the same batch)."""
        if self._by_id is None:
            return self._base.topics_by_name.get(name)
        topic_id = self._names.get(name)
        return None if topic_id is None else self._by_id.get(topic_id)

    def _broker_map(self) -> dict[int, BrokerImage]:
        if self._brokers is None:
            self._brokers = dict(self._base.brokers)
        return self._brokers

    def _failover_map(self) -> dict[int, WALFailoverImage]:
        if self._failovers is None:
            self._failovers = dict(self._base.wal_failovers)
        return self._failovers

    def apply(self, record: object) -> None:
        match record:
            case TopicRecord(name=name, topic_id=text):
                topic_id = uuid.UUID(text)
                self._topics()[topic_id] = TopicImage(name, topic_id)
                self._names[name] = topic_id
            case PartitionRecord():
                topic_id = uuid.UUID(record.topic_id)
                self._put_partition(
                    topic_id,
                    PartitionImage(
                        topic_id,
                        record.partition,
                        tuple(record.replicas),
                        tuple(record.isr),
                        record.leader,
                        record.leader_epoch,
                        record.partition_epoch,
                        tuple(record.removing_replicas),
                    ),
                )
            case PartitionChangeRecord():
                self._change_partition(record)
            case RemoveTopicRecord(topic_id=text):
                removed = self._topics().pop(uuid.UUID(text), None)
                if removed is None:
                    logger.warning("RemoveTopicRecord for unknown topic id %s ignored", text)
                elif self._names.get(removed.name) == removed.topic_id:
                    del self._names[removed.name]
            case ConfigRecord():
                self._apply_config(record)
            case RegisterBrokerRecord():
                self._broker_map()[record.node_id] = BrokerImage(
                    record.node_id, record.epoch, tuple(record.listeners), record.rack, record.fenced
                )
            case UnregisterBrokerRecord(node_id=node_id, epoch=epoch):
                broker = self._broker_map().get(node_id)
                if broker is not None and broker.epoch == epoch:
                    del self._broker_map()[node_id]
            case FenceBrokerRecord(node_id=node_id, epoch=epoch):
                self._set_fenced(node_id, epoch, True)
            case UnfenceBrokerRecord(node_id=node_id, epoch=epoch):
                self._set_fenced(node_id, epoch, False)
            case BrokerRegistrationChangeRecord(node_id=node_id, epoch=epoch):
                broker = self._broker_map().get(node_id)
                if broker is not None and broker.epoch == epoch:
                    self._broker_map()[node_id] = replace(
                        broker, in_controlled_shutdown=record.in_controlled_shutdown
                    )
            case WALFailoverRecord():
                self._failover_map()[record.node_id] = WALFailoverImage(
                    record.node_id, record.node_epoch, record.target_id, record.target_epoch, record.attempt
                )
            case WALFailoverDoneRecord(node_id=node_id, node_epoch=node_epoch):
                current = self._failover_map().get(node_id)
                if current is None or current.node_epoch != node_epoch:
                    logger.info("failover completion of broker %d epoch %d ignored: not its current failover",
                                node_id, node_epoch)
                else:
                    self._failover_map()[node_id] = replace(current, done=True)
            case ProducerIdsRecord():
                if record.next_producer_id <= self._producer_ids.next_producer_id:
                    logger.warning("ProducerIdsRecord of broker %d ending at %d ignored: blocks below %d are "
                                   "already handed out", record.broker_id, record.next_producer_id,
                                   self._producer_ids.next_producer_id)
                else:
                    self._producer_ids = ProducerIdsImage(record.broker_id, record.broker_epoch,
                                                          record.next_producer_id)
            case UserScramCredentialRecord():
                credential = ScramCredential(record.salt, record.stored_key, record.server_key, record.iterations)
                self._set_scram(record.name, record.mechanism, credential)
            case RemoveUserScramCredentialRecord(name=name, mechanism=mechanism):
                self._set_scram(name, mechanism, None)
            case DelegationTokenRecord() | RemoveDelegationTokenRecord():
                self._set_token(record)
            case AccessControlEntryRecord():
                self._acl_map()[record.id] = AclBinding(
                    resource_type(record.resource_type), record.resource_name, pattern_type(record.pattern_type),
                    record.principal, record.host, operation(record.operation), permission(record.permission_type),
                )
            case RemoveAccessControlEntryRecord(id=acl_id):
                if self._acl_map().pop(acl_id, None) is None:
                    logger.warning("RemoveAccessControlEntryRecord for unknown ACL id %s ignored", acl_id)
            case ClientQuotaRecord():
                self._set_quota(record)
            case FeatureLevelRecord(name=name, feature_level=level):
                if self._features is None:
                    self._features = dict(self._base.features)
                if level > 0 or name == METADATA_VERSION.name:
                    self._features[name] = level
                else:
                    self._features.pop(name, None)
            case _:
                pass  # stream/object/KV records: replayed by the stream metadata

    def _put_partition(self, topic_id: uuid.UUID, partition: PartitionImage) -> None:
        topic = self._topics().get(topic_id)
        if topic is None:
            logger.warning("partition %d of unknown topic id %s ignored", partition.partition, topic_id)
            return
        partitions = dict(topic.partitions)
        partitions[partition.partition] = partition
        self._topics()[topic_id] = replace(topic, partitions=_frozen(partitions))

    def _change_partition(self, record: PartitionChangeRecord) -> None:
        topic_id = uuid.UUID(record.topic_id)
        topic = self._topics().get(topic_id)
        current = None if topic is None else topic.partitions.get(record.partition)
        if current is None:
            logger.warning(
                "PartitionChangeRecord for unknown partition %s-%d ignored", record.topic_id, record.partition
            )
            return
        changed = replace(
            current,
            leader=current.leader if record.leader is None else record.leader,
            leader_epoch=current.leader_epoch if record.leader_epoch is None else record.leader_epoch,
            isr=current.isr if record.isr is None else tuple(record.isr),
            replicas=current.replicas if record.replicas is None else tuple(record.replicas),
            removing_replicas=(
                current.removing_replicas if record.removing_replicas is None else tuple(record.removing_replicas)
            ),
            partition_epoch=current.partition_epoch + 1,
        )
        self._put_partition(topic_id, changed)

    def _apply_config(self, record: ConfigRecord) -> None:
        if record.resource_type == RESOURCE_TOPIC:
            topics = self._topics()
            match = self._topic_named(record.resource_name)
            if match is None:
                logger.warning("config %s of unknown topic %r ignored", record.name, record.resource_name)
                return
            configs = dict(match.configs)
            _set(configs, record.name, record.value)
            topics[match.topic_id] = replace(match, configs=_frozen(configs))
        elif record.resource_type == RESOURCE_BROKER and record.resource_name in ("", None):
            if self._broker_configs is None:
                self._broker_configs = dict(self._base.broker_configs)
            _set(self._broker_configs, record.name, record.value)
        elif record.resource_type == RESOURCE_BROKER:
            if self._node_configs is None:
                self._node_configs = dict(self._base.node_configs)
            node_id = int(record.resource_name)
            configs = dict(self._node_configs.get(node_id, {}))
            _set(configs, record.name, record.value)
            if configs:
                self._node_configs[node_id] = _frozen(configs)
            else:
                self._node_configs.pop(node_id, None)
        elif record.resource_type == RESOURCE_CLIENT_METRICS:
            if self._client_metrics is None:
                self._client_metrics = dict(self._base.client_metrics)
            subscription = dict(self._client_metrics.get(record.resource_name, {}))
            _set(subscription, record.name, record.value)
            if subscription:
                self._client_metrics[record.resource_name] = _frozen(subscription)
            else:  # a subscription whose every key is deleted is gone, as in Kafka
                self._client_metrics.pop(record.resource_name, None)
        elif record.resource_type == RESOURCE_GROUP:
            if self._group_configs is None:
                self._group_configs = dict(self._base.group_configs)
            group = dict(self._group_configs.get(record.resource_name, {}))
            _set(group, record.name, record.value)
            if group:
                self._group_configs[record.resource_name] = _frozen(group)
            else:
                self._group_configs.pop(record.resource_name, None)
        else:
            logger.warning("config record for unsupported resource type %d ignored", record.resource_type)

    def _set_scram(self, user: str, mechanism: int, credential: ScramCredential | None) -> None:
        if self._scram is None:
            self._scram = dict(self._base.scram_credentials)
        credentials = dict(self._scram.get(user, {}))
        if credential is None:
            credentials.pop(mechanism, None)
        else:
            credentials[mechanism] = credential
        if credentials:
            self._scram[user] = _frozen(credentials)
        else:
            self._scram.pop(user, None)

    def _set_token(self, record: DelegationTokenRecord | RemoveDelegationTokenRecord) -> None:
        if self._tokens is None:
            self._tokens = dict(self._base.delegation_tokens)
        if isinstance(record, RemoveDelegationTokenRecord):
            self._tokens.pop(record.token_id, None)
        else:
            self._tokens[record.token_id] = DelegationToken(
                record.token_id, record.owner, record.requester, tuple(record.renewers), record.issue_timestamp,
                record.max_timestamp, record.expiration_timestamp)

    def _set_quota(self, record: ClientQuotaRecord) -> None:
        if self._quotas is None:
            self._quotas = dict(self._base.client_quotas)
        entity = tuple((t, n) for t, n in record.entity)
        quotas = dict(self._quotas.get(entity, {}))
        if record.remove:
            quotas.pop(record.key, None)
        else:
            quotas[record.key] = record.value
        if quotas:
            self._quotas[entity] = _frozen(quotas)
        else:
            self._quotas.pop(entity, None)

    def _acl_map(self) -> dict[str, AclBinding]:
        if self._acls is None:
            self._acls = dict(self._base.acls)
        return self._acls

    def _set_fenced(self, node_id: int, epoch: int, fenced: bool) -> None:
        broker = self._broker_map().get(node_id)
        if broker is None or broker.epoch != epoch:
            logger.info("fence change for broker %d epoch %d ignored (not its current registration)", node_id, epoch)
            return
        self._broker_map()[node_id] = replace(broker, fenced=fenced)

    def build(self, last_offset: int) -> MetadataImage:
        base = self._base
        topics_by_id = base.topics_by_id
        topics_by_name = base.topics_by_name
        if self._by_id is not None:
            topics_by_id = _frozen(self._by_id)
            topics_by_name = _frozen({t.name: t for t in self._by_id.values()})
        return replace(
            base,
            offset=last_offset,
            topics_by_id=topics_by_id,
            topics_by_name=topics_by_name,
            brokers=base.brokers if self._brokers is None else _frozen(self._brokers),
            broker_configs=base.broker_configs if self._broker_configs is None else _frozen(self._broker_configs),
            node_configs=base.node_configs if self._node_configs is None else _frozen(self._node_configs),
            wal_failovers=base.wal_failovers if self._failovers is None else _frozen(self._failovers),
            producer_ids=self._producer_ids,
            scram_credentials=base.scram_credentials if self._scram is None else _frozen(self._scram),
            delegation_tokens=base.delegation_tokens if self._tokens is None else _frozen(self._tokens),
            acls=base.acls if self._acls is None else _frozen(self._acls),
            client_quotas=base.client_quotas if self._quotas is None else _frozen(self._quotas),
            client_metrics=base.client_metrics if self._client_metrics is None else _frozen(self._client_metrics),
            group_configs=base.group_configs if self._group_configs is None else _frozen(self._group_configs),
            features=base.features if self._features is None else _frozen(self._features),
        )


def _set(configs: dict[str, str], key: str, value: str | None) -> None:
    if value is None:
        configs.pop(key, None)
    else:
        configs[key] = value


def partitions_being_reassigned(image: MetadataImage) -> list[tuple[str, PartitionImage]]:
    """Every partition being reassigned, as (topic name, partition), in topic and partition order: what
    ListPartitionReassignments lists and the balancer counts as moves in flight."""
    return [
        (topic.name, partition)
        for topic in sorted(image.topics_by_name.values(), key=lambda t: t.name)
        for _, partition in sorted(topic.partitions.items())
        if partition.reassigning
    ]
