"""The cluster records: topics, partitions, configs, brokers, credentials, tokens, ACLs, quotas and WAL failovers.

The metadata log carries these beside the stream, object and KV records of ``storage.metadata.stream_records``
(ids 501 and up, as AutoMQ's). Both kinds are registered with the one codec of ``storage.metadata.record_codec``
(``type u16 | version u16 | JSON body``), which ``metadata.log`` encodes and decodes every record with; the cluster
records carry Kafka's metadata record type ids, so they live here, above ``storage``, which knows nothing of Kafka.
Framing, CRCs and offsets belong to the log (``metadata.log``), not to the records.

Topic ids are carried as the UUID's canonical text: the shared codec has no UUID type, and the text form keeps
snapshots readable. :class:`metadata.image.TopicImage` exposes them as ``uuid.UUID``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from settings.endpoint import Endpoint
from storage.metadata.record_codec import MetadataRecord, register_record

NO_LEADER = -1


# ---------------------------------------------------------------- cluster records (Kafka's metadata record ids)


@register_record
@dataclass(frozen=True, slots=True)
class TopicRecord(MetadataRecord):
    """A topic exists with this name and id; its partitions follow as PartitionRecords."""

    TYPE: ClassVar[int] = 2
    VERSION: ClassVar[int] = 0
    name: str
    topic_id: str


@register_record
@dataclass(frozen=True, slots=True)
class PartitionRecord(MetadataRecord):
    """The full state of one partition, written at creation and in snapshots."""

    TYPE: ClassVar[int] = 3
    VERSION: ClassVar[int] = 0
    topic_id: str
    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int = 0
    #: Replicas a reassignment in flight takes the partition from (DESIGN §9; Kafka's removingReplicas).
    removing_replicas: tuple[int, ...] = ()


@register_record
@dataclass(frozen=True, slots=True)
class PartitionChangeRecord(MetadataRecord):
    """A change to one partition; ``None`` fields are unchanged.

    The new leader epoch is carried explicitly (not derived on replay) because the controller also bumps it when
    the same leader re-registers after a restart; every replica of the log must reach the same value. The
    partition epoch is bumped by one on every change when replayed.
    """

    TYPE: ClassVar[int] = 5
    VERSION: ClassVar[int] = 0
    topic_id: str
    partition: int
    leader: int | None = None
    leader_epoch: int | None = None
    isr: tuple[int, ...] | None = None
    replicas: tuple[int, ...] | None = None
    #: A reassignment starts (the replicas it moves away from) or ends (``()``); ``None``: unchanged.
    removing_replicas: tuple[int, ...] | None = None


@register_record
@dataclass(frozen=True, slots=True)
class RemoveTopicRecord(MetadataRecord):
    TYPE: ClassVar[int] = 9
    VERSION: ClassVar[int] = 0
    topic_id: str


@register_record
@dataclass(frozen=True, slots=True)
class ConfigRecord(MetadataRecord):
    """One dynamic config key of a topic (``resource_type`` 2) or of the brokers (4; name "" = cluster-wide
    default, a node id = that broker). ``value`` None deletes the key, reverting to the default."""

    TYPE: ClassVar[int] = 4
    VERSION: ClassVar[int] = 0
    resource_type: int
    resource_name: str
    name: str
    value: str | None


@register_record
@dataclass(frozen=True, slots=True)
class RegisterBrokerRecord(MetadataRecord):
    """A broker (re)registered. ``epoch`` is its new node epoch; a re-registration replaces the old one."""

    TYPE: ClassVar[int] = 0
    VERSION: ClassVar[int] = 0
    node_id: int
    epoch: int
    listeners: tuple[Endpoint, ...]
    rack: str | None = None
    fenced: bool = True


@register_record
@dataclass(frozen=True, slots=True)
class UnregisterBrokerRecord(MetadataRecord):
    TYPE: ClassVar[int] = 1
    VERSION: ClassVar[int] = 0
    node_id: int
    epoch: int


@register_record
@dataclass(frozen=True, slots=True)
class FenceBrokerRecord(MetadataRecord):
    """The broker missed its session timeout (or is shutting down): it leads nothing until unfenced."""

    TYPE: ClassVar[int] = 7
    VERSION: ClassVar[int] = 0
    node_id: int
    epoch: int


@register_record
@dataclass(frozen=True, slots=True)
class UnfenceBrokerRecord(MetadataRecord):
    TYPE: ClassVar[int] = 8
    VERSION: ClassVar[int] = 0
    node_id: int
    epoch: int


@register_record
@dataclass(frozen=True, slots=True)
class ProducerIdsRecord(MetadataRecord):
    """Broker ``broker_id`` (at registration ``broker_epoch``) was given the block of producer ids that ends just
    below ``next_producer_id``; the next block starts there. Ids are only ever handed out by appending this record,
    so two brokers can never hold overlapping blocks, and a block survives controller restarts and failovers.
    ``broker_id`` -1 in snapshots and for the upgrade floor of a cluster that reserved ids in the KV store."""

    TYPE: ClassVar[int] = 15
    VERSION: ClassVar[int] = 0
    broker_id: int
    broker_epoch: int
    next_producer_id: int


@register_record
@dataclass(frozen=True, slots=True)
class UserScramCredentialRecord(MetadataRecord):
    """A user's SCRAM credential for one mechanism (1 SCRAM-SHA-256, 2 SCRAM-SHA-512), as Kafka's record: the salt,
    iterations and the two keys derived from the salted password. The password itself is never stored; a newer
    record for the same user and mechanism replaces it."""

    TYPE: ClassVar[int] = 11
    VERSION: ClassVar[int] = 0
    name: str
    mechanism: int
    salt: bytes = field(repr=False)
    stored_key: bytes = field(repr=False)
    server_key: bytes = field(repr=False)
    iterations: int


@register_record
@dataclass(frozen=True, slots=True)
class RemoveUserScramCredentialRecord(MetadataRecord):
    """The user's SCRAM credential for ``mechanism`` is deleted."""

    TYPE: ClassVar[int] = 12
    VERSION: ClassVar[int] = 0
    name: str
    mechanism: int


@register_record
@dataclass(frozen=True, slots=True)
class DelegationTokenRecord(MetadataRecord):
    """A delegation token was created, renewed or expired later (Kafka's record and id; ``metadata.delegation_tokens``):
    the whole token each time, a newer record for the same id replacing it. Principals are ``User:name``; the HMAC
    is not stored (each node derives it from the token id with its secret key)."""

    TYPE: ClassVar[int] = 10
    VERSION: ClassVar[int] = 0
    owner: str
    requester: str
    renewers: tuple[str, ...]
    issue_timestamp: int
    max_timestamp: int
    expiration_timestamp: int
    token_id: str


@register_record
@dataclass(frozen=True, slots=True)
class RemoveDelegationTokenRecord(MetadataRecord):
    """The token is gone: expired by its owner or a renewer, or swept by the controller once past its expiry."""

    TYPE: ClassVar[int] = 26
    VERSION: ClassVar[int] = 0
    token_id: str


@register_record
@dataclass(frozen=True, slots=True)
class AccessControlEntryRecord(MetadataRecord):
    """An ACL binding (Kafka's record of the same name and id): a resource pattern and an entry, with Kafka's enum
    codes (``metadata.acl.binding``). ``id`` is the binding's own (a UUID's text), chosen by the controller, so a
    removal names exactly one binding."""

    TYPE: ClassVar[int] = 17
    VERSION: ClassVar[int] = 0
    id: str
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int


@register_record
@dataclass(frozen=True, slots=True)
class RemoveAccessControlEntryRecord(MetadataRecord):
    """The ACL binding ``id`` is deleted (DeleteAcls)."""

    TYPE: ClassVar[int] = 18
    VERSION: ClassVar[int] = 0
    id: str


@register_record
@dataclass(frozen=True, slots=True)
class ClientQuotaRecord(MetadataRecord):
    """A client quota (Kafka's record of the same name and id, KIP-546): ``key`` of the quota entity ``entity``
    is set to ``value``, or removed when ``remove``. ``entity`` is (entity type, name) pairs sorted by type, with
    types ``user``/``client-id`` and a None name for the type's default entity (``<default>``); see
    ``metadata.client_quotas``."""

    TYPE: ClassVar[int] = 14
    VERSION: ClassVar[int] = 0
    entity: tuple[tuple[str, str | None], ...]
    key: str
    value: float
    remove: bool = False


# ---------------------------------------------------------------- WAL failover (Fjord's own ids, after AutoMQ's 5xx)


@register_record
@dataclass(frozen=True, slots=True)
class WALFailoverRecord(MetadataRecord):
    """Broker ``target_id`` (at its registration ``target_epoch``) is to replay the S3 WAL that broker ``node_id``
    left behind when its incarnation ``node_epoch`` was fenced by its session timeout. ``target_id`` -1: no live
    broker can take it yet. ``attempt`` counts the assignments: the target opens the WAL at epoch
    ``node_epoch + attempt`` (see :func:`failover_wal_epoch`), so each attempt fences the previous one. While the
    assignment holds, the controller accepts the target's commits and closes for the streams ``node_id`` still
    has opened. A newer record for the same node replaces it."""

    TYPE: ClassVar[int] = 601
    VERSION: ClassVar[int] = 0
    node_id: int
    node_epoch: int
    target_id: int
    target_epoch: int
    attempt: int


@register_record
@dataclass(frozen=True, slots=True)
class WALFailoverDoneRecord(MetadataRecord):
    """The failover of broker ``node_id``'s WAL (incarnation ``node_epoch``) finished: every acknowledged record
    is committed, its streams are closed and its WAL is reset."""

    TYPE: ClassVar[int] = 602
    VERSION: ClassVar[int] = 0
    node_id: int
    node_epoch: int


@register_record
@dataclass(frozen=True, slots=True)
class BrokerRegistrationChangeRecord(MetadataRecord):
    """Broker ``node_id`` (registration ``epoch``) entered controlled shutdown (Kafka's record of this name sets
    ``inControlledShutdown``; its id 17 is taken here by ACL entries). It still serves what it leads while its
    partitions move away, but is never given leadership again: the auto-balancer, reassignments and elections
    skip it until a new registration (a restart) replaces it."""

    TYPE: ClassVar[int] = 603
    VERSION: ClassVar[int] = 0
    node_id: int
    epoch: int
    in_controlled_shutdown: bool = True


@register_record
@dataclass(frozen=True, slots=True)
class FeatureLevelRecord(MetadataRecord):
    """A KIP-584 feature's finalized level (Kafka's FeatureLevelRecord; its id 12 is taken here by SCRAM removals):
    written for every feature when a cluster first finalizes its features and by UpdateFeatures
    (``controller.decisions.features``). Level 0 removes the feature, as in Kafka (not for ``metadata.version``)."""

    TYPE: ClassVar[int] = 604
    VERSION: ClassVar[int] = 0
    name: str
    feature_level: int


NO_TARGET = -1


def failover_wal_epoch(node_epoch: int, attempt: int) -> int:
    """The WAL reservation epoch of failover attempt ``attempt`` of incarnation ``node_epoch``: above the dead
    incarnation's (fencing it), below the next incarnation's (node epochs are registration times in milliseconds,
    seconds apart), and above every earlier attempt's."""
    return node_epoch + attempt


CLUSTER_RECORD_TYPES: tuple[type[MetadataRecord], ...] = (
    TopicRecord,
    PartitionRecord,
    PartitionChangeRecord,
    RemoveTopicRecord,
    ConfigRecord,
    RegisterBrokerRecord,
    UnregisterBrokerRecord,
    FenceBrokerRecord,
    UnfenceBrokerRecord,
    ProducerIdsRecord,
    UserScramCredentialRecord,
    RemoveUserScramCredentialRecord,
    DelegationTokenRecord,
    RemoveDelegationTokenRecord,
    AccessControlEntryRecord,
    RemoveAccessControlEntryRecord,
    ClientQuotaRecord,
    WALFailoverRecord,
    WALFailoverDoneRecord,
    BrokerRegistrationChangeRecord,
    FeatureLevelRecord,
)


__all__ = [
    "CLUSTER_RECORD_TYPES",
    "NO_LEADER",
    "NO_TARGET",
    "AccessControlEntryRecord",
    "BrokerRegistrationChangeRecord",
    "ClientQuotaRecord",
    "ConfigRecord",
    "DelegationTokenRecord",
    "FeatureLevelRecord",
    "FenceBrokerRecord",
    "PartitionChangeRecord",
    "PartitionRecord",
    "ProducerIdsRecord",
    "RegisterBrokerRecord",
    "RemoveAccessControlEntryRecord",
    "RemoveDelegationTokenRecord",
    "RemoveTopicRecord",
    "RemoveUserScramCredentialRecord",
    "TopicRecord",
    "UnfenceBrokerRecord",
    "UnregisterBrokerRecord",
    "UserScramCredentialRecord",
    "WALFailoverDoneRecord",
    "WALFailoverRecord",
    "failover_wal_epoch",
]
