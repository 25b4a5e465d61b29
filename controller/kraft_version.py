"""UpdateFeatures of ``kraft.version`` (KIP-853): the quorum's level, and its upgrade from 0 to 1.

A static quorum (``controller.quorum.voters``) runs at ``kraft.version`` 0: its voters are the configuration's and
cannot change. Kafka 4.1's ``kafka-features upgrade --feature kraft.version=1`` makes it dynamic: the leader writes
the voters to the log, and the log's sets rule from then on (AddRaftVoter and RemoveRaftVoter may change them, and
every node takes them from the log, not from its configuration). The controller's decision
(``controller.decisions.features``) says whether an update raises the level; this module has the quorum do it
before the update's feature records are committed, as Kafka writes the kraft.version and the voter set in a
control batch of their own ahead of the metadata batch. Should the quorum not manage it, the whole update is
refused with the reason, nothing committed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from controller.decisions.features import FeaturesPlan, refused_plan
from metadata.controller_api import FeatureUpdate
from metadata.errors import ControllerError
from wire.api_versions import KRAFT_VERSION

#: How long an upgrade waits for the voters' entry to be committed (Kafka's UpdateRaftVoter default).
WRITE_VOTERS_TIMEOUT_S = 30.0


class QuorumVersion(Protocol):
    """The Raft quorum a controller runs in (``controller.quorum_membership.QuorumMembership``)."""

    @property
    def kraft_version(self) -> int:
        """The level in force: 1 when the log names the voters (or a dynamic quorum's configuration does)."""
        ...

    async def write_voters(self, validate_only: bool, timeout_s: float) -> None:
        """Writes the configured voters to the log and waits for the commit; ControllerError when it cannot."""
        ...


async def raise_kraft_version(plan: FeaturesPlan, quorum: QuorumVersion | None, updates: Sequence[FeatureUpdate],
                              validate_only: bool) -> FeaturesPlan:
    """``plan`` once its ``kraft.version`` upgrade is done (or, ``validate_only``, found possible), else the plan
    that refuses every update with the quorum's reason."""
    if not plan.writes_voters or quorum is None:
        return plan
    try:
        await quorum.write_voters(validate_only, WRITE_VOTERS_TIMEOUT_S)
    except ControllerError as exc:
        return refused_plan(updates, KRAFT_VERSION.name, KRAFT_VERSION.max_version, exc.message, exc.error)
    return plan
