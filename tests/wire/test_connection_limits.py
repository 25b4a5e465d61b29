"""Kafka's connection quotas (issue 13): the counts and decisions of ``wire.connection_limits``, and listeners sharing
a ``ConnectionGate`` serving raw sockets on 127.0.0.1: the per-IP limit and its override close the extra connection
at once, a listener at ``max.connections`` holds its acceptor until a connection closes, the inter-broker listener is
not held by the broker-wide limit (a client connection is closed to make room), and a creation rate over its quota
delays a burst without refusing any of it."""

from __future__ import annotations

import asyncio
import socket
import struct
import typing
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import pytest

from testkit.waiting import eventually_async
from wire.connection_gate import ConnectionGate
from wire.connection_limits import ConnectionLimits, ConnectionLimitSettings, ip_key, parse_ip_overrides
from wire.dispatch import Peer, Response
from wire.listener import KafkaListener
from wire.metrics import ServerMetrics

TIMEOUT_S = 5.0
Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]


# ---------------------------------------------------------------------- the decisions, sans-I/O


def test_parse_ip_overrides_and_address_keys() -> None:
    assert parse_ip_overrides(" 127.0.0.1:3, host-a:5,[::1]:2,") == {"127.0.0.1": 3, "host-a": 5, "::1": 2}
    assert parse_ip_overrides("") == {}
    for bad in ("127.0.0.1", "host:x", ":4"):
        with pytest.raises(ValueError, match="host:count"):
            parse_ip_overrides(bad)
    assert ip_key("::ffff:10.0.0.1") == "10.0.0.1"
    assert ip_key("0:0:0:0:0:0:0:1") == "::1"


def test_per_ip_slots_and_protection_decisions() -> None:
    settings = ConnectionLimitSettings(
        max_connections=2, max_connections_per_ip=1, per_ip_overrides={"10.0.0.9": 3}, inter_broker_listener="BROKER"
    )
    limits = ConnectionLimits(settings, ["BROKER"])
    assert not limits.protected("BROKER"), "protection needs another listener to protect it from"
    limits.add_listener("CLIENT")
    assert limits.protected("BROKER") and not limits.protected("CLIENT")
    assert limits.admit("CLIENT", "10.0.0.1") is None
    refusal = limits.admit("CLIENT", ip_key("::ffff:10.0.0.1"))
    assert refusal is not None and (refusal.address, refusal.limit) == ("10.0.0.1", 1)
    assert limits.admit("CLIENT", "10.0.0.9") is None
    assert not limits.slot_available("CLIENT") and limits.slot_available("BROKER")
    assert limits.admit("BROKER", "10.0.0.9") is None
    assert limits.excess() == 1 and limits.count() == 3 and limits.count(address="10.0.0.9") == 2
    limits.release("CLIENT", "10.0.0.1")
    assert limits.excess() == 0 and limits.count("CLIENT") == 1


def test_creation_rate_throttle_is_bounded_by_one_window() -> None:
    settings = ConnectionLimitSettings(max_connection_creation_rate=2, quota_window_num=2, quota_window_s=1.0)
    limits = ConnectionLimits(settings, ["CLIENT"])
    delays = [limits.record_creation("CLIENT", 100.0) for _ in range(50)]
    assert delays[:2] == [0.0, 0.0]
    assert 0 < delays[2] < delays[10] <= delays[49] == 1.0


# ---------------------------------------------------------------------- listeners sharing a gate


class _Answering:
    """Answers each request with its correlation id."""

    async def dispatch(self, frame: bytes, peer: Peer) -> Response | None:
        _key, _version, correlation_id = struct.unpack_from(">hhi", frame)
        return struct.pack(">ii", 4, correlation_id)


def _frame(correlation_id: int) -> bytes:
    body = struct.pack(">hhih", 18, 0, correlation_id, -1)  # an ApiVersions v0 header with a null client id
    return struct.pack(">i", len(body)) + body


@asynccontextmanager
async def _gated(
    settings: ConnectionLimitSettings, names: Sequence[str] = ("CLIENT",)
) -> AsyncIterator[tuple[ConnectionGate, dict[str, KafkaListener], ServerMetrics]]:
    metrics = ServerMetrics()
    gate = ConnectionGate(settings, metrics)
    listeners = {
        name: KafkaListener(metrics, host="127.0.0.1", port=0, listener_name=name, gate=gate)
        for name in names
    }
    for listener in listeners.values():
        await listener.start_serving(_Answering())
    try:
        yield gate, listeners, metrics
    finally:
        for listener in listeners.values():
            await listener.close()


def _refused(metrics: ServerMetrics, listener: str, reason: str) -> float:
    value = metrics.registry.get_sample_value(
        "fjord_broker_connections_refused_total", {"listener": listener, "reason": reason}
    )
    return value or 0.0


async def _connect(listener: KafkaListener) -> Stream:
    return await asyncio.open_connection("127.0.0.1", listener.bound_port)


async def _served(stream: Stream, correlation_id: int) -> bool:
    """Whether a request on ``stream`` is answered (False: the broker closed the connection)."""
    reader, writer = stream
    try:
        writer.write(_frame(correlation_id))
        await writer.drain()
        answer = await asyncio.wait_for(reader.readexactly(8), TIMEOUT_S)
    except (asyncio.IncompleteReadError, ConnectionError):
        return False
    assert struct.unpack(">ii", answer) == (4, correlation_id)
    return True


async def _closed_by_broker(stream: Stream) -> bool:
    try:
        return await asyncio.wait_for(stream[0].read(1), TIMEOUT_S) == b""
    except ConnectionError:
        return True


def _close(*streams: Stream) -> None:
    for _reader, writer in streams:
        writer.close()


async def test_per_ip_limit_closes_only_the_extra_connection() -> None:
    async with _gated(ConnectionLimitSettings(max_connections_per_ip=2)) as (gate, listeners, metrics):
        client = listeners["CLIENT"]
        first, second = await _connect(client), await _connect(client)
        assert await _served(first, 1) and await _served(second, 2)
        third = await _connect(client)
        assert await _closed_by_broker(third)
        assert await _served(first, 3) and await _served(second, 4), "the connections already open are still served"
        assert _refused(metrics, "CLIENT", "per_ip") == 1
        _close(first, third)
        await eventually_async(
            lambda: gate.limits.count(address="127.0.0.1") == 1,
            timeout=TIMEOUT_S,
            what="the closed connection gives its place back",
        )
        fourth = await _connect(client)
        assert await _served(fourth, 5)
        _close(second, fourth)


async def test_override_for_an_address_replaces_the_per_ip_limit() -> None:
    settings = ConnectionLimitSettings(max_connections_per_ip=1, per_ip_overrides={"127.0.0.1": 3})
    async with _gated(settings) as (_gate, listeners, _metrics):
        streams = [await _connect(listeners["CLIENT"]) for _ in range(3)]
        assert [await _served(stream, n) for n, stream in enumerate(streams)] == [True, True, True]
        extra = await _connect(listeners["CLIENT"])
        assert await _closed_by_broker(extra)
        _close(*streams, extra)


async def test_listener_at_max_connections_holds_its_acceptor_until_one_closes() -> None:
    settings = ConnectionLimitSettings(listener_max_connections={"CLIENT": 2})
    async with _gated(settings) as (gate, listeners, metrics):
        client = listeners["CLIENT"]
        first, second = await _connect(client), await _connect(client)
        assert await _served(first, 1) and await _served(second, 2)
        waiting = await _connect(client)  # completes in the kernel's backlog
        waiting[1].write(_frame(3))
        await eventually_async(
            lambda: _refused(metrics, "CLIENT", "max_connections") == 1,
            timeout=TIMEOUT_S,
            what="the acceptor holds at the listener's limit",
        )
        assert gate.limits.count("CLIENT") == 2
        assert not waiting[0].at_eof(), "held, not refused"
        _close(first)
        answer = await asyncio.wait_for(waiting[0].readexactly(8), TIMEOUT_S)
        assert struct.unpack(">ii", answer) == (4, 3)
        assert await _served(second, 4)
        _close(second, waiting)


async def test_inter_broker_listener_is_not_held_by_the_broker_wide_limit() -> None:
    settings = ConnectionLimitSettings(max_connections=2, inter_broker_listener="BROKER")
    async with _gated(settings, ("CLIENT", "BROKER")) as (gate, listeners, metrics):
        client = listeners["CLIENT"]
        idle, active = await _connect(client), await _connect(client)
        assert await _served(idle, 1) and await _served(active, 2)
        assert await _served(active, 3)  # the other one is now the least recently active
        held = await _connect(client)
        await eventually_async(
            lambda: _refused(metrics, "CLIENT", "max_connections") == 1,
            timeout=TIMEOUT_S,
            what="the client listener holds at max.connections",
        )
        broker = await _connect(listeners["BROKER"])
        assert await _served(broker, 4), "the inter-broker listener accepts beyond max.connections"
        assert await _closed_by_broker(idle), "the least recently active client connection made room"
        assert _refused(metrics, "CLIENT", "evicted") == 1
        assert await _served(active, 5)
        assert gate.limits.count() == 2 and gate.limits.count("CLIENT") == 1
        _close(active, held, broker)


async def test_creation_rate_over_its_quota_delays_a_burst_and_refuses_none() -> None:
    # Two windows of one second: the rate is measured over one second from the start, so the third connection
    # of the burst is the first over 2/s; each one after it waits up to a window.
    settings = ConnectionLimitSettings(max_connection_creation_rate=2, quota_window_num=2, quota_window_s=1.0)
    async with _gated(settings) as (gate, listeners, metrics):
        burst = [await _connect(listeners["CLIENT"]) for _ in range(5)]
        assert await _served(burst[0], 0) and await _served(burst[1], 1)
        assert gate.limits.count() < len(burst), "the end of the burst is still waiting"
        answered = await asyncio.gather(*(_served(stream, n) for n, stream in enumerate(burst) if n >= 2))
        assert answered == [True, True, True]
        assert _refused(metrics, "CLIENT", "creation_rate") >= 1
        assert _refused(metrics, "CLIENT", "per_ip") == 0
        _close(*burst)


async def test_lowering_max_connections_closes_the_least_recently_active() -> None:
    async with _gated(ConnectionLimitSettings()) as (gate, listeners, metrics):
        client = listeners["CLIENT"]
        idle, active = await _connect(client), await _connect(client)
        assert await _served(idle, 1) and await _served(active, 2) and await _served(active, 3)
        gate.reconfigure(ConnectionLimitSettings(max_connections=1))
        assert await _closed_by_broker(idle)
        assert await _served(active, 4)
        assert _refused(metrics, "CLIENT", "evicted") == 1 and gate.limits.count() == 1
        _close(idle, active)


def test_a_creation_rate_of_zero_delays_by_one_window_and_a_double_release_changes_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = ConnectionLimitSettings(max_connection_creation_rate=0, quota_window_num=2, quota_window_s=0.5)
    limits = ConnectionLimits(settings, ["CLIENT"])
    assert [limits.record_creation("CLIENT", 10.0) for _ in range(3)] == [0.5, 0.5, 0.5]
    assert limits.admit("CLIENT", "10.0.0.1") is None
    limits.release("CLIENT", "10.0.0.1")
    limits.release("CLIENT", "10.0.0.1")
    assert limits.count() == 0 and limits.count("CLIENT") == 0
    assert "double release" in caplog.text


async def test_a_creation_rate_of_zero_keeps_accepting_one_window_apart() -> None:
    """``max.connection.creation.rate=0`` (dynamic in Kafka) once divided by zero and ended the acceptor: every
    connection is now delayed by one window and still served."""
    settings = ConnectionLimitSettings(max_connection_creation_rate=0, quota_window_num=2, quota_window_s=0.2)
    async with _gated(settings) as (gate, listeners, metrics):
        streams = [await _connect(listeners["CLIENT"]) for _ in range(3)]
        answered = await asyncio.gather(*(_served(stream, n) for n, stream in enumerate(streams)))
        assert answered == [True, True, True]
        assert _refused(metrics, "CLIENT", "creation_rate") == 3
        assert gate.limits.count() == 3
        _close(*streams)


async def test_an_accept_loop_survives_a_failing_gate(monkeypatch: pytest.MonkeyPatch) -> None:
    async with _gated(ConnectionLimitSettings()) as (gate, listeners, _metrics):
        real_admit = gate.admit
        calls = [0]

        async def failing_once(listener: str, address: str) -> str | None:
            calls[0] += 1
            if calls[0] == 1:
                raise ZeroDivisionError("a bug in the quotas")
            return await real_admit(listener, address)

        monkeypatch.setattr(gate, "admit", failing_once)
        first = await _connect(listeners["CLIENT"])
        assert await _closed_by_broker(first), "the connection the gate failed on is closed"
        second = await _connect(listeners["CLIENT"])
        assert await _served(second, 1), "the listener still accepts"
        _close(first, second)


async def test_an_idle_connection_is_closed_after_connections_max_idle_ms() -> None:
    metrics = ServerMetrics()
    gate = ConnectionGate(ConnectionLimitSettings(max_connections=1), metrics)
    listener = KafkaListener(
        metrics, host="127.0.0.1", port=0, listener_name="CLIENT", gate=gate, idle_timeout_s=0.3
    )
    await listener.start_serving(_Answering())
    try:
        idle = await _connect(listener)
        assert await _served(idle, 1)
        waiting = await _connect(listener)  # held: max.connections is spent by the idle one
        waiting[1].write(_frame(2))
        assert await _closed_by_broker(idle), "closed once idle for connections.max.idle.ms"
        answer = await asyncio.wait_for(waiting[0].readexactly(8), TIMEOUT_S)
        assert struct.unpack(">ii", answer) == (4, 2), "its slot went to the held connection"
        for n in range(3, 8):  # active for longer than the idle time: kept
            assert await _served(waiting, n)
            await asyncio.sleep(0.1)
        _close(idle, waiting)
    finally:
        await listener.close()


def _can_bind_ipv6_loopback() -> bool:
    try:
        with socket.create_server(("::1", 0), family=socket.AF_INET6):
            return True
    except OSError:
        return False


async def test_a_listener_on_localhost_accepts_on_every_address_it_resolves_to(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``PLAINTEXT://localhost:9092`` serves 127.0.0.1 and ::1, one socket each on the same port. Where the hosts
    file maps localhost to 127.0.0.1 only, the resolver answers as a usual one does (both), if ::1 is configured."""
    loop = asyncio.get_running_loop()
    resolved = {info[4][0] for info in await loop.getaddrinfo("localhost", 0, type=socket.SOCK_STREAM)}
    ipv6 = _can_bind_ipv6_loopback()
    if ipv6 and "::1" not in resolved:
        real = loop.getaddrinfo

        async def both(host: object, port: object, **kwargs: object) -> list[typing.Any]:
            infos = list(await real(host, port, **kwargs))  # type: ignore[arg-type]
            if host == "localhost":
                infos += await real("::1", port, **kwargs)  # type: ignore[arg-type]
            return infos

        monkeypatch.setattr(loop, "getaddrinfo", both)
    metrics = ServerMetrics()
    gate = ConnectionGate(ConnectionLimitSettings(), metrics)
    listener = KafkaListener(metrics, host="localhost", port=0, listener_name="CLIENT", gate=gate)
    await listener.start_serving(_Answering())
    try:
        port = listener.bound_port
        on_ipv4 = await asyncio.open_connection("127.0.0.1", port)
        assert await _served(on_ipv4, 1)
        _close(on_ipv4)
        if ipv6:
            on_ipv6 = await asyncio.open_connection("::1", port)
            assert await _served(on_ipv6, 2)
            _close(on_ipv6)
    finally:
        await listener.close()
    if not ipv6:
        pytest.skip("::1 is not configured on this machine: only the 127.0.0.1 part ran")


async def test_a_listener_skips_an_address_it_cannot_make_a_socket_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """A host resolving to an address of a family this machine lacks (::1 with IPv6 off) is still served on the
    others, as asyncio's server would; when nothing binds, or a bind fails, the error names the address."""
    loop = asyncio.get_running_loop()
    unsupported = typing.cast(socket.AddressFamily, 255)  # no such address family: socket() fails (EAFNOSUPPORT)
    unreachable = (unsupported, socket.SOCK_STREAM, 6, "", ("fd00::9", 0))
    answers: dict[object, list[typing.Any]] = {
        "dual.example": [unreachable, (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", 0))],
        "v6.example": [unreachable],
    }
    real = loop.getaddrinfo

    async def resolved(host: object, port: object, **kwargs: object) -> list[typing.Any]:
        if host in answers:
            return answers[host]
        return list(await real(host, port, **kwargs))  # type: ignore[arg-type]

    monkeypatch.setattr(loop, "getaddrinfo", resolved)
    metrics = ServerMetrics()
    gate = ConnectionGate(ConnectionLimitSettings(), metrics)
    listener = KafkaListener(metrics, host="dual.example", port=0, listener_name="CLIENT", gate=gate)
    await listener.start_serving(_Answering())
    try:
        stream = await _connect(listener)
        assert await _served(stream, 1)
        _close(stream)
    finally:
        await listener.close()
    nothing = KafkaListener(metrics, host="v6.example", port=0, listener_name="OTHER", gate=gate)
    with pytest.raises(OSError, match=r"fd00::9:0: "):
        await nothing.bind()
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        busy = KafkaListener(metrics, host="127.0.0.1", port=port, listener_name="BUSY", gate=gate)
        with pytest.raises(OSError, match=f"127.0.0.1:{port}: "):
            await busy.bind()


class _Blocking:
    """Answers once ``release`` is set (a handler still running when its client goes away)."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.started = asyncio.Event()

    async def dispatch(self, frame: bytes, peer: Peer) -> Response | None:
        self.started.set()
        await self.release.wait()
        return await _Answering().dispatch(frame, peer)


async def test_a_lost_connection_gives_its_slot_back_before_its_handler_ends() -> None:
    metrics = ServerMetrics()
    gate = ConnectionGate(ConnectionLimitSettings(max_connections=1), metrics)
    dispatcher = _Blocking()
    listener = KafkaListener(metrics, host="127.0.0.1", port=0, listener_name="CLIENT", gate=gate)
    await listener.start_serving(dispatcher)
    try:
        gone = await _connect(listener)
        gone[1].write(_frame(1))
        await asyncio.wait_for(dispatcher.started.wait(), TIMEOUT_S)
        sock = gone[1].get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        _close(gone)  # a reset: the connection is lost, not just half-closed
        await eventually_async(
            lambda: gate.limits.count() == 0, timeout=TIMEOUT_S, what="the lost connection's slot is free"
        )
        assert not dispatcher.release.is_set(), "while its handler still runs"
        dispatcher.release.set()
        next_one = await _connect(listener)
        assert await _served(next_one, 2)
        _close(next_one)
    finally:
        dispatcher.release.set()
        await listener.close()


async def test_a_failure_to_make_room_for_the_inter_broker_listener_costs_no_connection(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    settings = ConnectionLimitSettings(max_connections=1, inter_broker_listener="BROKER")
    async with _gated(settings, ("CLIENT", "BROKER")) as (gate, listeners, _metrics):
        client = await _connect(listeners["CLIENT"])
        assert await _served(client, 1)

        def failing(cause: str) -> None:
            raise ZeroDivisionError("a bug in the eviction")

        monkeypatch.setattr(gate, "_evict", failing)
        broker = await _connect(listeners["BROKER"])
        assert await _served(broker, 2), "admitted and served"
        assert gate.limits.count("BROKER") == 1 and gate.limits.count() == 2, "and counted"
        assert "could not close connections of other listeners" in caplog.text
        _close(client, broker)


async def test_eviction_closes_the_connection_the_idle_sweep_saw_active_least_recently() -> None:
    """The older connection stays busy, the newer one goes quiet: lowering max.connections closes the quiet one,
    as the idle sweep's record of activity (reads and writes) orders them."""
    metrics = ServerMetrics()
    gate = ConnectionGate(ConnectionLimitSettings(), metrics)
    listener = KafkaListener(
        metrics, host="127.0.0.1", port=0, listener_name="CLIENT", gate=gate, idle_timeout_s=4.0
    )
    await listener.start_serving(_Answering())
    try:
        busy = await _connect(listener)
        assert await _served(busy, 1)
        quiet = await _connect(listener)
        assert await _served(quiet, 2)
        loop = asyncio.get_running_loop()
        until = loop.time() + 2.5  # the sweep (every second) looks at least twice meanwhile
        for n in range(3, 100):
            if loop.time() >= until:
                break
            assert await _served(busy, n)
            await asyncio.sleep(0.1)  # the busy one's pace, not a synchronisation
        gate.reconfigure(ConnectionLimitSettings(max_connections=1))
        assert await _closed_by_broker(quiet)
        assert await _served(busy, 100)
        _close(busy, quiet)
    finally:
        await listener.close()


class _Muting:
    """Answers each request and mutes its connection for ``seconds`` (a client over its quota)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    async def dispatch(self, frame: bytes, peer: Peer) -> Response | None:
        assert peer.mute is not None
        peer.mute(self.seconds)
        return await _Answering().dispatch(frame, peer)


async def test_a_muted_connection_is_not_idle() -> None:
    """The broker mutes a throttled client and reads nothing from it meanwhile: the client is waiting on the broker,
    so the idle expiry (here much shorter than the mute) must not close it."""
    metrics = ServerMetrics()
    listener = KafkaListener(
        metrics, host="127.0.0.1", port=0, listener_name="CLIENT", idle_timeout_s=0.2
    )
    await listener.start_serving(_Muting(1.0))
    try:
        stream = await _connect(listener)
        assert await _served(stream, 1)
        assert await _served(stream, 2), "answered once the mute ends, not closed as idle"
        _close(stream)
    finally:
        await listener.close()
