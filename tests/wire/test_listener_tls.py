"""A TLS listener in-process, under both event loops the project runs (asyncio's and uvloop's): requests are served
over TLS, and bytes that are not a TLS handshake close only their own connection, with one line naming the peer.

Under uvloop a transport reads right after ``connection_made`` even when the protocol paused it, which is why the
listener accepts TLS connections itself (``connect_accepted_socket``) instead of upgrading them with ``start_tls``;
running these tests on uvloop keeps that from coming back."""

from __future__ import annotations

import asyncio
import logging
import ssl
import struct
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
import uvloop

from testkit.tls_certs import CertificateAuthority
from wire.dispatch import Peer, Response
from wire.listener import KafkaListener
from wire.metrics import ServerMetrics
from wire.tls import TlsSettings, server_context


class _Echo:
    async def dispatch(self, frame: bytes, peer: Peer) -> Response | None:
        return struct.pack(">i", len(frame)) + frame


def _frame(correlation_id: int) -> bytes:
    body = struct.pack(">hhih", 18, 0, correlation_id, -1)
    return struct.pack(">i", len(body)) + body


async def _serve_garbage_then_tls(ca: CertificateAuthority, server_keystore: Path) -> None:
    context = server_context(TlsSettings(keystore_location=str(server_keystore)))
    listener = KafkaListener(ServerMetrics(), host="127.0.0.1", port=0, listener_name="SSL", ssl_context=context)
    port = await listener.bind()
    await listener.start_serving(_Echo())
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ssl.create_default_context(
            cafile=str(ca.cert_path)))
        garbage_reader, garbage_writer = await asyncio.open_connection("127.0.0.1", port)
        garbage_writer.write(_frame(1))  # a plaintext Kafka request on the TLS port
        assert await asyncio.wait_for(garbage_reader.read(100), 10) == b""
        garbage_writer.close()
        for correlation_id in (2, 3):  # the TLS connection opened before is still served
            writer.write(_frame(correlation_id))
            answer = await asyncio.wait_for(reader.readexactly(len(_frame(correlation_id))), 10)
            assert answer == _frame(correlation_id)
        writer.close()
    finally:
        await listener.close()


@pytest.mark.parametrize("run", [asyncio.run, uvloop.run], ids=["asyncio", "uvloop"])
def test_tls_listener_serves_and_closes_only_a_bad_handshake(
    run: Callable[[Coroutine[Any, Any, None]], None], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ca = CertificateAuthority(tmp_path)
    server = ca.issue("server", server=True)
    with caplog.at_level(logging.WARNING, logger="wire.listener"):
        run(_serve_garbage_then_tls(ca, server.keystore_path))
    failures = [r.getMessage() for r in caplog.records if "TLS handshake failed" in r.getMessage()]
    assert len(failures) == 1 and "127.0.0.1:" in failures[0] and "listener SSL" in failures[0], failures
