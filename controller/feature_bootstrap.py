"""The initial KIP-584 feature levels of a new cluster, given on the command line as ``kafka-storage format
--feature`` takes them::

    fjord server start --feature transaction.version=1 --feature group.version=0

Fjord has no separate format step, so a broker (or combined) node finalizes these levels when it starts, before its
listeners accept connections, and only when the cluster has not finalized its features yet: once it has (a first
start, or ``kafka-features.sh`` since), the option changes nothing, and a level changed with ``kafka-features.sh``
stays changed. Without the option a new cluster runs at the defaults of ``wire.api_versions.FEATURES``
(``transaction.version`` 2, ``group.version`` 1). ``metadata.version`` can only be its one supported level here.
``kraft.version`` may be named as Kafka's format takes it, but only at the quorum's own level (1 for a dynamic
quorum, 0 for a static one), as Kafka's format refuses any other: a static quorum becomes dynamic once it runs,
with ``kafka-features upgrade --feature kraft.version=1`` (``controller.kraft_version``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from kio.schema.errors import ErrorCode

from metadata.controller_api import ControllerClient, FeatureUpdate
from storage.config import ConfigError
from wire.api_versions import (
    FEATURES,
    FEATURES_BY_NAME,
    KRAFT_VERSION,
    METADATA_RELEASES,
    METADATA_VERSION,
    RELEASE_DEFAULT_LEVEL,
    kraft_version_level,
    release_metadata_level,
)

logger = logging.getLogger(__name__)

OPTION = "--feature"


def parse_feature(text: str) -> FeatureUpdate:
    """``name=level``; ConfigError for an unknown feature or a level this software does not support."""
    name, sep, level_text = text.partition("=")
    feature = KRAFT_VERSION if name.strip() == KRAFT_VERSION.name else FEATURES_BY_NAME.get(name.strip())
    if not sep or feature is None:
        known = ", ".join((*FEATURES_BY_NAME, KRAFT_VERSION.name))
        raise ConfigError(f"{OPTION}: expected NAME=LEVEL with a NAME among {known}, got {text!r}")
    try:
        level = int(level_text.strip())
    except ValueError:
        raise ConfigError(f"{OPTION} {feature.name}: the level must be a number, got {level_text!r}") from None
    lowest = 0 if feature is not METADATA_VERSION else feature.max_version
    if not lowest <= level <= feature.max_version:
        raise ConfigError(f"{OPTION} {feature.name}: level {level} is not supported "
                          f"({lowest}-{feature.max_version})")
    return FeatureUpdate(feature.name, level)


def release_features(release: str, given: Sequence[FeatureUpdate]) -> list[FeatureUpdate]:
    """``kafka-storage format --release-version``: ``metadata.version`` of that release and every other feature at
    the release's default level, with the ``--feature`` levels ``given`` over them, as Kafka's format takes both.
    Fjord serves one ``metadata.version``, so the release must be it (3.6-IV2, or 3.6); ConfigError otherwise."""
    level = release_metadata_level(release)
    served = METADATA_RELEASES[METADATA_VERSION.max_version]
    if level is None:
        raise ConfigError(f"--release-version: unknown release {release!r} (this release serves {served})")
    if level != METADATA_VERSION.max_version:
        raise ConfigError(f"--release-version {release}: metadata.version {METADATA_RELEASES[level]} is not served "
                          f"(this release serves {served} only)")
    if any(u.feature == METADATA_VERSION.name for u in given):
        raise ConfigError("--release-version and --feature metadata.version: give one of them")
    named = {u.feature for u in given}
    defaults = [FeatureUpdate(f.name, RELEASE_DEFAULT_LEVEL) for f in FEATURES
                if f is not METADATA_VERSION and f.name not in named]
    return [FeatureUpdate(METADATA_VERSION.name, level), *defaults, *given]


async def finalize_initial_features(controller: ControllerClient, levels: Sequence[FeatureUpdate], *,
                                    dynamic_quorum: bool) -> None:
    """Finalizes ``levels`` when the cluster has no finalized features yet; ConfigError if the controller refuses,
    or if ``kraft.version`` is not the quorum's level (``dynamic_quorum``: the configuration names bootstrap
    servers, not voters)."""
    image = controller.image
    if not levels:
        return
    if image.features_finalized:
        logger.info("%s ignored: the cluster finalized its features already (kafka-features.sh changes them)",
                    OPTION)
        return
    quorum_level = kraft_version_level(dynamic_quorum)
    for update in levels:
        if update.feature == KRAFT_VERSION.name and update.level != quorum_level:
            how = ("controller.quorum.bootstrap.servers instead of controller.quorum.voters" if update.level else
                   "controller.quorum.voters instead of controller.quorum.bootstrap.servers")
            raise ConfigError(f"{OPTION}: Cannot set kraft.version to {update.level} unless the configuration names "
                              f"{how}; a running static quorum becomes dynamic with kafka-features upgrade "
                              "--feature kraft.version=1")
    levels = [u for u in levels if u.feature != KRAFT_VERSION.name]
    if not levels:
        return
    updates = [
        FeatureUpdate(u.feature, u.level, FeatureUpdate.UPGRADE if u.level >= image.feature_level(u.feature)
                      else FeatureUpdate.UNSAFE_DOWNGRADE)
        for u in levels
    ]
    for result in await controller.update_features(updates, validate_only=False):
        if result.error is not ErrorCode.none:
            raise ConfigError(f"{OPTION}: {result.feature} refused: {result.message}")
    logger.info("initial feature levels finalized (%s): %s", OPTION,
                ", ".join(f"{u.feature}={u.level}" for u in updates))
