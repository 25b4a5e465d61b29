"""Requests to the active controller of a quorum, wherever it is now: :class:`ActiveControllerChannel`.

A voter that is not active answers NOT_CONTROLLER (with the leader's id when it knows it); an unreachable one fails
to connect. Either way the request is retried on the next candidate with exponential backoff, bounded in time, and
the error that ends the retries names every voter tried. Every part of a broker's controller client sends through
one channel, so they share what it learnt about where the active controller is.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from metadata.errors import NotControllerError
from metadata.rpc.connection import ConnectionClosedError, ControllerConnection
from metadata.rpc.error_codes import RpcError, raise_for_error
from metadata.rpc.stream_rpcs import StreamRequest, StreamResponse
from storage.config import ConfigError
from storage.errors import NodeEpochExpiredError
from wire import codec, schema
from wire.sasl.client import SaslCredentials
from wire.tls import ClientTls

logger = logging.getLogger(__name__)

_BACKOFF_INITIAL_S = 0.05
_BACKOFF_MAX_S = 1.0
#: The least time one attempt waits for its answer. A write that times out is sent again, and not every write is
#: idempotent (a second CreateStream makes a second stream), so a busy controller gets seconds, not the Raft
#: request timeout meant for peers; a dead one closes the connection and is left at once.
_MIN_ATTEMPT_TIMEOUT_S = 5.0


class ControllerUnavailableError(NotControllerError):
    """No voter answered as the active controller within the retry budget.

    A NotControllerError (hence a StorageError) so the storage engine treats it like any failed metadata call.
    """


class ControllerLostWhileStoppingError(ControllerUnavailableError, NodeEpochExpiredError):
    """The node is stopping and no active controller answers: this incarnation gives up on metadata writes, as a
    fenced one does (it will never write again; its WAL keeps what it did not upload, recovered at its next
    start). A NodeEpochExpiredError so the storage engine stops retrying rather than holding up the shutdown."""


def _backoff(attempt: int) -> float:
    delay: float = min(_BACKOFF_MAX_S, _BACKOFF_INITIAL_S * 2.0 ** max(0, attempt - 1))
    return delay * (0.5 + random.random() / 2)


class ActiveControllerChannel:
    """Requests to the active controller, wherever it is now.

    ``leader_hint`` (the metadata replica's view of the Raft leader) is tried first; NOT_CONTROLLER answers and
    connection failures move on to the leader the answer names, else to the next voter in id order.
    """

    def __init__(
        self,
        voters: Mapping[int, tuple[str, int]],
        *,
        client_id: str,
        request_timeout_s: float,
        retry_budget_s: float,
        leader_hint: Callable[[], int | None] = lambda: None,
        ssl_context: ClientTls | None = None,
        sasl: SaslCredentials | None = None,
        max_attempt_s: float = float("inf"),
    ) -> None:
        """``max_attempt_s`` caps every attempt, the floor for writes included (``controller.socket.timeout.ms``)."""
        if not voters:
            raise ConfigError("controller.quorum.voters: a broker needs at least one controller")
        self._voters = dict(voters)
        self._order = sorted(voters)
        self._client_id = client_id
        self._ssl_context = ssl_context  # the CONTROLLER listener is SSL
        self._sasl = sasl  # the CONTROLLER listener is SASL: this node's own login
        self._request_timeout_s = min(request_timeout_s, max_attempt_s)  # connecting
        self._attempt_timeout_s = min(max(request_timeout_s, _MIN_ATTEMPT_TIMEOUT_S), max_attempt_s)  # an answer
        self._retry_budget_s = retry_budget_s
        self._leader_hint = leader_hint
        self._connections: dict[int, ControllerConnection] = {}
        self._closing: set[asyncio.Task[None]] = set()  # connections to a voter that moved, being closed
        self._connecting: dict[int, asyncio.Lock] = {voter: asyncio.Lock() for voter in voters}
        self._active: int | None = None
        self._closed = False
        self._stopping = False
        self._stop_deadline = float("inf")
        self._unreachable = False  # stopping, and a call already ran out of budget: later calls fail at once

    @property
    def active_id(self) -> int | None:
        """The voter that last answered as the active controller."""
        return self._active

    def stopping(self, budget_s: float) -> None:
        """The node shuts down: each call gets at most ``budget_s``, and once one finds no active controller in
        it the rest fail at once. A combined node stopping last finds no majority of voters left; its uploads
        and closes cannot commit (its WAL keeps the data for its next start), so it must not spend the full
        retry budget on each of them."""
        self._stopping = True
        self._retry_budget_s = min(self._retry_budget_s, budget_s)
        # Calls already retrying (a partition opening when the stop came) end by then too, not at their own deadline.
        self._stop_deadline = time.monotonic() + budget_s

    def update_voters(self, voters: Mapping[int, tuple[str, int]]) -> None:
        """The quorum's voters changed (KIP-853): a voter added is tried like the others, one that moved is reached
        at its new address. A removed one stays a candidate: it answers NOT_CONTROLLER naming the leader."""
        for voter, address in voters.items():
            if self._voters.get(voter) == address:
                continue
            self._voters[voter] = address
            self._connecting.setdefault(voter, asyncio.Lock())
            stale = self._connections.pop(voter, None)
            if stale is not None:
                task = asyncio.get_running_loop().create_task(stale.close())
                self._closing.add(task)
                task.add_done_callback(self._closing.discard)
        self._order = sorted(self._voters)

    def _address(self, voter: int) -> str:
        host, port = self._voters[voter]
        return f"{host}:{port}"

    def _first_candidate(self) -> int:
        for candidate in (self._active, self._leader_hint()):
            if candidate is not None and candidate in self._voters:
                return candidate
        return self._order[0]

    def _next_candidate(self, current: int, named: int | None) -> int:
        if named is not None and named in self._voters and named != current:
            return named
        hint = self._leader_hint()
        if hint is not None and hint in self._voters and hint != current:
            return hint
        return self._order[(self._order.index(current) + 1) % len(self._order)]

    async def _connection(self, voter: int) -> ControllerConnection:
        async with self._connecting[voter]:
            existing = self._connections.get(voter)
            if existing is not None and existing.connected:
                return existing
            host, port = self._voters[voter]
            connection = ControllerConnection(
                host, port, client_id=self._client_id, ssl_context=self._ssl_context, sasl=self._sasl, node_id=voter
            )
            try:
                await connection.connect(timeout=self._request_timeout_s)
            except BaseException:
                await connection.close()
                raise
            self._connections[voter] = connection
            return connection

    async def _drop(self, voter: int) -> None:
        connection = self._connections.pop(voter, None)
        if connection is not None:
            await connection.close()

    async def _call(
        self,
        what: str,
        send: Callable[[ControllerConnection], Any],
        redirect: Callable[[Any], tuple[bool, int | None]],
        *,
        budget_s: float | None = None,
    ) -> Any:
        """Runs ``send`` on the active controller; ``redirect(response)`` says whether the answer is
        NOT_CONTROLLER and which leader it names. Raises ControllerUnavailableError when the budget runs out."""
        if self._closed:
            raise ControllerUnavailableError(f"{what}: the controller channel is closed")
        if self._unreachable:
            raise ControllerLostWhileStoppingError(
                f"{what}: no active controller answered while the node is stopping; what is not uploaded stays in "
                "the WAL for the next start"
            )
        deadline = time.monotonic() + (self._retry_budget_s if budget_s is None else budget_s)
        voter = self._first_candidate()
        attempt = 0
        problems: dict[int, str] = {}
        while True:
            attempt += 1
            named: int | None = None
            try:
                connection = await self._connection(voter)
                response = await send(connection)
            except (OSError, TimeoutError, ConnectionClosedError) as exc:
                await self._drop(voter)
                problems[voter] = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            else:
                refused, named = redirect(response)
                if not refused:
                    self._unreachable = False
                    if self._active != voter:
                        logger.info("active controller is node %d (%s)", voter, self._address(voter))
                    self._active = voter
                    return response
                problems[voter] = "not the active controller" + (f" (names {named})" if named is not None else "")
                if self._active == voter:
                    self._active = None
            now = time.monotonic()
            if now >= deadline or self._closed or now >= self._stop_deadline:
                tried = "; ".join(f"node {v} at {self._address(v)}: {p}" for v, p in sorted(problems.items()))
                message = f"{what}: no active controller answered after {attempt} attempts ({tried})"
                if self._stopping:
                    self._unreachable = True
                    raise ControllerLostWhileStoppingError(message)
                raise ControllerUnavailableError(message)
            voter = self._next_candidate(voter, named)
            await asyncio.sleep(min(_backoff(attempt), max(0.0, deadline - time.monotonic())))

    async def kafka(
        self,
        api_key: int,
        version: int,
        what: str,
        *,
        budget_s: float | None = None,
        redirect: Callable[[Any], tuple[bool, int | None]] | None = None,
        idempotent: bool = False,
        **fields: object,
    ) -> Any:
        """A Kafka-protocol request (kio entity built from ``fields``) answered by the active controller; see
        :meth:`request`."""
        entity = schema.build(codec.request_class(api_key, version), **fields)
        return await self.request(entity, what, budget_s=budget_s, redirect=redirect, idempotent=idempotent)

    async def request(
        self,
        entity: Any,
        what: str,
        *,
        budget_s: float | None = None,
        redirect: Callable[[Any], tuple[bool, int | None]] | None = None,
        idempotent: bool = False,
    ) -> Any:
        """A kio request entity answered by the active controller; ``redirect`` overrides how a refusal is
        recognised (default: NOT_CONTROLLER anywhere in the answer). An ``idempotent`` request (a heartbeat, a
        read) gives up on a silent controller sooner."""
        timeout = self._request_timeout_s if idempotent else self._attempt_timeout_s

        async def send(connection: ControllerConnection) -> Any:
            return await connection.request(entity, timeout=timeout)

        return await self._call(what, send, redirect or _kafka_redirect, budget_s=budget_s)

    async def stream(self, request: StreamRequest, what: str, *, stream_id: int = -1) -> Any:
        """One of Fjord's own RPCs; returns its result or raises the storage error it carries."""

        async def send(connection: ControllerConnection) -> StreamResponse:
            return await connection.stream_request(request, timeout=self._attempt_timeout_s)

        def redirect(response: StreamResponse) -> tuple[bool, int | None]:
            if response.error_code != RpcError.NOT_CONTROLLER:
                return False, None
            return True, response.leader_id if response.leader_id >= 0 else None

        response: StreamResponse = await self._call(what, send, redirect)
        raise_for_error(response.error_code, response.error_message, response.leader_id, stream_id)
        return response.result

    async def close(self) -> None:
        self._closed = True
        for voter in list(self._connections):
            await self._drop(voter)


def _kafka_redirect(response: Any) -> tuple[bool, int | None]:
    """NOT_CONTROLLER anywhere in a Kafka response (top level, or per topic / resource)."""
    codes: list[int] = []
    code = getattr(response, "error_code", None)
    if code is not None:
        codes.append(int(code))
    for name in ("topics", "responses", "results"):
        for item in getattr(response, name, None) or ():
            item_code = getattr(item, "error_code", None)
            if item_code is not None:
                codes.append(int(item_code))
    return int(ErrorCode.not_controller) in codes, None


def quorum_leader_redirect(response: Any) -> tuple[bool, int | None]:
    """What only the Raft leader answers: DescribeQuorum, where a follower names the leader it knows, and the voter
    changes (AddRaftVoter, RemoveRaftVoter), which a follower refuses as a whole."""
    refused = {int(ErrorCode.not_leader_or_follower), int(ErrorCode.not_controller)}
    if int(response.error_code) in refused:
        return True, None
    if not hasattr(response, "topics"):
        return False, None
    if not response.topics:
        return True, None
    partition = response.topics[0].partitions[0]
    if int(partition.error_code) in refused:
        leader = int(partition.leader_id)
        return True, leader if leader >= 0 else None
    return False, None
