"""What a new cluster gets when a broker (or combined) node first starts: the SCRAM users of ``--add-scram`` and the
feature levels of ``--feature``, given on ``fjord server start``'s command line, or left by ``fjord storage format``
in the metadata directory's ``bootstrap.properties`` (``settings.bootstrap_file``).

Both are applied through the node's controller before the broker joins (``controller.scram_bootstrap``,
``controller.feature_bootstrap``): users only if they do not exist, levels only if the cluster has not finalized its
features. What the format left is then removed from the file, once applied: Kafka applies its bootstrap checkpoint
only to an empty metadata log, so a user deleted later with ``kafka-configs.sh`` must not come back at the node's
next restart. Given both ways, the command line's option wins for the same user and mechanism, or the same feature.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from controller.feature_bootstrap import finalize_initial_features, parse_feature
from controller.scram_bootstrap import add_scram_credentials
from metadata.controller_api import ControllerClient, FeatureUpdate
from settings.bootstrap_file import BOOTSTRAP_PROPERTIES, Bootstrap, read_bootstrap, write_bootstrap
from settings.scram_option import AddScram
from settings.server import ServerConfig
from storage.config import ConfigError

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class FirstStart:
    """The users and levels to apply, and the format's bootstrap they came from in part (None: none)."""

    scram: tuple[AddScram, ...]
    features: tuple[FeatureUpdate, ...]
    formatted: Bootstrap | None


def first_start(config: ServerConfig, scram: Sequence[AddScram], features: Sequence[FeatureUpdate]) -> FirstStart:
    """The command line's options merged with what the format left; ConfigError (one line naming the file) for a
    controller-only node whose file holds some, or a file that does not read."""
    formatted = read_bootstrap(config.metadata_dir)
    if formatted is None or not (formatted.scram or formatted.features):
        return FirstStart(tuple(scram), tuple(features), None)
    if "broker" not in config.process_roles:
        raise ConfigError(f"{config.metadata_dir / BOOTSTRAP_PROPERTIES}: its SCRAM users and feature levels "
                          "(fjord storage format --add-scram, --feature) are a broker's or combined node's to apply "
                          "(this node is a controller only)")
    given_users = {(c.name, c.mechanism.type_id) for c in scram}
    given_features = {f.feature for f in features}
    try:
        from_file = [parse_feature(text) for text in formatted.features]
    except ConfigError as exc:  # a level this release does not support, in a file formatted by another
        raise ConfigError(f"{config.metadata_dir / BOOTSTRAP_PROPERTIES}: {exc}") from None
    return FirstStart(
        (*[c for c in formatted.scram if (c.name, c.mechanism.type_id) not in given_users], *scram),
        (*[f for f in from_file if f.feature not in given_features], *features),
        formatted,
    )


async def apply_first_start(config: ServerConfig, controller: ControllerClient, options: FirstStart) -> None:
    """Creates the users, finalizes the levels, then removes the format's from its file."""
    await add_scram_credentials(controller, options.scram)
    await finalize_initial_features(controller, options.features)
    if options.formatted is None:
        return
    try:
        path = write_bootstrap(config.metadata_dir, options.formatted.applied())
    except OSError as exc:
        raise ConfigError(f"{config.metadata_dir / BOOTSTRAP_PROPERTIES}: cannot remove the SCRAM users and feature "
                          f"levels applied: {exc.strerror or exc}") from None
    logger.info("%s: the format's SCRAM users (%d) and feature levels (%d) are applied and removed from the file",
                path, len(options.formatted.scram), len(options.formatted.features))
