"""A voter whose CONTROLLER listener moved tells the quorum (KIP-853's UpdateRaftVoter).

The voters' endpoints are the metadata log's (``raft.voter_set``): every controller and broker reaches a voter where
the log says it listens. A controller restarted with another host or port in its CONTROLLER listener would stay
unreachable there, so, as Kafka's voters do, once it knows the voters and finds itself among them with another
endpoint than it advertises, it sends UpdateRaftVoter to the leader, which appends the set with the new endpoint,
and asks again each second until the log says it. A leader that moved updates the set itself (over the network its
old endpoint, which DescribeQuorum still names, would not answer): a lone ``--standalone`` voter restarted on another
port so still tells brokers where it is.
A static quorum's endpoints are its configuration's, so only a dynamic quorum's voters announce, and only one that
names its host (a listener bound to every interface and not advertised has none to announce).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping

from controller.node_roles import reachable_controller_endpoint
from metadata.errors import ControllerError
from metadata.remote.quorum_admin import QuorumAdminError, own_quorum_client
from raft.voter_set import Endpoint, Voter, VoterSet
from settings.server import ServerConfig

logger = logging.getLogger(__name__)

#: Between attempts (no leader yet, a change pending, a refusal).
_RETRY_S = 1.0
_TIMEOUT_S = 30.0


async def announce_endpoint(
    config: ServerConfig,
    directory_id: uuid.UUID | None,
    voters: Callable[[], VoterSet],
    addresses: Callable[[], Mapping[int, tuple[str, int]]],
    *,
    changed: asyncio.Event,
    update_if_leading: Callable[[Voter], Awaitable[bool]],
) -> None:
    """Runs for the controller's life: whenever the voter set names this node with another CONTROLLER endpoint than
    it advertises, asks the leader to update it. ``changed`` is set whenever the voter set changes;
    ``update_if_leading(voter)`` makes the change when this node leads (False: it does not). Cancelled when the
    controller stops."""
    node_id = config.node_id
    endpoint = reachable_controller_endpoint(config)
    if endpoint is None:  # bound to every interface: whatever the log says is the operator's (no host to announce)
        return
    name, host, port = endpoint
    own = Endpoint(name, host, port)
    attempts = 0
    while True:
        mine = voters().get(node_id)
        if mine is None or own in mine.endpoints or (
                None not in (mine.directory_id, directory_id) and mine.directory_id != directory_id):
            attempts = 0
            await changed.wait()  # not a voter (or another directory's), or the log has it right: until it changes
            changed.clear()
            continue
        attempts += 1
        try:
            if not await update_if_leading(Voter(node_id, directory_id, (own,))):
                client = own_quorum_client(config, addresses(), _TIMEOUT_S)
                await client.update_voter(node_id, directory_id, ((name, host, port),))
        except (QuorumAdminError, ControllerError) as exc:
            if attempts in (1, 10) or attempts % 100 == 0:
                logger.info("controller %d: the voters name it at %s, it listens at %s:%d: %s; asking again",
                            node_id, ",".join(f"{e.host}:{e.port}" for e in mine.endpoints), host, port, exc)
            await asyncio.sleep(_RETRY_S)
            continue
        logger.info("controller %d announced its CONTROLLER listener %s://%s:%d to the quorum (UpdateRaftVoter)",
                    node_id, name, host, port)
        with contextlib.suppress(TimeoutError):  # until its own log has the change (else it would ask again)
            await asyncio.wait_for(changed.wait(), _RETRY_S)
        changed.clear()
