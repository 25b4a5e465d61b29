"""The first SCRAM users of a cluster, given as ``kafka-storage format --add-scram`` takes them
(``settings.scram_option``): on ``fjord server start``'s command line, or by ``fjord storage format`` in the metadata
directory's ``bootstrap.properties``.

A broker (or combined) node creates these credentials when it starts, before its listeners accept connections, and
only those not already in the metadata: restarting with the same option changes nothing, and a password changed
since with ``kafka-configs.sh`` stays changed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from kio.schema.errors import ErrorCode

from metadata.controller_api import ControllerClient, ScramUpsertion
from settings.scram_option import OPTION, AddScram
from storage.config import ConfigError

logger = logging.getLogger(__name__)


async def add_scram_credentials(controller: ControllerClient, credentials: Sequence[AddScram]) -> None:
    """Creates the credentials that do not exist yet; ConfigError if the controller refuses one."""
    image = controller.image
    missing = [
        ScramUpsertion(c.name, c.mechanism.type_id, c.iterations, c.salt, c.salted_password)
        for c in credentials if image.scram_credential(c.name, c.mechanism.type_id) is None
    ]
    if not missing:
        return
    for result in await controller.alter_user_scram_credentials((), missing):
        if result.error is not ErrorCode.none:
            raise ConfigError(f"{OPTION}: SCRAM credentials of user {result.user} refused: {result.message}")
        logger.info("SCRAM credentials of user %r created (%s)", result.user, OPTION)
