"""The hand-maintained table of API versions this broker advertises in ApiVersions.

Each entry is the range a handler implements *in full* (flexible versions, tagged fields, topic ids where the
version has them). kio can decode far newer versions; copying its ranges would make clients pick versions we do
not serve (Produce/Fetch v13 need topic ids; librdkafka calls GetTelemetrySubscriptions as soon as it is listed).

Every entry has a handler in the broker's table (``advertised`` keeps the others out of the broker's own answers,
and tests/wire/test_early_answers.py checks there are none): a starting broker answers ApiVersions from this table
before its handlers are imported (``wire.early_answers``). Handler authors edit only their own API's line, once the
handler is in.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from kio.schema.errors import ErrorCode

from wire import codec, schema


@dataclass(frozen=True, slots=True)
class VersionRange:
    name: str
    min_version: int
    max_version: int

    def __contains__(self, version: object) -> bool:
        return isinstance(version, int) and self.min_version <= version <= self.max_version


API_VERSIONS: Final[Mapping[int, VersionRange]] = MappingProxyType(
    {
        0: VersionRange("Produce", 3, 13),
        1: VersionRange("Fetch", 4, 18),
        2: VersionRange("ListOffsets", 1, 11),
        3: VersionRange("Metadata", 0, 13),
        8: VersionRange("OffsetCommit", 2, 10),
        9: VersionRange("OffsetFetch", 1, 10),
        10: VersionRange("FindCoordinator", 0, 6),
        11: VersionRange("JoinGroup", 0, 9),
        12: VersionRange("Heartbeat", 0, 4),
        13: VersionRange("LeaveGroup", 0, 5),
        14: VersionRange("SyncGroup", 0, 5),
        15: VersionRange("DescribeGroups", 0, 6),
        16: VersionRange("ListGroups", 0, 5),
        17: VersionRange("SaslHandshake", 0, 1),
        18: VersionRange("ApiVersions", 0, 4),
        19: VersionRange("CreateTopics", 2, 7),
        20: VersionRange("DeleteTopics", 1, 6),
        21: VersionRange("DeleteRecords", 0, 2),
        22: VersionRange("InitProducerId", 0, 5),
        23: VersionRange("OffsetForLeaderEpoch", 2, 4),
        24: VersionRange("AddPartitionsToTxn", 0, 5),
        25: VersionRange("AddOffsetsToTxn", 0, 4),
        26: VersionRange("EndTxn", 0, 5),
        27: VersionRange("WriteTxnMarkers", 1, 2),
        28: VersionRange("TxnOffsetCommit", 0, 5),
        29: VersionRange("DescribeAcls", 1, 3),
        30: VersionRange("CreateAcls", 1, 3),
        31: VersionRange("DeleteAcls", 1, 3),
        32: VersionRange("DescribeConfigs", 1, 4),
        33: VersionRange("AlterConfigs", 0, 2),
        35: VersionRange("DescribeLogDirs", 1, 5),
        36: VersionRange("SaslAuthenticate", 0, 2),
        37: VersionRange("CreatePartitions", 0, 3),
        38: VersionRange("CreateDelegationToken", 1, 3),
        39: VersionRange("RenewDelegationToken", 1, 2),
        40: VersionRange("ExpireDelegationToken", 1, 2),
        41: VersionRange("DescribeDelegationToken", 1, 3),
        42: VersionRange("DeleteGroups", 0, 2),
        43: VersionRange("ElectLeaders", 0, 2),
        44: VersionRange("IncrementalAlterConfigs", 0, 1),
        45: VersionRange("AlterPartitionReassignments", 0, 1),
        46: VersionRange("ListPartitionReassignments", 0, 0),
        47: VersionRange("OffsetDelete", 0, 0),
        48: VersionRange("DescribeClientQuotas", 0, 1),
        49: VersionRange("AlterClientQuotas", 0, 1),
        50: VersionRange("DescribeUserScramCredentials", 0, 0),
        51: VersionRange("AlterUserScramCredentials", 0, 0),
        55: VersionRange("DescribeQuorum", 0, 2),
        57: VersionRange("UpdateFeatures", 0, 2),
        60: VersionRange("DescribeCluster", 0, 2),
        61: VersionRange("DescribeProducers", 0, 0),
        64: VersionRange("UnregisterBroker", 0, 0),
        65: VersionRange("DescribeTransactions", 0, 0),
        66: VersionRange("ListTransactions", 0, 2),
        68: VersionRange("ConsumerGroupHeartbeat", 0, 1),
        69: VersionRange("ConsumerGroupDescribe", 0, 1),
        71: VersionRange("GetTelemetrySubscriptions", 0, 0),
        72: VersionRange("PushTelemetry", 0, 0),
        74: VersionRange("ListConfigResources", 0, 1),
        75: VersionRange("DescribeTopicPartitions", 0, 0),
        76: VersionRange("ShareGroupHeartbeat", 1, 1),
        77: VersionRange("ShareGroupDescribe", 1, 1),
        78: VersionRange("ShareFetch", 1, 2),
        79: VersionRange("ShareAcknowledge", 1, 2),
        80: VersionRange("AddRaftVoter", 0, 1),
        81: VersionRange("RemoveRaftVoter", 0, 0),
        83: VersionRange("InitializeShareGroupState", 0, 0),
        86: VersionRange("DeleteShareGroupState", 0, 0),
        87: VersionRange("ReadShareGroupStateSummary", 0, 1),
        90: VersionRange("DescribeShareGroupOffsets", 0, 1),
        91: VersionRange("AlterShareGroupOffsets", 0, 0),
        92: VersionRange("DeleteShareGroupOffsets", 0, 0),
    }
)

API_VERSIONS_KEY: Final = 18
SASL_HANDSHAKE_KEY: Final = 17
SASL_AUTHENTICATE_KEY: Final = 36
WRITE_TXN_MARKERS_KEY: Final = 27
#: What a SASL client may send before it is authenticated (and while it re-authenticates): the broker's session
#: refuses anything else, and quotas never charge these, so a client over its quota can still connect.
PRE_AUTHENTICATION_KEYS: Final = frozenset((API_VERSIONS_KEY, SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY))


@dataclass(frozen=True, slots=True)
class Feature:
    """A KIP-584 feature: the range of levels this software supports, and ``finalized_level``, the level a new
    cluster finalizes (``kafka-storage format``'s default). The level in force is the cluster's, a metadata record
    (``metadata.image.MetadataImage.feature_level``), changed with UpdateFeatures (``kafka-features.sh``)."""

    name: str
    min_version: int
    max_version: int
    finalized_level: int


#: ``metadata.version`` as a Kafka 3.6 broker (3.6-IV2, level 14) reports it; the served API ranges above are those
#: of 3.6 (Fetch v15, ListOffsets v8: a 3.7-IV4 broker would owe Fetch v16). The supported minimum is 3.3-IV3
#: (level 7), the oldest level Kafka 4.0 still knows, so 3.x and 4.x tools can both name every level reported.
#: Java clients read the finalized features (and their epoch); kafka-features and kafka-metadata-quorum check
#: ``metadata.version`` before using newer admin APIs.
METADATA_VERSION: Final = Feature("metadata.version", 7, 14, 14)
#: Kafka's release names of the ``metadata.version`` levels above (``kafka-features`` shows and takes these).
METADATA_RELEASES: Final[Mapping[int, str]] = MappingProxyType({
    7: "3.3-IV3", 8: "3.4-IV0", 9: "3.5-IV0", 10: "3.5-IV1", 11: "3.5-IV2", 12: "3.6-IV0", 13: "3.6-IV1", 14: "3.6-IV2",
})
#: Transactions v2 (KIP-890 part 2) at level 2: Kafka 4 clients then bump the epoch on every EndTxn and let the
#: brokers add partitions to the transaction (Produce v12, TxnOffsetCommit v5). Level 1 (or 0) keeps v1 clients.
TRANSACTION_VERSION: Final = Feature("transaction.version", 0, 2, 2)
#: The KIP-848 consumer group protocol at level 1.
GROUP_VERSION: Final = Feature("group.version", 0, 1, 1)
#: KIP-932 share groups at level 1: Kafka 4.2 finalizes it in a new cluster (SV_1, production-ready there; Kafka
#: ties it to metadata.version 4.2-IV0, which Fjord does not report, as it does not for group.version's 4.0-IV0).
#: At 0 the share APIs answer UNSUPPORTED_VERSION (``metadata.group_configs.share_groups_enabled``).
SHARE_VERSION: Final = Feature("share.version", 0, 1, 1)
FEATURES: Final[tuple[Feature, ...]] = (METADATA_VERSION, TRANSACTION_VERSION, GROUP_VERSION, SHARE_VERSION)
FEATURES_BY_NAME: Final[Mapping[str, Feature]] = MappingProxyType({f.name: f for f in FEATURES})
#: KIP-853's ``kraft.version``: 1 when the quorum's voters are the metadata log's (a dynamic quorum, formatted with
#: ``--standalone``, ``--initial-controllers`` or ``--no-initial-controllers``), so AddRaftVoter and RemoveRaftVoter
#: may change them; 0 for a static ``controller.quorum.voters``. It is the Raft log's, not a FeatureLevelRecord, so
#: it is not among :data:`FEATURES` (which the controller finalizes in records): every node supports 0-1, and the
#: finalized level is the node's quorum's (:func:`with_kraft_version`).
KRAFT_VERSION: Final = Feature("kraft.version", 0, 1, 1)
#: What ApiVersions lists as supported, as Kafka 4's nodes do (kraft.version among them).
SUPPORTED_FEATURES: Final[tuple[Feature, ...]] = (*FEATURES, KRAFT_VERSION)


def release_metadata_level(text: str) -> int | None:
    """A ``metadata.version`` release (``3.6-IV2``, or ``3.6`` for its latest) as its level; None: not one this
    software knows (``kafka-features --release-version``, ``kafka-storage format --release-version``)."""
    by_name = {name: level for level, name in METADATA_RELEASES.items()}
    latest = {name.partition("-")[0]: level for level, name in sorted(METADATA_RELEASES.items())}
    return by_name.get(text.strip(), latest.get(text.strip()))


#: The features after ``metadata.version`` (all but it and kraft.version, which a quorum's flags decide) at their
#: default level in every release :data:`METADATA_RELEASES` names: 0, as Kafka's came in 3.9 and 4.x.
RELEASE_DEFAULT_LEVEL: Final = 0


def kraft_version_level(dynamic_quorum: bool) -> int:
    """The finalized ``kraft.version`` of a node whose quorum is dynamic (1) or static (0)."""
    return KRAFT_VERSION.max_version if dynamic_quorum else 0


def with_kraft_version(finalized: Mapping[str, int], level: int) -> dict[str, int]:
    """``finalized`` (the metadata's features) with ``kraft.version`` at ``level`` added, as Kafka reports it:
    only above 0 (a static quorum's finalized features do not name it)."""
    levels = dict(finalized)
    if level > 0:
        levels[KRAFT_VERSION.name] = level
    return dict(sorted(levels.items()))


def feature_fields(response_cls: type[Any], api_version: int, finalized: Mapping[str, int] | None, epoch: int
                   ) -> dict[str, object]:
    """The tagged feature fields of an ApiVersions v3+ response (brokers and controllers answer the same): the
    ranges this software supports and the cluster's ``finalized`` levels (the metadata image's, those above 0),
    with their ``epoch`` (the metadata offset, as in KRaft). Before v4 a supported range starting at 0 is left
    out (KAFKA-17492: older Java clients refuse such a range). ``finalized`` None: not known yet (a starting
    broker, ``wire.early_answers``), which KIP-584 says with the epoch -1; clients keep the levels of the highest
    epoch they have seen, so such an answer never replaces known ones."""
    if api_version < 3:
        return {}
    if finalized is None:
        finalized, epoch = {}, -1
    else:
        epoch = max(epoch, 0)
    return {
        "supported_features": tuple(
            schema.build_nested(response_cls, "supported_features", name=f.name, min_version=f.min_version,
                                max_version=f.max_version)
            for f in SUPPORTED_FEATURES
            if f.min_version > 0 or api_version >= 4
        ),
        "finalized_features_epoch": epoch,
        "finalized_features": tuple(
            schema.build_nested(response_cls, "finalized_features", name=name, max_version_level=level,
                                min_version_level=level)
            for name, level in finalized.items()
        ),
        "zk_migration_ready": False,
    }


def api_name(api_key: int) -> str:
    entry = API_VERSIONS.get(api_key)
    return entry.name if entry is not None else f"api{api_key}"


def advertised(handled_keys: Iterable[int]) -> Mapping[int, VersionRange]:
    """The table restricted to APIs that have a registered handler: what ApiVersions tells clients."""
    keys = set(handled_keys)
    return MappingProxyType({key: entry for key, entry in sorted(API_VERSIONS.items()) if key in keys})


# KIP-511: client software name and version must look like this (:func:`valid_client_software`).
_SOFTWARE: Final = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


def valid_client_software(name: str | None, version: str | None) -> bool:
    """KIP-511: ApiVersions v3+ names the client's software and its version in this form, else INVALID_REQUEST."""
    return bool(_SOFTWARE.fullmatch(name or "") and _SOFTWARE.fullmatch(version or ""))


def api_versions_answer(api_version: int, versions: Mapping[int, VersionRange], *, software_valid: bool,
                        finalized: Mapping[str, int] | None, epoch: int) -> Any:
    """The ApiVersions response of ``api_version`` listing ``versions`` (INVALID_REQUEST, with the list all the
    same, when the request's client software is not ``software_valid``), with the feature fields
    (:func:`feature_fields`)."""
    cls = codec.response_class(API_VERSIONS_KEY, api_version)
    if not software_valid:
        return schema.build(cls, error_code=ErrorCode.invalid_request, api_keys=_api_keys(cls, versions))
    return schema.build(cls, error_code=ErrorCode.none, api_keys=_api_keys(cls, versions),
                        **feature_fields(cls, api_version, finalized, epoch))


def unsupported_version_answer(versions: Mapping[int, VersionRange]) -> Any:
    """The v0 response a client gets when it asks with an ApiVersions version we do not serve: it carries
    UNSUPPORTED_VERSION and our key list, from which the client picks a version and asks again (KIP-511)."""
    cls = codec.response_class(API_VERSIONS_KEY, 0)
    return schema.build(cls, error_code=ErrorCode.unsupported_version, api_keys=_api_keys(cls, versions))


def _api_keys(response_cls: type[Any], versions: Mapping[int, VersionRange]) -> tuple[Any, ...]:
    return tuple(
        schema.build_nested(response_cls, "api_keys", api_key=key, min_version=v.min_version, max_version=v.max_version)
        for key, v in versions.items()
    )
