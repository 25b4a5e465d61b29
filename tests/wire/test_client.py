"""The small inter-broker client connection (wire/client.py) against a scripted Kafka-protocol peer: it answers,
stays silent, hangs up, or answers the wrong request. Every failure closes the connection, and the next request
connects afresh."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from kio.schema.errors import ErrorCode

from tests.wire.scripted_peer import ScriptedPeer, end_txn_request
from wire import codec
from wire.client import ClientConnection


@pytest.fixture
async def peer() -> AsyncIterator[ScriptedPeer]:
    scripted = ScriptedPeer()
    scripted.server = await asyncio.start_server(scripted.serve, "127.0.0.1", 0)
    try:
        yield scripted
    finally:
        scripted.server.close()


async def test_answers_are_decoded_on_one_connection(peer: ScriptedPeer) -> None:
    client = ClientConnection("127.0.0.1", peer.port, timeout=5.0)
    try:
        for _ in range(3):
            response = await client.request(end_txn_request())
            assert response.error_code == ErrorCode.invalid_txn_state
        assert peer.connections == 1
    finally:
        await client.close()


@pytest.mark.parametrize(
    ("behaviour", "error"),
    [("silent", TimeoutError), ("hang_up", ConnectionError), ("wrong_id", codec.ProtocolError)],
)
async def test_a_failed_exchange_closes_and_the_next_one_reconnects(
    peer: ScriptedPeer, behaviour: str, error: type[Exception]
) -> None:
    client = ClientConnection("127.0.0.1", peer.port, timeout=0.5)
    try:
        peer.behaviour = behaviour
        with pytest.raises(error):
            await client.request(end_txn_request())
        assert not client.connected
        peer.behaviour = "answer"
        response = await client.request(end_txn_request())
        assert response.error_code == ErrorCode.invalid_txn_state
        assert peer.connections == 2
    finally:
        await client.close()


async def test_an_unreachable_peer_is_a_connection_error(peer: ScriptedPeer) -> None:
    port = peer.port
    assert peer.server is not None
    peer.server.close()
    await peer.server.wait_closed()
    client = ClientConnection("127.0.0.1", port, timeout=2.0)
    with pytest.raises(ConnectionError):
        await client.request(end_txn_request())


async def test_a_connection_idle_past_its_idle_timeout_reconnects_before_the_next_exchange(
    peer: ScriptedPeer,
) -> None:
    """The server expires a connection quiet for ``connections.max.idle.ms``; the client lets go of it first (Kafka's
    clients: 9 minutes against the server's 10), so a peer connection kept between rare exchanges never fails on
    one the server closed."""
    now = [1000.0]
    client = ClientConnection("127.0.0.1", peer.port, timeout=5.0, clock=lambda: now[0], idle_timeout=540.0)
    try:
        await client.request(end_txn_request())
        now[0] += 539.0
        await client.request(end_txn_request())
        assert peer.connections == 1, "used within its idle timeout: kept"
        now[0] += 540.0
        response = await client.request(end_txn_request())
        assert response.error_code == ErrorCode.invalid_txn_state
        assert peer.connections == 2, "idle for its idle timeout: dropped and connected afresh"
    finally:
        await client.close()
