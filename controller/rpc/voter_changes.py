"""AddRaftVoter, RemoveRaftVoter and UpdateRaftVoter (KIP-853) on the CONTROLLER listener: a kio request in, a kio
response out.

The active controller's Raft leader appends the change as one VOTERS entry and the answer waits until it is
committed (also for AddRaftVoter v1's ``ack_when_committed`` false: the stronger answer, never a wrong one). What
the change must satisfy, and the error codes of each refusal, are the Raft core's (``raft.core.change_voters``);
what the request itself must carry is checked here, as Kafka's KafkaRaftClient does before its handlers.
"""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from controller.rpc.served_quorum import ServedQuorum
from metadata.errors import ControllerError
from raft.voter_set import Endpoint, Voter
from wire import schema
from wire.api_versions import kraft_version_level

logger = logging.getLogger(__name__)

#: Kafka's AddRaftVoter ``timeout_ms`` default, used where a client sends none that is usable.
_DEFAULT_TIMEOUT_MS = 30_000
#: The ``kraft.version`` of a quorum whose voters may change (a static one refuses every change before this).
_KRAFT_VERSION = kraft_version_level(dynamic_quorum=True)


async def add_raft_voter(quorum: ServedQuorum, response_cls: type[Any], request: Any) -> Any:
    mismatch = _cluster_mismatch(quorum, request)
    if mismatch is not None:
        return _answer(response_cls, ErrorCode.inconsistent_cluster_id, mismatch)
    voter, problem = _voter(request, "AddRaftVoter")
    if problem is not None:
        return _answer(response_cls, ErrorCode.invalid_request, problem)
    try:
        await quorum.add_voter(voter, _timeout_s(request))
    except ControllerError as exc:
        return _answer(response_cls, exc.code, exc.message)
    return _answer(response_cls, ErrorCode.none, None)


async def update_raft_voter(quorum: ServedQuorum, response_cls: type[Any], request: Any) -> Any:
    """UpdateRaftVoter v0, which a voter sends the leader when its CONTROLLER listener moved; the answer names the
    leader as this node knows it, as Kafka's does (the sender asks it next)."""
    mismatch = _cluster_mismatch(quorum, request)
    voter, problem = _voter(request, "UpdateRaftVoter")
    feature = request.k_raft_version_feature
    if problem is None and not int(feature.min_supported_version) <= _KRAFT_VERSION <= int(
            feature.max_supported_version):
        problem = (f"voter {voter.node_id} supports kraft.version {int(feature.min_supported_version)}-"
                   f"{int(feature.max_supported_version)}, not the quorum's {_KRAFT_VERSION}")
    error, message = (ErrorCode.inconsistent_cluster_id, mismatch) if mismatch is not None else (
        (ErrorCode.invalid_request, problem) if problem is not None else (ErrorCode.none, None))
    if error is ErrorCode.none:
        try:
            await quorum.update_voter(voter, int(request.current_leader_epoch), _DEFAULT_TIMEOUT_MS / 1000)
        except ControllerError as exc:
            error, message = exc.code, exc.message
    if error is not ErrorCode.none:
        logger.info("voter update refused (%s): %s", error.name, message)
    leader_id, epoch, host, port = quorum.current_leader()
    leader = schema.build_nested(response_cls, "current_leader", leader_id=leader_id, leader_epoch=epoch, host=host,
                                 port=port)
    return schema.build(response_cls, error_code=error, current_leader=leader)


def _voter(request: Any, api: str) -> tuple[Voter, str | None]:
    """The voter an AddRaftVoter or UpdateRaftVoter names, and what is wrong with it (Kafka's INVALID_REQUEST)."""
    voter_id = int(request.voter_id)
    endpoints = tuple(Endpoint(str(lst.name), str(lst.host), int(lst.port)) for lst in request.listeners)
    problem = (
        f"voter id {voter_id} is negative" if voter_id < 0
        else f"{api} for voter {voter_id} names no listener" if not endpoints
        else f"voter {voter_id} names a listener twice" if len({e.name for e in endpoints}) < len(endpoints)
        else next((f"voter {voter_id}'s listener {e.name} has no host or port" for e in endpoints
                   if not e.host or not 0 < e.port <= 65535), None)
    )
    return Voter(voter_id, _directory(request.voter_directory_id), endpoints), problem


async def remove_raft_voter(quorum: ServedQuorum, response_cls: type[Any], request: Any) -> Any:
    mismatch = _cluster_mismatch(quorum, request)
    if mismatch is not None:
        return _answer(response_cls, ErrorCode.inconsistent_cluster_id, mismatch)
    try:  # RemoveRaftVoter carries no timeout: AddRaftVoter's default bounds the wait for the commit
        await quorum.remove_voter(int(request.voter_id), _directory(request.voter_directory_id),
                                  _DEFAULT_TIMEOUT_MS / 1000)
    except ControllerError as exc:
        return _answer(response_cls, exc.code, exc.message)
    return _answer(response_cls, ErrorCode.none, None)


def _cluster_mismatch(quorum: ServedQuorum, request: Any) -> str | None:
    given = request.cluster_id
    if given is None or given == quorum.cluster_id:
        return None
    return f"the request is for cluster {given!r}, this controller's is {quorum.cluster_id}"


def _directory(value: uuid.UUID | None) -> uuid.UUID | None:
    """Kafka's zero UUID says "no directory id", as a quorum formed without them has."""
    return value if value is not None and value.int != 0 else None


def _timeout_s(request: Any) -> float:
    """The request's ``timeout_ms``; Kafka's default where it is not positive."""
    seconds = request.timeout.total_seconds() if isinstance(request.timeout, timedelta) else 0.0
    return seconds if seconds > 0 else _DEFAULT_TIMEOUT_MS / 1000


def _answer(response_cls: type[Any], error: ErrorCode, message: str | None) -> Any:
    if error is not ErrorCode.none:
        logger.info("voter change refused (%s): %s", error.name, message)
    return schema.build(response_cls, error_code=error, error_message=message)
