"""A node's own TLS connections pick up renewed certificate files on their next connect: ``ClientConnection``
reads its context from a ``ReloadingClientContext`` at each (re)connection, which rebuilds it when the files' stamps
changed (as a listener's ``CertificateReloader`` does for the server side), so a reload reaches the inter-broker and
controller connections without a restart."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from testkit.tls_certs import CertificateAuthority
from tests.wire.scripted_peer import ScriptedPeer, end_txn_request
from wire.client import ClientConnection
from wire.tls import TlsSettings, client_context, server_context
from wire.tls_reload import ReloadingClientContext


async def test_a_reconnection_uses_the_reloaded_truststore(tmp_path: Path) -> None:
    old_ca = CertificateAuthority(tmp_path / "old", name="old CA")
    new_ca = CertificateAuthority(tmp_path / "new", name="new CA")
    served = new_ca.issue("server", server=True)
    truststore = tmp_path / "truststore.pem"
    truststore.write_text(old_ca.cert_pem)
    tls = ReloadingClientContext(
        "test connections", [str(truststore)], lambda: client_context(TlsSettings(truststore_location=str(truststore)))
    )
    peer = ScriptedPeer()
    peer.server = await asyncio.start_server(
        peer.serve, "127.0.0.1", 0, ssl=server_context(TlsSettings(keystore_location=str(served.keystore_path)))
    )
    client = ClientConnection("127.0.0.1", peer.port, timeout=5.0, ssl_context=tls)
    try:
        with pytest.raises(ConnectionError):  # the server's certificate is not signed by the trusted CA
            await client.request(end_txn_request())
        renewed = tmp_path / "truststore.pem.new"
        renewed.write_text(new_ca.cert_pem)
        os.replace(renewed, truststore)  # how renewal tools replace a file: a new inode
        response = await client.request(end_txn_request())
        assert response.error_code == ErrorCode.invalid_txn_state
    finally:
        await client.close()
        peer.server.close()
