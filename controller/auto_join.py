"""KIP-853's auto-join (``controller.quorum.auto.join.enable``): a controller adds itself to a dynamic quorum.

Without it, a controller formatted with ``--no-initial-controllers`` observes the quorum until an operator runs
``fjord metadata-quorum add-controller``. With it, the controller does what that command does, as Kafka's does once
it started: when it knows the voters (from its log, or through ``controller.quorum.bootstrap.servers``), it asks the
quorum's leader to remove a voter of its node id with another metadata directory (its own before the directory was
replaced: Kafka's ReplicaKey is the pair), then to add it, with its directory id and its CONTROLLER listener. The
leader refuses until it has caught up (REQUEST_TIMED_OUT), so it asks again, once a second, until it is a voter. It
joins at most once per process, as Kafka 4.2's does: a controller an operator removes afterwards stays an observer
until it restarts. A controller already a voter (``--standalone``, ``--initial-controllers``, or added earlier) asks
nothing.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Mapping

from controller.node_roles import reachable_controller_endpoint
from metadata.remote.quorum_admin import QuorumAdminError, own_quorum_client
from raft.voter_set import VoterSet
from settings.server import ServerConfig

logger = logging.getLogger(__name__)

AUTO_JOIN_KEY = "controller.quorum.auto.join.enable"
#: Kafka's AddRaftVoter timeout when a controller adds itself.
_ADD_TIMEOUT_S = 30.0
#: Between attempts (not caught up yet, no leader, a refusal).
_RETRY_S = 1.0


def auto_join_enabled(config: ServerConfig) -> bool:
    return "controller" in config.process_roles and bool(config.value(AUTO_JOIN_KEY))


async def join_quorum(
    config: ServerConfig,
    directory_id: uuid.UUID | None,
    voters: Callable[[], VoterSet],
    addresses: Callable[[], Mapping[int, tuple[str, int]]],
) -> None:
    """Runs until this controller is a voter or has been added once; ``voters()`` and ``addresses()`` are the
    node's current view (``controller.quorum_membership``). Cancelled when the controller stops."""
    node_id = config.node_id
    endpoint = reachable_controller_endpoint(config)
    if endpoint is None:
        logger.warning("controller %d does not join the quorum (%s): its CONTROLLER listener is bound to every "
                       "interface and not advertised with a host the voters could reach; name one in listeners or "
                       "advertised.listeners, or add it with fjord metadata-quorum add-controller", node_id,
                       AUTO_JOIN_KEY)
        return
    attempts = 0
    while True:
        current = voters()
        mine = [v for v in current.voters if v.node_id == node_id]
        stale = [v for v in mine if None not in (v.directory_id, directory_id) and v.directory_id != directory_id]
        if mine and not stale:
            if attempts:
                logger.info("controller %d is a voter (%s): voters %s", node_id, AUTO_JOIN_KEY, current.describe())
            return
        if not current.voters:  # not found the quorum yet (the joining controller's discovery runs meanwhile)
            await asyncio.sleep(_RETRY_S)
            continue
        attempts += 1
        client = own_quorum_client(config, addresses(), _ADD_TIMEOUT_S)
        try:
            if stale:
                await client.remove_voter(node_id, stale[0].directory_id)
                logger.info("controller %d removed its former directory %s from the voters (%s)", node_id,
                            stale[0].directory_id, AUTO_JOIN_KEY)
                await asyncio.sleep(_RETRY_S)  # then add itself, once its log has the change
                continue
            await client.add_voter(node_id, directory_id, (endpoint,))
        except QuorumAdminError as exc:
            if "DUPLICATE_VOTER" not in str(exc) and (attempts in (1, 10) or attempts % 100 == 0):
                logger.info("controller %d (%s): %s; asking again", node_id, AUTO_JOIN_KEY, exc)
            await asyncio.sleep(_RETRY_S)  # DUPLICATE_VOTER: added meanwhile, which its log says on the next pass
            continue
        logger.info("controller %d added itself to the voters with directory id %s and endpoint %s://%s:%d (%s)",
                    node_id, directory_id, *endpoint, AUTO_JOIN_KEY)
        return
