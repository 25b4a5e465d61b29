"""Kafka's connection quotas on a running broker: ``max.connections`` and its siblings changed with AlterConfigs
(cluster-wide or on this broker) apply to the connections accepted from now on.

The listeners share one ``wire.connection_gate.ConnectionGate``; this watches the metadata image and reconfigures
the gate when one of the dynamic values changed. The new settings are built off the event loop (host names in the per-IP
overrides are resolved), and a later change that finished first is not undone by an earlier one.
"""

from __future__ import annotations

import asyncio
import logging

from metadata.image import MetadataImage
from settings.connection_limits import dynamic_texts
from settings.server import ServerConfig
from wire.connection_gate import ConnectionGate
from wire.connection_limits import ConnectionLimitSettings

logger = logging.getLogger(__name__)


class ConnectionLimitsWatcher:
    """Subscribed to the image: reconfigures ``gate`` when this broker's dynamic connection quota keys change."""

    def __init__(self, config: ServerConfig, gate: ConnectionGate) -> None:
        self._config = config
        self._gate = gate
        self._wanted: tuple[str | None, ...] = ()  # the dynamic values last asked for

    def __call__(self, old: MetadataImage, new: MetadataImage) -> None:
        node_id = self._config.node_id
        node_dynamic = new.node_configs.get(node_id)
        wanted = dynamic_texts(new.broker_configs, node_dynamic)
        if wanted == dynamic_texts(old.broker_configs, old.node_configs.get(node_id)):
            return
        self._wanted = wanted

        def apply(built: asyncio.Future[ConnectionLimitSettings]) -> None:
            if built.cancelled() or wanted != self._wanted:
                return
            if built.exception() is not None:
                logger.error("broker %d cannot apply the new connection quotas: %s", node_id, built.exception())
                return
            self._gate.reconfigure(built.result())

        asyncio.get_running_loop().run_in_executor(
            None, self._config.connection_limits, new.broker_configs, node_dynamic
        ).add_done_callback(apply)
