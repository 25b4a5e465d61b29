"""What a group runs with, read from the metadata image: the one resolver of a group's effective config, and whether
the cluster serves share groups.

A group's dynamic configs (GROUP config resources, set with IncrementalAlterConfigs and kept as ConfigRecords in the
metadata log) reach every broker through its image, so every broker resolves the same values; a group that sets no
key runs with its broker's settings (``settings.group_configs`` has the rules).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

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


#: Groups whose resolved config :class:`ShareGroupConfigs` keeps at most (then it starts over): ShareFetch names any
#: group id a client likes.
_KEPT_CONFIGS = 4096


class ShareGroupConfigs:
    """:func:`share_group_config` for the share partitions, which ask on every fetch and acknowledgement (a ShareFetch
    asked several times: resolving each time was about a tenth of its handler's time). A resolved config is kept
    while the image's group configs are the same object: an image that changes any group's configs carries a new
    mapping (unchanged ones carry the old one on), so an altered config still applies from the next use on."""

    def __init__(self, image: Callable[[], MetadataImage], settings: ShareGroupSettings) -> None:
        self._image = image
        self._settings = settings
        self._source: Mapping[str, Mapping[str, str]] | None = None
        self._kept: dict[str, ShareGroupConfig] = {}

    def __call__(self, group_id: str) -> ShareGroupConfig:
        configs = self._image().group_configs
        if configs is not self._source or len(self._kept) >= _KEPT_CONFIGS:
            self._source = configs
            self._kept.clear()
        config = self._kept.get(group_id)
        if config is None:
            config = self._kept[group_id] = effective_share_group_config(self._settings, configs.get(group_id, {}))
        return config


def consumer_group_config(image: MetadataImage, settings: ConsumerGroupSettings, group_id: str) -> ConsumerGroupConfig:
    """The effective session time-out and heartbeat interval of KIP-848 consumer group ``group_id``."""
    return effective_consumer_group_config(settings, image.group_configs.get(group_id, {}))
