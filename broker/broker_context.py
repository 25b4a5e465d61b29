"""What every part of a broker reads of the broker it belongs to: which node it is, in which cluster, with which
settings, and the controller it asks.

The partition manager, the internal topics' owners and the coordinators are handed this, with the parts of the
broker they use as explicit arguments (the partition manager, the storage engine, the producer ids), rather than
the whole broker: so each says what it depends on, and the broker is built bottom-up without one part reaching
into another through it (``broker.broker.Broker``).
"""

from __future__ import annotations

from dataclasses import dataclass

from metadata.controller_api import ControllerClient
from settings.server import ServerConfig


@dataclass(frozen=True, slots=True)
class BrokerContext:
    node_id: int
    cluster_id: str
    config: ServerConfig
    controller: ControllerClient
