"""The SCRAM and PLAIN server state machines (wire.sasl), without a broker: RFC 7677's test vector, a client written
here with hashlib and hmac, and the malformed, replayed, truncated and oversized exchanges a hostile client sends."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

import pytest

from wire.sasl import MAX_TOKEN_BYTES, SaslAuthenticationError
from wire.sasl.client import ScramClient
from wire.sasl.plain import PlainServer, parse_plain
from wire.sasl.scram import (
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    ScramCredential,
    ScramMechanism,
    ScramServer,
    credential_from_salted,
    decode_saslname,
    encode_saslname,
    new_credential,
)

# RFC 7677 section 3
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"


def rfc_server() -> ScramServer:
    credential = new_credential(SCRAM_SHA_256, "pencil", 4096, RFC_SALT)
    return ScramServer(SCRAM_SHA_256, {"user": credential}.get, nonce=lambda: RFC_SERVER_NONCE)


def test_rfc_7677_vector() -> None:
    server = rfc_server()
    assert server.step(f"n,,n=user,r={RFC_CLIENT_NONCE}".encode()) == (
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    assert not server.complete
    final = server.step(
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.complete and server.user == "user"


class Client:
    """A SCRAM client from the RFC's definitions, independent of the server's helpers."""

    def __init__(self, hash_name: str, user: str, password: str) -> None:
        self.hash_name, self.user, self.password = hash_name, user, password
        self.nonce = secrets.token_urlsafe(18)
        self.first_bare = f"n={encode_saslname(user)},r={self.nonce}"

    def first(self) -> bytes:
        return f"n,,{self.first_bare}".encode()

    def final(self, server_first: bytes, *, proof_password: str | None = None) -> tuple[bytes, bytes]:
        """client-final and the server signature the client expects back."""
        fields = dict(item.split("=", 1) for item in server_first.decode().split(","))
        salt, iterations = base64.b64decode(fields["s"]), int(fields["i"])
        salted = hashlib.pbkdf2_hmac(self.hash_name, (proof_password or self.password).encode(), salt, iterations)
        client_key = hmac.new(salted, b"Client Key", self.hash_name).digest()
        stored_key = hashlib.new(self.hash_name, client_key).digest()
        without_proof = f"c=biws,r={fields['r']}"
        auth = f"{self.first_bare},{server_first.decode()},{without_proof}".encode()
        signature = hmac.new(stored_key, auth, self.hash_name).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        server_key = hmac.new(salted, b"Server Key", self.hash_name).digest()
        expected = hmac.new(server_key, auth, self.hash_name).digest()
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode(), expected


def server_for(mechanism: ScramMechanism, users: dict[str, str]) -> ScramServer:
    credentials = {user: new_credential(mechanism, password) for user, password in users.items()}
    return ScramServer(mechanism, credentials.get)


@pytest.mark.parametrize("mechanism", [SCRAM_SHA_256, SCRAM_SHA_512], ids=lambda m: m.name)
@pytest.mark.parametrize("user", ["alice", "a,b=c", "ünï"])
def test_a_hashlib_client_authenticates(mechanism: ScramMechanism, user: str) -> None:
    server = server_for(mechanism, {user: "alice-secret"})
    client = Client(mechanism.hash_name, user, "alice-secret")
    final, expected = client.final(server.step(client.first()))
    assert server.step(final) == b"v=" + base64.b64encode(expected)
    assert server.complete and server.user == user


def test_a_wrong_password_fails_without_naming_it() -> None:
    server = server_for(SCRAM_SHA_512, {"alice": "alice-secret"})
    client = Client("sha512", "alice", "alice-secret")
    final, _ = client.final(server.step(client.first()), proof_password="wrong-password")
    with pytest.raises(SaslAuthenticationError, match="Invalid user credentials") as failure:
        server.step(final)
    assert failure.value.user == "alice"
    assert "wrong-password" not in str(failure.value) and not server.complete


def test_an_unknown_user_fails_at_the_first_message() -> None:
    server = server_for(SCRAM_SHA_256, {"alice": "x"})
    with pytest.raises(SaslAuthenticationError, match="Invalid user credentials") as failure:
        server.step(b"n,,n=mallory,r=abc")
    assert failure.value.user == "mallory"


def test_a_replayed_client_final_fails_against_a_new_exchange() -> None:
    """The proof of one exchange is bound to its server nonce: sent again to a new exchange it is refused."""
    credential = new_credential(SCRAM_SHA_256, "alice-secret")
    client = Client("sha256", "alice", "alice-secret")
    first = ScramServer(SCRAM_SHA_256, {"alice": credential}.get)
    final, _ = client.final(first.step(client.first()))
    first.step(final)
    second = ScramServer(SCRAM_SHA_256, {"alice": credential}.get)
    second.step(client.first())
    with pytest.raises(SaslAuthenticationError, match="nonce does not match"):
        second.step(final)
    with pytest.raises(SaslAuthenticationError, match="unexpected SCRAM message"):
        first.step(final)  # the finished exchange takes nothing more


@pytest.mark.parametrize(
    "first",
    [
        b"",
        b"n,,",
        b"n=alice,r=abc",
        b"x,,n=alice,r=abc",
        b"p=tls-unique,,n=alice,r=abc",
        b"n,,r=abc,n=alice",
        b"n,,n=alice",
        b"n,,n=,r=abc",
        b"n,,n=al=ice,r=abc",
        b"n,,n=alice,r=abc,m=ext",
        b"n,,n=alice,r=abc,tokenauth=true",
        b"n,a=bob,n=alice,r=abc",
        b"\xff\xfe",
        b"n,,n=alice,r=a b",
    ],
)
def test_malformed_client_first_messages_fail(first: bytes) -> None:
    server = server_for(SCRAM_SHA_256, {"alice": "x"})
    with pytest.raises(SaslAuthenticationError):
        server.step(first)
    assert not server.complete
    with pytest.raises(SaslAuthenticationError):  # a failed exchange stays failed
        server.step(b"n,,n=alice,r=abc")


@pytest.mark.parametrize(
    "final",
    [
        b"",
        b"c=biws",
        b"c=biws,r=x,p=AAAA",
        b"c=eSws,r={nonce},p=AAAA",
        b"c=biws,r={nonce},p=!!!",
        b"c=biws,r={nonce},p=AAAA",
        b"r={nonce},p=AAAA",
    ],
)
def test_malformed_or_truncated_client_final_messages_fail(final: bytes) -> None:
    server = server_for(SCRAM_SHA_256, {"alice": "x"})
    server_first = server.step(b"n,,n=alice,r=abc").decode()
    nonce = server_first.split(",")[0][2:]
    with pytest.raises(SaslAuthenticationError):
        server.step(final.replace(b"{nonce}", nonce.encode()))
    assert not server.complete


def test_an_oversized_token_fails() -> None:
    server = server_for(SCRAM_SHA_256, {"alice": "x"})
    with pytest.raises(SaslAuthenticationError, match="exceeds the limit"):
        server.step(b"n,,n=alice,r=" + b"a" * MAX_TOKEN_BYTES)


def test_credentials_keep_no_password() -> None:
    salt = b"salt"
    salted = SCRAM_SHA_512.salted_password("alice-secret", salt, 4096)
    credential = credential_from_salted(SCRAM_SHA_512, salted, salt, 4096)
    assert credential == ScramCredential(salt, credential.stored_key, credential.server_key, 4096)
    assert salted not in (credential.stored_key, credential.server_key)
    assert "alice-secret" not in repr(credential) and "stored_key" not in repr(credential)


def test_saslname_escapes() -> None:
    assert decode_saslname(encode_saslname("a,b=c")) == "a,b=c"
    with pytest.raises(SaslAuthenticationError):
        decode_saslname("a=2Db")


def test_plain_accepts_configured_users_only() -> None:
    assert parse_plain(b"\x00alice\x00pw") == ("", "alice", "pw")
    assert parse_plain(b"alice\x00alice\x00pw") == ("alice", "alice", "pw")
    server = PlainServer({"alice": "alice-secret"})
    assert server.step(b"\x00alice\x00alice-secret") == b"" and server.complete and server.user == "alice"
    with pytest.raises(SaslAuthenticationError, match="exactly one message"):
        server.step(b"\x00alice\x00alice-secret")


@pytest.mark.parametrize(
    ("token", "user"),
    [
        (b"\x00alice\x00wrong", "alice"),
        (b"\x00bob\x00alice-secret", "bob"),
        (b"bob\x00alice\x00alice-secret", "alice"),
        (b"alice-secret", None),
        (b"\x00\x00alice-secret", None),
        (b"\x00alice\x00", "alice"),
        (b"\x00alice\x00alice-secret\x00x", None),
        (b"\xff\x00alice\x00alice-secret", None),
        (b"\x00alice\x00" + b"x" * MAX_TOKEN_BYTES, None),
    ],
)
def test_plain_refuses_bad_credentials_and_malformed_messages(token: bytes, user: str | None) -> None:
    server = PlainServer({"alice": "alice-secret"})
    with pytest.raises(SaslAuthenticationError) as failure:
        server.step(token)
    assert failure.value.user == user
    assert "alice-secret" not in str(failure.value) and not server.complete


def test_a_delegation_token_logs_in_as_its_owner() -> None:
    """Kafka's ``tokenauth=true`` extension: the user name is a token id, the credential the token's, and the
    connection acts as the token's owner until the token expires; the same name without the extension is a user."""
    token_credential = new_credential(SCRAM_SHA_512, "aG1hYw==")
    tokens = {"token-1": (token_credential, "User:alice", 1_700_000_000_000)}
    server = ScramServer(SCRAM_SHA_512, {}.get, tokens=tokens.get)
    client = ScramClient(SCRAM_SHA_512, "token-1", "aG1hYw==", token=True)
    answer = client.step(server.step(client.first()))
    assert answer is not None
    client.step(server.step(answer))
    assert server.complete and client.complete
    assert (server.principal, server.token_authenticated, server.token_expiry_ms) == (
        "User:alice", True, 1_700_000_000_000)

    as_user = ScramServer(SCRAM_SHA_512, {}.get, tokens=tokens.get)
    with pytest.raises(SaslAuthenticationError, match="Invalid user credentials"):
        as_user.step(ScramClient(SCRAM_SHA_512, "token-1", "aG1hYw==").first())
    unknown = ScramServer(SCRAM_SHA_512, {}.get, tokens=tokens.get)
    with pytest.raises(SaslAuthenticationError, match="Invalid tokenId : token-2"):
        unknown.step(ScramClient(SCRAM_SHA_512, "token-2", "aG1hYw==", token=True).first())
