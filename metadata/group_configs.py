"""What a group runs with, read from the metadata image: the one resolver of a group's effective config, and whether
the cluster serves share groups.

A group's dynamic configs (GROUP config resources, set with IncrementalAlterConfigs and kept as ConfigRecords in the
metadata log) reach every broker through its image, so every broker resolves the same values; a group that sets no
key runs with its broker's settings (``settings.group_configs`` has the rules).
"""

from __future__ import annotations

from metadata.image import MetadataImage
from settings.consumer_groups import ConsumerGroupSettings
from settings.group_configs import ConsumerGroupConfig, effective_consumer_group_config, effective_share_group_config
from settings.share_groups import ShareGroupConfig, ShareGroupSettings
from wire.api_versions import SHARE_VERSION


def share_groups_enabled(image: MetadataImage) -> bool:
    """The cluster serves share groups: ``share.version`` is finalized at 1 or above (Kafka 4.2 enables them so, and
    answers the share APIs with UNSUPPORTED_VERSION while it is 0)."""
    return image.feature_level(SHARE_VERSION.name) >= 1


def share_group_config(image: MetadataImage, settings: ShareGroupSettings, group_id: str) -> ShareGroupConfig:
    """The effective config of share group ``group_id``: its GROUP configs in ``image`` over the broker's
    ``settings`` (``config.share_groups``). Cheap (two lookups): call it where the value is used, so an altered
    config applies from the next use on."""
    return effective_share_group_config(settings, image.group_configs.get(group_id, {}))


def consumer_group_config(image: MetadataImage, settings: ConsumerGroupSettings, group_id: str) -> ConsumerGroupConfig:
    """The effective session time-out and heartbeat interval of KIP-848 consumer group ``group_id``."""
    return effective_consumer_group_config(settings, image.group_configs.get(group_id, {}))
