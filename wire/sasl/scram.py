"""SASL/SCRAM-SHA-256 and SCRAM-SHA-512 on the server (RFC 5802, RFC 7677), and the credentials it checks against.

Four messages, as Kafka's ScramSaslServer exchanges them::

    client-first   n,,n=<user>,r=<client nonce>
    server-first   r=<client nonce><server nonce>,s=<base64 salt>,i=<iterations>
    client-final   c=biws,r=<both nonces>,p=<base64 proof>
    server-final   v=<base64 server signature>

The server keeps only a :class:`ScramCredential` per user and mechanism (salt, iterations, StoredKey, ServerKey),
never the password: the proof is checked by recovering ClientKey from it and comparing H(ClientKey) with StoredKey
in constant time. A fresh server nonce per exchange makes a replayed client-final fail; channel binding is refused.

Kafka's delegation-token extension: a client-first message ending ``,tokenauth=true`` logs in with a token (the
user name is the token id, the password its HMAC in base64); the credential then comes from ``tokens`` and the
connection acts as the token's owner (:attr:`ScramServer.principal`), marked :attr:`ScramServer.token_authenticated`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field

from wire.sasl import SaslAuthenticationError, check_token_size

#: Kafka's ScramMechanism: name -> (hash, the id AlterUserScramCredentials carries, Kafka's iteration floor).
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 4096


@dataclass(frozen=True, slots=True)
class ScramMechanism:
    name: str
    hash_name: str
    type_id: int  # ScramMechanism's id on the wire (AlterUserScramCredentials / DescribeUserScramCredentials)

    def hash(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    def hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self.hash_name).digest()

    def salted_password(self, password: str, salt: bytes, iterations: int) -> bytes:
        """Hi(password, salt, i): PBKDF2 with the mechanism's HMAC (what an admin client sends as salted_password)."""
        return hashlib.pbkdf2_hmac(self.hash_name, password.encode("utf-8"), salt, iterations)

    def client_key(self, salted_password: bytes) -> bytes:
        """ClientKey = HMAC(SaltedPassword, "Client Key"): the client proves it holds this."""
        return self.hmac(salted_password, b"Client Key")

    def server_key(self, salted_password: bytes) -> bytes:
        """ServerKey = HMAC(SaltedPassword, "Server Key"): the server proves it holds this."""
        return self.hmac(salted_password, b"Server Key")


SCRAM_SHA_256 = ScramMechanism("SCRAM-SHA-256", "sha256", 1)
SCRAM_SHA_512 = ScramMechanism("SCRAM-SHA-512", "sha512", 2)
MECHANISMS: dict[str, ScramMechanism] = {m.name: m for m in (SCRAM_SHA_256, SCRAM_SHA_512)}
MECHANISMS_BY_ID: dict[int, ScramMechanism] = {m.type_id: m for m in (SCRAM_SHA_256, SCRAM_SHA_512)}


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What the server keeps of one user's password for one mechanism (Kafka's ScramCredential)."""

    salt: bytes = field(repr=False)
    stored_key: bytes = field(repr=False)
    server_key: bytes = field(repr=False)
    iterations: int


def credential_from_salted(
    mechanism: ScramMechanism, salted_password: bytes, salt: bytes, iterations: int
) -> ScramCredential:
    """StoredKey = H(HMAC(SaltedPassword, "Client Key")), ServerKey = HMAC(SaltedPassword, "Server Key")."""
    return ScramCredential(
        salt, mechanism.hash(mechanism.client_key(salted_password)), mechanism.server_key(salted_password), iterations
    )


def new_credential(
    mechanism: ScramMechanism, password: str, iterations: int = DEFAULT_ITERATIONS, salt: bytes | None = None
) -> ScramCredential:
    salt = salt if salt is not None else secrets.token_bytes(32)
    return credential_from_salted(mechanism, mechanism.salted_password(password, salt, iterations), salt, iterations)


def decode_saslname(text: str) -> str:
    """RFC 5802 saslname: ``=2C`` is a comma and ``=3D`` an equals sign; any other ``=`` is malformed."""
    out: list[str] = []
    i = 0
    while i < len(text):
        if text[i] == "=":
            escape = text[i : i + 3]
            if escape == "=2C":
                out.append(",")
            elif escape == "=3D":
                out.append("=")
            else:
                raise SaslAuthenticationError("Invalid SCRAM client first message: bad escape in the user name")
            i += 3
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def encode_saslname(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def parse_attributes(message: str, what: str) -> list[tuple[str, str]]:
    """``k=v`` pairs of a SCRAM message, in order; each key one letter (the client's parser too)."""
    out = []
    for part in message.split(","):
        key, eq, value = part.partition("=")
        if len(key) != 1 or not eq or not key.isalpha():
            raise SaslAuthenticationError(f"Invalid SCRAM {what}: malformed attribute")
        out.append((key, value))
    return out


def b64decode(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise SaslAuthenticationError(f"Invalid SCRAM {what}: bad base64") from None


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


_INVALID = "Authentication failed: Invalid user credentials"
_PRINTABLE = frozenset(chr(c) for c in range(0x21, 0x7F)) - {","}

#: A token login's lookup: token id -> the token's credential for this mechanism, its owner (``User:name``) and its
#: expiry (epoch ms), or None for a token that does not exist, has expired, or when tokens are off.
TokenLookup = Callable[[str], tuple[ScramCredential, str, int] | None]


class ScramServer:
    """One SCRAM exchange on the server: client-first -> server-first, client-final -> server-final.

    ``lookup(user)`` gives the user's credential for this mechanism, or None. ``nonce`` makes the server's part
    of the nonce (tests pass RFC 7677's)."""

    def __init__(
        self,
        mechanism: ScramMechanism,
        lookup: Callable[[str], ScramCredential | None],
        *,
        tokens: TokenLookup | None = None,
        nonce: Callable[[], str] = lambda: secrets.token_urlsafe(24),
    ) -> None:
        self._mechanism = mechanism
        self._lookup = lookup
        self._tokens = tokens
        #: The owner of the token logged in with (None: the user logged in with a password of its own).
        self._token_owner: str | None = None
        #: When that token expires (epoch ms): the session ends then (Kafka's CREDENTIAL_LIFETIME_MS).
        self.token_expiry_ms: int | None = None
        self._make_nonce = nonce
        self._state = "client-first"
        self._user: str | None = None
        self._credential: ScramCredential | None = None
        self._gs2_header = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""

    @property
    def mechanism(self) -> str:
        return self._mechanism.name

    @property
    def complete(self) -> bool:
        return self._state == "complete"

    @property
    def user(self) -> str | None:
        return self._user

    @property
    def principal(self) -> str:
        """Who the connection acts as once complete: the user, or the owner of the token it logged in with."""
        return self._token_owner if self._token_owner is not None else f"User:{self._user}"

    @property
    def token_authenticated(self) -> bool:
        return self._token_owner is not None

    def step(self, token: bytes) -> bytes:
        check_token_size(token, self._user)
        state, self._state = self._state, "failed"  # whatever goes wrong below, the exchange is over
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslAuthenticationError("Invalid SCRAM message: not UTF-8", self._user) from None
        if state == "client-first":
            answer = self._client_first(text)
            self._state = "client-final"
        elif state == "client-final":
            answer = self._client_final(text)
            self._state = "complete"
        else:
            raise SaslAuthenticationError(
                f"Authentication failed: unexpected SCRAM message in state {state}", self._user
            )
        return answer.encode("utf-8")

    def _client_first(self, text: str) -> str:
        # gs2-header: a channel-binding flag and an optional authzid, then the bare message.
        flag, comma, rest = text.partition(",")
        authzid_part, comma2, bare = rest.partition(",")
        if not comma or not comma2:
            raise SaslAuthenticationError("Invalid SCRAM client first message: no GS2 header")
        if flag.startswith("p="):
            raise SaslAuthenticationError("Authentication failed: SCRAM channel binding is not supported")
        if flag not in ("n", "y"):
            raise SaslAuthenticationError("Invalid SCRAM client first message: bad channel binding flag")
        authzid = None
        if authzid_part:
            if not authzid_part.startswith("a="):
                raise SaslAuthenticationError("Invalid SCRAM client first message: bad authorization id")
            authzid = decode_saslname(authzid_part[2:])
        head, extension_parts = bare.split(",")[:2], bare.split(",")[2:]
        attributes = parse_attributes(",".join(head), "client first message")
        if len(attributes) < 2 or attributes[0][0] != "n" or attributes[1][0] != "r":
            raise SaslAuthenticationError("Invalid SCRAM client first message: expected n=<user>,r=<nonce>")
        user = decode_saslname(attributes[0][1])
        self._user = user or None
        client_nonce = attributes[1][1]
        if not user:
            raise SaslAuthenticationError("Authentication failed: username not specified")
        if not client_nonce or not set(client_nonce) <= _PRINTABLE:
            raise SaslAuthenticationError("Invalid SCRAM client first message: bad nonce", user)
        extensions = dict(part.partition("=")[::2] for part in extension_parts)
        if "m" in extensions:
            raise SaslAuthenticationError("Invalid SCRAM client first message: mandatory extension not supported", user)
        if authzid is not None and authzid != user:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is different from username", user
            )
        if extensions.get("tokenauth", "").lower() == "true":  # Kafka's ScramExtensions.tokenAuthenticated
            token = self._tokens(user) if self._tokens is not None else None
            if token is None:
                raise SaslAuthenticationError(f"Token Authentication failed: Invalid tokenId : {user}", user)
            credential, self._token_owner, self.token_expiry_ms = token
        else:
            found = self._lookup(user)
            if found is None:
                raise SaslAuthenticationError(_INVALID, user)
            credential = found
        self._credential = credential
        self._gs2_header = f"{flag},{authzid_part},"
        self._client_first_bare = bare
        self._nonce = client_nonce + self._make_nonce()
        self._server_first = f"r={self._nonce},s={_b64(credential.salt)},i={credential.iterations}"
        return self._server_first

    def _client_final(self, text: str) -> str:
        assert self._credential is not None
        user = self._user
        without_proof, sep, proof_text = text.rpartition(",p=")
        if not sep:
            raise SaslAuthenticationError("Invalid SCRAM client final message: no proof", user)
        attributes = dict(parse_attributes(without_proof, "client final message"))
        if attributes.get("c") is None or attributes.get("r") is None:
            raise SaslAuthenticationError("Invalid SCRAM client final message: expected c=...,r=...", user)
        if b64decode(attributes["c"], "client final message") != self._gs2_header.encode("utf-8"):
            raise SaslAuthenticationError("Invalid SCRAM client final message: channel binding does not match", user)
        # Kafka's check (ScramSaslServer): the nonce ends with the one the server sent, rather than RFC 5802's
        # equality. librdkafka up to 2.x sends its own nonce again in front of it, and Kafka accepts that; the
        # server's fresh part is still bound into the proof, so a replay of another exchange still fails.
        if not attributes["r"].endswith(self._nonce):
            raise SaslAuthenticationError("Invalid SCRAM client final message: nonce does not match", user)
        proof = b64decode(proof_text, "client final message")
        mechanism = self._mechanism
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        signature = mechanism.hmac(self._credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise SaslAuthenticationError(_INVALID, user)
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(mechanism.hash(client_key), self._credential.stored_key):
            raise SaslAuthenticationError(_INVALID, user)
        server_signature = mechanism.hmac(self._credential.server_key, auth_message)
        return f"v={_b64(server_signature)}"
