"""What a new cluster gets when a broker (or combined) node first starts: the SCRAM users of ``--add-scram`` and the
feature levels of ``--feature``, given on ``fjord server start``'s command line, or left by ``fjord storage format``
in the metadata directory's ``bootstrap.properties`` (``settings.bootstrap_file``).

Both are applied through the node's controller before the broker joins (``controller.scram_bootstrap``,
``controller.feature_bootstrap``): users only if they do not exist, levels only if the cluster has not finalized its
features. Kafka applies a format's bootstrap records to a new cluster only (an empty metadata log), so the format's
users are created only while no broker has registered yet: a broker added to a running cluster by the same
provisioning script does not bring back a user deleted since, and says which users it left out. What the format
left is then removed from the file, so the node's next restart does not apply it again. Given both ways, the command
line's option wins for the same user and mechanism, or the same feature.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from controller.feature_bootstrap import finalize_initial_features, parse_feature
from controller.scram_bootstrap import add_scram_credentials
from metadata.controller_api import ControllerClient, FeatureUpdate
from settings.bootstrap_file import BOOTSTRAP_PROPERTIES, Bootstrap, read_bootstrap, write_bootstrap
from settings.scram_option import AddScram, last_of_each
from settings.server import ServerConfig
from storage.config import ConfigError

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class FirstStart:
    """The users and levels to apply: the command line's users, the format's (None: no format left any), and the
    feature levels of both."""

    scram: tuple[AddScram, ...]
    features: tuple[FeatureUpdate, ...]
    formatted: Bootstrap | None = None
    formatted_scram: tuple[AddScram, ...] = ()


def first_start(config: ServerConfig, scram: Sequence[AddScram], features: Sequence[FeatureUpdate]) -> FirstStart:
    """The command line's options merged with what the format left; ConfigError (one line naming the file) for a
    controller-only node whose file holds some, or a file that does not read."""
    given = last_of_each(scram)
    formatted = read_bootstrap(config.metadata_dir)
    if formatted is None or not (formatted.scram or formatted.features):
        return FirstStart(given, tuple(features))
    path = config.metadata_dir / BOOTSTRAP_PROPERTIES
    if "broker" not in config.process_roles:
        raise ConfigError(f"{path}: its SCRAM users and feature levels (fjord storage format --add-scram, --feature) "
                          "are a broker's or combined node's to apply (this node is a controller only)")
    try:
        from_file = [parse_feature(text) for text in formatted.features]
    except ConfigError as exc:  # a level this release does not support, in a file formatted by another
        raise ConfigError(f"{path}: {exc}") from None
    given_users = {(c.name, c.mechanism.type_id) for c in given}
    given_features = {f.feature for f in features}
    return FirstStart(
        given,
        (*[f for f in from_file if f.feature not in given_features], *features),
        formatted,
        tuple(c for c in last_of_each(formatted.scram) if (c.name, c.mechanism.type_id) not in given_users),
    )


async def apply_first_start(config: ServerConfig, controller: ControllerClient, options: FirstStart) -> None:
    """Creates the users (the format's on a new cluster only), finalizes the levels, then removes the format's from
    its file."""
    path = config.metadata_dir / BOOTSTRAP_PROPERTIES
    image = controller.image
    registered = sorted(image.brokers)
    # Those another broker of the new cluster created from the same format are no news.
    left_out = sorted({c.name for c in options.formatted_scram if image.scram_credential(c.name, c.mechanism.type_id)
                       is None})
    if left_out and registered:
        logger.warning("%s: SCRAM users %s not created: the cluster has brokers already (%s), and a format's users "
                       "are a new cluster's (create them with kafka-configs.sh --alter --add-config)", path,
                       ", ".join(left_out), ", ".join(map(str, registered)))
    try:
        await add_scram_credentials(controller, options.scram if registered else
                                    (*options.formatted_scram, *options.scram))
    except ConfigError as exc:
        raise ConfigError(f"{exc} ({path} or the command line)" if options.formatted_scram else str(exc)) from None
    await finalize_initial_features(controller, options.features, dynamic_quorum=config.dynamic_quorum)
    if options.formatted is None:
        return
    try:
        write_bootstrap(config.metadata_dir, options.formatted.applied())
    except OSError as exc:
        raise ConfigError(f"{path}: cannot remove the SCRAM users and feature levels applied: "
                          f"{exc.strerror or exc}") from None
    logger.info("%s: the format's SCRAM users (%d) and feature levels (%d) are applied and removed from the file",
                path, len(options.formatted.scram), len(options.formatted.features))
