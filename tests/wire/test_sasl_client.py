"""The SCRAM and PLAIN *client* state machines (wire.sasl.client), without a broker: RFC 7677's test vector from the
client's side, exchanges with the product's servers, and a server that cannot prove it holds the user's ServerKey
(or answers out of order, or asks for a hostile iteration count) is refused without naming the password."""

from __future__ import annotations

import base64

import pytest

from wire.sasl import SaslAuthenticationError
from wire.sasl.client import PlainClient, SaslCredentials, ScramClient, new_client
from wire.sasl.plain import PlainServer
from wire.sasl.scram import SCRAM_SHA_256, SCRAM_SHA_512, ScramMechanism, ScramServer, new_credential

RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
RFC_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
PASSWORD = "client-pass-never-shown"


def test_rfc_7677_vector_from_the_client_side() -> None:
    client = ScramClient(SCRAM_SHA_256, "user", "pencil", nonce=lambda: RFC_CLIENT_NONCE)
    assert client.first() == f"n,,n=user,r={RFC_CLIENT_NONCE}".encode()
    assert client.step(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL
    assert not client.complete
    assert client.step(RFC_SERVER_FINAL) is None
    assert client.complete


def _exchange(client: ScramClient | PlainClient, server: ScramServer | PlainServer) -> None:
    token: bytes | None = client.first()
    for _ in range(4):
        if token is None:
            break
        token = client.step(server.step(token))
    assert client.complete and server.complete


@pytest.mark.parametrize("mechanism", [SCRAM_SHA_256, SCRAM_SHA_512])
@pytest.mark.parametrize("user", ["broker", "odd,name=x"])
def test_the_client_authenticates_to_the_product_server(mechanism: ScramMechanism, user: str) -> None:
    credential = new_credential(mechanism, PASSWORD, 4096)
    server = ScramServer(mechanism, {user: credential}.get)
    _exchange(ScramClient(mechanism, user, PASSWORD), server)
    assert server.user == user


def test_plain_client_and_credentials() -> None:
    server = PlainServer({"broker": PASSWORD})
    _exchange(PlainClient("broker", PASSWORD), server)
    assert server.user == "broker"
    credentials = SaslCredentials("SCRAM-SHA-512", "broker", PASSWORD)
    assert PASSWORD not in repr(credentials)
    assert credentials.client().mechanism == "SCRAM-SHA-512"
    with pytest.raises(ValueError, match="GSSAPI"):
        new_client("GSSAPI", "broker", PASSWORD)


def test_a_server_that_does_not_know_the_password_is_refused() -> None:
    """A forged server-final (the signature of another ServerKey) fails the exchange on the client's side."""
    client = ScramClient(SCRAM_SHA_256, "broker", PASSWORD)
    impostor = ScramServer(SCRAM_SHA_256, {"broker": new_credential(SCRAM_SHA_256, PASSWORD)}.get)
    server_first = impostor.step(client.first())
    impostor.step(client.step(server_first) or b"")  # the real server would verify the proof; this one cannot sign
    forged = b"v=" + base64.b64encode(b"\x00" * 32)
    with pytest.raises(SaslAuthenticationError, match="signature does not verify") as failure:
        client.step(forged)
    assert PASSWORD not in str(failure.value)
    assert not client.complete


@pytest.mark.parametrize(
    ("server_first", "fragment"),
    [
        (b"r=someone-elses-nonce,s=AAAA,i=4096", "nonce does not extend ours"),
        (f"r={RFC_CLIENT_NONCE}x,s=AAAA,i=100000000".encode(), "iteration count"),
        (f"r={RFC_CLIENT_NONCE}x,s=!!,i=4096".encode(), "bad base64"),
        (b"garbage", "malformed attribute"),
        (b"\xff\xfe", "not UTF-8"),
    ],
)
def test_a_hostile_server_first_message_is_refused(server_first: bytes, fragment: str) -> None:
    client = ScramClient(SCRAM_SHA_512, "broker", PASSWORD, nonce=lambda: RFC_CLIENT_NONCE)
    client.first()
    with pytest.raises(SaslAuthenticationError, match=fragment):
        client.step(server_first)
    with pytest.raises(SaslAuthenticationError, match="unexpected SCRAM server message"):
        client.step(RFC_SERVER_FINAL)
