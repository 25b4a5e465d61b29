"""UpdateFeatures — the controller's decision, sans-I/O: which FeatureLevelRecords a request becomes.

Kafka's rules (FeatureControlManager): an unknown feature, a level outside the range this software supports, a
lower level asked as an upgrade or a higher one asked as a downgrade are each refused with INVALID_UPDATE_VERSION
and Kafka's message. ``metadata.version`` cannot be downgraded (a safe downgrade might lose metadata, an unsafe one
is not supported), and is never removed. As Kafka's QuorumController does since KIP-1022, the updates are applied
all or nothing: the first refused update refuses every one, with Kafka's sentence naming it.

A cluster that never finalized its features runs at the software's defaults (``wire.api_versions.FEATURES``); its
first write also records the defaults it does not change, so later software with other defaults keeps them.

``kraft.version`` (KIP-853) is the quorum's, not a record: asking for the level in force succeeds and writes nothing,
as on Kafka; a downgrade is refused with Kafka's sentence. An upgrade turns a static quorum dynamic (Kafka 4.1's
``kafka-features upgrade --feature kraft.version=1``): the plan says so (``writes_voters``) and the controller has
the quorum write its voters to the log before it commits the plan's records, as Kafka writes the kraft.version and
the voter set in a batch of their own ahead of the metadata one. A single node keeping its metadata in a local log
has no quorum to upgrade: its upgrade is refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from metadata.cluster_records import FeatureLevelRecord
from metadata.controller_api import FeatureUpdate, FeatureUpdateResult
from metadata.image import MetadataImage
from storage.metadata.record_codec import MetadataRecord
from wire.api_versions import FEATURES, FEATURES_BY_NAME, KRAFT_VERSION, METADATA_VERSION

#: QuorumController.updateFeatures puts this ahead of the refused feature's error.
_ALL_FAILED = "The update failed for all features since the following feature had an error: "


@dataclass(frozen=True, slots=True)
class FeaturesPlan:
    records: list[MetadataRecord]
    results: list[FeatureUpdateResult]
    #: ``kraft.version`` goes 0 -> 1: the quorum writes its voters to the log first.
    writes_voters: bool = False


def refused_plan(updates: Sequence[FeatureUpdate], feature: str, level: int, reason: str,
                 error: ErrorCode = ErrorCode.invalid_update_version) -> FeaturesPlan:
    """Every update refused because ``feature`` at ``level`` was, with Kafka's sentence naming it."""
    message = f"{_ALL_FAILED}Invalid update version {level} for feature {feature}. {reason}"
    return FeaturesPlan([], [FeatureUpdateResult(u.feature, error, message) for u in updates])


def initial_records(image: MetadataImage, levels: dict[str, int] | None = None) -> list[FeatureLevelRecord]:
    """The records finalizing every feature of a cluster that has none yet: ``levels`` (``--feature`` at the
    first start, already checked) over the defaults; nothing once the cluster finalized its features."""
    if image.features_finalized:
        return []
    chosen = {f.name: f.finalized_level for f in FEATURES} | (levels or {})
    return [FeatureLevelRecord(name, level) for name, level in chosen.items()]


def refusal(feature: str, level: int, image: MetadataImage, upgrade_type: int, kraft_version: int = 0, *,
            may_write_voters: bool = False) -> str | None:
    """Why finalizing ``feature`` at ``level`` is refused (Kafka's message), or None when it is valid;
    ``kraft_version``: the quorum's level; ``may_write_voters``: it is a Raft quorum's, which an upgrade makes
    dynamic (not a single node's local metadata log)."""
    if upgrade_type not in (FeatureUpdate.UPGRADE, FeatureUpdate.SAFE_DOWNGRADE, FeatureUpdate.UNSAFE_DOWNGRADE):
        return "The controller does not support the given upgrade type."
    if level < 0:
        return "A feature version cannot be less than 0."
    supported = KRAFT_VERSION if feature == KRAFT_VERSION.name else FEATURES_BY_NAME.get(feature)
    if supported is None:
        return "The controller does not support the given feature."
    if not (supported.min_version <= level <= supported.max_version) and not (
        level == 0 and feature != METADATA_VERSION.name
    ):
        return (f"The controller only supports versions {supported.min_version}-{supported.max_version} of this "
                "feature.")
    current = kraft_version if supported is KRAFT_VERSION else image.feature_level(feature)
    if level < current and upgrade_type == FeatureUpdate.UPGRADE:
        return ("Can't downgrade the version of this feature without setting the upgrade type to either safe or "
                "unsafe downgrade.")
    if level > current and upgrade_type != FeatureUpdate.UPGRADE:
        return "Can't downgrade to a newer version."
    if supported is KRAFT_VERSION and level < current:
        return "Can't downgrade the version of this feature."
    if supported is KRAFT_VERSION and level > current and not may_write_voters:
        return ("This node keeps its metadata in a local log, not a Raft quorum, so its voters cannot change: a "
                "quorum of controllers names controller.quorum.voters or controller.quorum.bootstrap.servers.")
    if feature == METADATA_VERSION.name and level < current:
        if upgrade_type == FeatureUpdate.UNSAFE_DOWNGRADE:
            return "Unsafe metadata downgrade is not supported in this version."
        return ("Refusing to perform the requested downgrade because it might delete metadata information. Retry "
                "using UNSAFE_DOWNGRADE if you want to force the downgrade to proceed.")
    return None


def plan_update_features(image: MetadataImage, updates: Sequence[FeatureUpdate], kraft_version: int = 0, *,
                         may_write_voters: bool = False) -> FeaturesPlan:
    """``kraft_version``: the quorum's KIP-853 level, which an update of ``kraft.version`` may raise only where
    ``may_write_voters`` (a Raft quorum's: :func:`refusal`)."""
    records: list[MetadataRecord] = []
    seen: set[str] = set()
    writes_voters = False
    for update in updates:
        reason = refusal(update.feature, update.level, image, update.upgrade_type, kraft_version,
                         may_write_voters=may_write_voters)
        if reason is None and update.feature in seen:
            reason = "The feature is named more than once in the request."
        seen.add(update.feature)
        if reason is not None:
            return refused_plan(updates, update.feature, update.level, reason)
        if update.feature == KRAFT_VERSION.name:
            writes_voters = update.level > kraft_version
        else:
            records.append(FeatureLevelRecord(update.feature, update.level))
    if records:
        records = [r for r in initial_records(image) if r.name not in seen] + records
    return FeaturesPlan(records, [FeatureUpdateResult(u.feature) for u in updates], writes_voters)
