"""A voter whose CONTROLLER listener moved, or whom the voter set names without its directory, tells the quorum
(KIP-853's UpdateRaftVoter).

The voters' endpoints are the metadata log's (``raft.voter_set``): every controller and broker reaches a voter where
the log says it listens. A controller restarted with another host or port in its CONTROLLER listener would stay
unreachable there, so, as Kafka's voters do, once it knows the voters and finds itself among them with another
endpoint than it advertises, it sends UpdateRaftVoter to the leader, which appends the set with the new endpoint,
and asks again each second until the log says it. A leader that moved updates the set itself (over the network its
old endpoint, which DescribeQuorum still names, would not answer): a lone ``--standalone`` voter restarted on another
port so still tells brokers where it is.
A static quorum's endpoints are its configuration's, so only a dynamic quorum's voters announce (a static one's
once ``kraft.version`` 1 put its voters in the log), and a moved listener only when it names its host (a listener
bound to every interface and not advertised has none to announce).

The voters a ``kraft.version`` upgrade writes are the static list's, which names no directories: each voter then
announces its own ``directory.id``, as Kafka's voters have told their leader theirs before it writes the set, so
that the set names every voter's directory as a dynamic quorum's does (DescribeQuorum shows it, and RemoveRaftVoter
of a directory that is not the voter's is refused).
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
    from_log: Callable[[], bool],
    changed: asyncio.Event,
    update_if_leading: Callable[[Voter], Awaitable[bool]],
) -> None:
    """Runs for the controller's life: whenever the voter set is the log's (``from_log``) and names this node with
    another CONTROLLER endpoint than it advertises, or without its directory, asks the leader to update it.
    ``changed`` is set whenever the voter set changes; ``update_if_leading(voter)`` makes the change when this node
    leads (False: it does not). Cancelled when the controller stops."""
    node_id = config.node_id
    endpoint = reachable_controller_endpoint(config)
    own = Endpoint(*endpoint) if endpoint is not None else None
    attempts = 0
    task = asyncio.current_task()
    while True:
        if task is not None and task.cancelling():
            # The controller stops: a cancellation an awaited call turned into its own error (a timeout, a failed
            # request) must still end the loop, or the stop would wait for it forever.
            raise asyncio.CancelledError
        mine = voters().get(node_id)
        announced = None if mine is None or not from_log() else _announcement(mine, own, directory_id)
        if announced is None:
            attempts = 0
            await changed.wait()  # not a voter (or another directory's), or the log has it right: until it changes
            changed.clear()
            continue
        assert mine is not None
        attempts += 1
        what = _described(announced, mine)
        try:
            if not await update_if_leading(announced):
                client = own_quorum_client(config, addresses(), _TIMEOUT_S)
                await client.update_voter(node_id, directory_id,
                                          tuple((e.name, e.host, e.port) for e in announced.endpoints))
        except (QuorumAdminError, ControllerError) as exc:
            if attempts in (1, 10) or attempts % 100 == 0:
                logger.info("controller %d: announcing %s: %s; asking again", node_id, what, exc)
            await asyncio.sleep(_RETRY_S)
            continue
        logger.info("controller %d announced %s to the quorum (UpdateRaftVoter)", node_id, what)
        with contextlib.suppress(TimeoutError):  # until its own log has the change (else it would ask again)
            async with asyncio.timeout(_RETRY_S):
                await changed.wait()
        changed.clear()


def _announcement(mine: Voter, own: Endpoint | None, directory_id: uuid.UUID | None) -> Voter | None:
    """What this node would tell the quorum about itself (None: nothing): its CONTROLLER listener where the set
    names another (``own`` None: it has no host to announce), and its directory where the set names none. A set
    naming another directory for this node id is another voter's entry, not this node's to change."""
    if None not in (mine.directory_id, directory_id) and mine.directory_id != directory_id:
        return None
    endpoints = (own,) if own is not None and own not in mine.endpoints else mine.endpoints
    undirected = mine.directory_id is None and directory_id is not None
    if (endpoints == mine.endpoints and not undirected) or not endpoints:
        return None
    return Voter(mine.node_id, directory_id, endpoints)


def _described(announced: Voter, mine: Voter) -> str:
    parts: list[str] = []
    if announced.endpoints != mine.endpoints:
        named = ",".join(f"{m.host}:{m.port}" for m in mine.endpoints) or "none"
        parts.extend(f"its CONTROLLER listener {e.name}://{e.host}:{e.port} (the voters name {named})"
                     for e in announced.endpoints)
    if mine.directory_id is None and announced.directory_id is not None:
        parts.append(f"its directory {announced.directory_id}")
    return " and ".join(parts)
