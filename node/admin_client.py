"""The Kafka admin requests of Fjord's operator tools, routed as Kafka's Admin client routes them.

Fjord's users may not have Kafka's Java tools, so commands such as ``fjord share-groups`` speak the protocol
themselves. They need what Kafka's Admin client does under its calls: a bootstrap server that answers, the cluster's
brokers and partition leaders (Metadata), a group's coordinator (FindCoordinator, asked again when the answer was
NOT_COORDINATOR or the coordinator is still loading), offsets from each partition's leader (ListOffsets), and a
question put to every broker (ListGroups). One connection per broker, opened on first use; every exchange bounded by
the tool's timeout. A failure is an :class:`AdminError` whose message names what was asked and where, so the
command prints it as one line.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from node.client_config import ClientSecurity
from settings.host_port import split_host_port
from wire import codec, schema
from wire.client import ClientConnection

METADATA = 3
LIST_OFFSETS = 2
FIND_COORDINATOR = 10
_METADATA_VERSION = 12
_LIST_OFFSETS_VERSION = 8
_FIND_COORDINATOR_VERSION = 6
_KEY_TYPE_GROUP = 0
#: ListOffsets timestamps of the log's start and end, as Kafka's OffsetSpec.earliest() and latest() send them.
EARLIEST = -2
LATEST = -1
#: Answers that mean "ask again shortly", as Kafka's Admin client retries them.
_RETRIABLE = frozenset(
    {
        ErrorCode.coordinator_not_available,
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.not_coordinator,
        ErrorCode.not_leader_or_follower,
        ErrorCode.leader_not_available,
    }
)
_RETRY_S = 0.2

T = TypeVar("T")
TopicPartition = tuple[str, int]


class AdminError(Exception):
    """Why the tool cannot go on: printed as one line, non-zero exit."""


class RetriableError(AdminError):
    """An answer Kafka's Admin client would retry (the coordinator moving or loading, a leader changing)."""

    def __init__(self, message: str, code: ErrorCode) -> None:
        super().__init__(message)
        self.code = code


def describe_error(code: ErrorCode | int, message: str | None = None) -> str:
    """``GROUP_ID_NOT_FOUND: message`` (Kafka's error name, the broker's message when it said more)."""
    name = ErrorCode(int(code)).name.upper()
    return f"{name}: {message}" if message and message.upper() != name else name


def parse_bootstrap(text: str) -> list[tuple[str, int]]:
    """``host:port[,host:port...]`` as Kafka's tools take ``--bootstrap-server``."""
    out = []
    for item in text.split(","):
        split = split_host_port(item)
        if split is None:
            raise AdminError(f"--bootstrap-server: {item.strip()!r} is not HOST:PORT (a port from 0 to 65535)")
        out.append(split)
    return out


async def connect_bootstrap(
    addresses: Sequence[tuple[str, int]], security: ClientSecurity, *, client_id: str, timeout_s: float
) -> tuple[ClientConnection, Any]:
    """A connection to the first bootstrap server that answers a Metadata request (authenticated first when the
    --command-config says so; a refused login is one of the problems reported), and that Metadata answer.
    AdminError naming every server tried when none answers."""
    problems = []
    for host, port in addresses:
        connection = ClientConnection(
            host, port, client_id=client_id, timeout=timeout_s, ssl_context=security.tls, sasl=security.sasl
        )
        try:
            response = await connection.request(
                schema.build(codec.request_class(METADATA, _METADATA_VERSION), topics=()), timeout=timeout_s
            )
        except (ConnectionError, TimeoutError, codec.ProtocolError) as exc:
            problems.append(str(exc) if f"{host}:{port}" in str(exc) else f"{host}:{port}: {exc}")
            await connection.close()
            continue
        return connection, response
    raise AdminError(f"no bootstrap server answered ({'; '.join(problems)})")


@dataclass(frozen=True, slots=True)
class ClusterView:
    """What one Metadata answer says: live brokers, and each known topic's partitions with their leaders."""

    brokers: dict[int, tuple[str, int]]
    #: topic -> partition -> leader id (-1: none)
    topics: dict[str, dict[int, int]]
    #: topics asked for by name that the cluster does not have (or refused): topic -> error name
    missing: dict[str, str]


class AdminClient:
    """Connections to a cluster's brokers for one tool run; :meth:`close` when done."""

    def __init__(
        self,
        addresses: Sequence[tuple[str, int]],
        *,
        security: ClientSecurity | None = None,
        client_id: str = "fjord-admin",
        timeout_s: float = 30.0,
    ) -> None:
        self.addresses = list(addresses)
        self.security = security or ClientSecurity()
        self.client_id = client_id
        self.timeout_s = timeout_s
        self._deadline = time.monotonic() + timeout_s
        self._bootstrap: ClientConnection | None = None
        self._nodes: dict[int, ClientConnection] = {}
        self._brokers: dict[int, tuple[str, int]] = {}

    async def __aenter__(self) -> AdminClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        for connection in [self._bootstrap, *self._nodes.values()]:
            if connection is not None:
                await connection.close()
        self._bootstrap = None
        self._nodes.clear()

    def _remaining(self) -> float:
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            raise AdminError(f"timed out after {self.timeout_s:.0f} s (--timeout)")
        return remaining

    def _connection(self, host: str, port: int) -> ClientConnection:
        return ClientConnection(
            host,
            port,
            client_id=self.client_id,
            timeout=self.timeout_s,
            ssl_context=self.security.tls,
            sasl=self.security.sasl,
        )

    async def _bootstrap_connection(self) -> ClientConnection:
        """The first bootstrap server that answers a Metadata request (after logging in, when configured)."""
        if self._bootstrap is not None:
            return self._bootstrap
        connection, response = await connect_bootstrap(
            self.addresses, self.security, client_id=self.client_id, timeout_s=self._remaining()
        )
        self._bootstrap = connection
        self._brokers = {int(b.node_id): (str(b.host), int(b.port)) for b in response.brokers}
        return connection

    async def _node(self, node_id: int) -> ClientConnection:
        if node_id in self._nodes:
            return self._nodes[node_id]
        await self._bootstrap_connection()
        if node_id not in self._brokers:
            await self.cluster()
        address = self._brokers.get(node_id)
        if address is None:
            raise RetriableError(f"broker {node_id} is not a live broker", ErrorCode.leader_not_available)
        connection = self._nodes[node_id] = self._connection(*address)
        return connection

    def address(self, node_id: int) -> tuple[str, int]:
        """(host, port) of a broker this client has heard of (from Metadata or FindCoordinator)."""
        return self._brokers.get(node_id, ("?", -1))

    async def request(self, request: Any, what: str, node: int | None = None) -> Any:
        """``request``'s answer from ``node`` (None: the bootstrap server); a failed exchange is an AdminError
        naming ``what`` and the server."""
        connection = await (self._bootstrap_connection() if node is None else self._node(node))
        try:
            return await connection.request(request, timeout=self._remaining())
        except (ConnectionError, TimeoutError, codec.ProtocolError) as exc:
            raise AdminError(f"{what} failed: {exc}") from None  # the message names the server

    async def retrying(self, attempt: Callable[[], Awaitable[T]]) -> T:
        """``attempt()`` again while it raises :class:`RetriableError`, until the tool's timeout."""
        while True:
            try:
                return await attempt()
            except RetriableError as exc:
                if self._deadline - time.monotonic() <= _RETRY_S:
                    raise AdminError(f"{exc} (still after {self.timeout_s:.0f} s)") from None
                await asyncio.sleep(_RETRY_S)

    # ---- what the tools ask --------------------------------------------------------------------------------------

    async def cluster(self, topics: Iterable[str] | None = None) -> ClusterView:
        """Metadata for ``topics`` (None: every topic)."""
        names = None if topics is None else tuple(topics)
        cls = codec.request_class(METADATA, _METADATA_VERSION)
        topic_entries = None if names is None else tuple(schema.build_nested(cls, "topics", name=n) for n in names)
        response = await self.request(
            schema.build(cls, topics=topic_entries, allow_auto_topic_creation=False), "Metadata"
        )
        self._brokers = {int(b.node_id): (str(b.host), int(b.port)) for b in response.brokers}
        found: dict[str, dict[int, int]] = {}
        missing: dict[str, str] = {}
        for topic in response.topics:
            if topic.name is None:
                continue
            code = ErrorCode(int(topic.error_code))
            if code is not ErrorCode.none:
                missing[str(topic.name)] = code.name.upper()
                continue
            found[str(topic.name)] = {int(p.partition_index): int(p.leader_id) for p in topic.partitions}
        return ClusterView(dict(self._brokers), found, missing)

    async def coordinator(self, group: str) -> int:
        """The node coordinating ``group`` (FindCoordinator v6, key type GROUP), waiting while none is available."""

        async def find() -> int:
            cls = codec.request_class(FIND_COORDINATOR, _FIND_COORDINATOR_VERSION)
            response = await self.request(
                schema.build(cls, key_type=_KEY_TYPE_GROUP, coordinator_keys=(group,)), "FindCoordinator"
            )
            (answer,) = response.coordinators
            code = ErrorCode(int(answer.error_code))
            if code in _RETRIABLE:
                raise RetriableError(f"group {group!r}: no coordinator ({describe_error(code)})", code)
            if code is not ErrorCode.none:
                raise AdminError(
                    f"group {group!r}: FindCoordinator answered {describe_error(code, answer.error_message)}"
                )
            self._brokers.setdefault(int(answer.node_id), (str(answer.host), int(answer.port)))
            return int(answer.node_id)

        return await self.retrying(find)

    async def to_coordinator(self, group: str, build: Any, what: str, error_of: Callable[[Any], ErrorCode]) -> Any:
        """``build``'s answer from ``group``'s coordinator, asking for the coordinator again (and again sending)
        while the answer's ``error_of`` says it moved or is loading."""

        async def attempt() -> Any:
            node = await self.coordinator(group)
            response = await self.request(build, what, node)
            code = error_of(response)
            if code in _RETRIABLE:
                raise RetriableError(f"group {group!r}: {what} answered {describe_error(code)}", code)
            return response

        return await self.retrying(attempt)

    async def each_broker(self, build: Any, what: str) -> list[Any]:
        """``build`` sent to every live broker (as Kafka's Admin client lists groups), their answers in order."""
        view = await self.cluster(())
        return [await self.request(build, what, node) for node in sorted(view.brokers)]

    async def list_offsets(
        self, partitions: Iterable[TopicPartition], timestamp: int, leaders: Mapping[str, Mapping[int, int]]
    ) -> dict[TopicPartition, int]:
        """Each partition's offset for ``timestamp`` (EARLIEST, LATEST or ms since the epoch: -1 where no record is
        that late), asked of its leader (``leaders``: a :class:`ClusterView`'s topics)."""
        by_leader: dict[int, list[TopicPartition]] = {}
        for topic, partition in partitions:
            leader = leaders.get(topic, {}).get(partition, -1)
            if leader < 0:
                raise AdminError(f"{topic}-{partition} has no leader")
            by_leader.setdefault(leader, []).append((topic, partition))
        cls = codec.request_class(LIST_OFFSETS, _LIST_OFFSETS_VERSION)
        topic_cls = schema.field_entity(cls, "topics")
        out: dict[TopicPartition, int] = {}
        for leader, wanted in sorted(by_leader.items()):
            topics: dict[str, list[int]] = {}
            for topic, partition in wanted:
                topics.setdefault(topic, []).append(partition)
            request = schema.build(
                cls,
                replica_id=-1,
                isolation_level=0,
                topics=tuple(
                    schema.build(
                        topic_cls,
                        name=name,
                        partitions=tuple(
                            schema.build_nested(topic_cls, "partitions", partition_index=p, timestamp=timestamp)
                            for p in parts
                        ),
                    )
                    for name, parts in topics.items()
                ),
            )
            response = await self.request(request, "ListOffsets", leader)
            for topic in response.topics:
                for answer in topic.partitions:
                    code = ErrorCode(int(answer.error_code))
                    if code is not ErrorCode.none:
                        raise AdminError(
                            f"{topic.name}-{answer.partition_index}: ListOffsets answered {describe_error(code)}"
                        )
                    out[(str(topic.name), int(answer.partition_index))] = int(answer.offset)
        return out
