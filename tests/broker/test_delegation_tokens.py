"""Delegation tokens (KIP-48) against a broker process: created, described, renewed and expired over SASL, a token
logged in with through SCRAM's ``tokenauth`` extension acting as its owner, Kafka's refusals, and the sweep of an
expired token. The requests are the ones Kafka's Admin client (and ``kafka-delegation-tokens.sh``, and Spark's
Kafka connector) sends; no Python client has them, so they go over a raw connection, and the token login is the
SCRAM exchange Kafka's client makes with ``tokenauth=true`` in its JAAS line.

One broker serves the module: a PLAINTEXT listener (where tokens may not be asked for) and a SASL_PLAINTEXT one
with SCRAM users admin (a super user), alice and bob, ACLs on, and a secret key.
"""

from __future__ import annotations

import base64
import datetime
import struct
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.serial.errors import OutOfBoundValue
from kio.static.primitive import i8

from testkit.node_process import BrokerProcess, WireClient, start_broker
from testkit.waiting import eventually
from tests.broker.sasl_wire import SCRAM_PASSWORD, authenticate, handshake
from tests.node.cli_exit import run_to_exit
from wire import codec, schema
from wire.sasl.client import ScramClient
from wire.sasl.scram import SCRAM_SHA_256, SCRAM_SHA_512

SECRET = "token-secret-never-logged"
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
        "authorizer.class.name": AUTHORIZER,
        "super.users": "User:admin;User:ANONYMOUS",
        "delegation.token.secret.key": SECRET,
        "delegation.token.expiry.check.interval.ms": "300",
    }
    args: list[str] = []
    for user in ("admin", "alice", "bob"):
        args += ["--add-scram", f"SCRAM-SHA-512=[name={user},password={SCRAM_PASSWORD}]"]
    process = start_broker(tmp_path_factory.mktemp("tokens"), overrides, args=args)
    try:
        yield process
    finally:
        code = process.stop()
    assert code == 0, process.log_text()
    log = process.log_text()
    assert SECRET not in log and SCRAM_PASSWORD not in log


def _login(broker: BrokerProcess, user: str, password: str = SCRAM_PASSWORD, *, token: bool = False,
           mechanism: str = "SCRAM-SHA-512") -> tuple[WireClient, Any]:
    """A SASL connection and the answer to its last SaslAuthenticate (the connection is closed if it failed)."""
    client = WireClient(broker.endpoints["SASL"][1])
    scram = ScramClient(SCRAM_SHA_512 if mechanism == "SCRAM-SHA-512" else SCRAM_SHA_256, user, password, token=token)
    assert handshake(client, mechanism).error_code == ErrorCode.none
    answer = authenticate(client, scram.first())
    if answer.error_code == ErrorCode.none:
        final = scram.step(bytes(answer.auth_bytes))
        assert final is not None
        answer = authenticate(client, final)
        if answer.error_code == ErrorCode.none:
            scram.step(bytes(answer.auth_bytes))
    return client, answer


def _send(client: WireClient, request: Any) -> Any:
    """The response, or only its error code when it carries a timestamp of -1 (a refusal's, or an expiry at once:
    Kafka's answer, which kio's reader does not take, while Kafka's clients do)."""
    client.send(request)
    frame = client.read_frame()
    try:
        return codec.decode_response(type(request).__api_key__, type(request).__version__, frame)[1]
    except OutOfBoundValue:
        (code,) = struct.unpack_from(">h", frame, 5)  # after the correlation id and the flexible header's tag count
        return SimpleNamespace(error_code=ErrorCode(code))


def _ms(value: datetime.datetime) -> int:
    return round(value.timestamp() * 1000)


def _create(client: WireClient, *, owner: str | None = None, renewers: tuple[str, ...] = (),
            max_lifetime_ms: int = -1) -> Any:
    cls = codec.request_class(38, 3)
    return _send(client, schema.build(
        cls, owner_principal_type="User" if owner else None, owner_principal_name=owner, max_lifetime=max_lifetime_ms,
        renewers=tuple(schema.build_nested(cls, "renewers", principal_type=kind, principal_name=name)
                       for kind, _, name in (r.partition(":") for r in renewers)),
    ))


def _renew(client: WireClient, hmac: bytes, period_ms: int = -1) -> Any:
    return _send(client, schema.build(codec.request_class(39, 2), hmac=hmac, renew_period=period_ms))


def _expire(client: WireClient, hmac: bytes, period_ms: int = -1) -> Any:
    return _send(client, schema.build(codec.request_class(40, 2), hmac=hmac, expiry_time_period=period_ms))


def _describe(client: WireClient, owners: tuple[str, ...] | None = None) -> Any:
    cls = codec.request_class(41, 3)
    listed = None if owners is None else tuple(
        schema.build_nested(cls, "owners", principal_type="User", principal_name=name) for name in owners)
    return client.request(schema.build(cls, owners=listed))


def _ids(described: Any) -> set[str]:
    assert described.error_code == ErrorCode.none
    return {t.token_id for t in described.tokens}


def _password(created: Any) -> str:
    return base64.b64encode(bytes(created.hmac)).decode("ascii")


def test_a_token_logs_in_as_its_owner_and_expires_when_told(broker: BrokerProcess) -> None:
    alice, _ = _login(broker, "alice")
    with alice:
        created = _create(alice, renewers=("User:bob",))
        assert created.error_code == ErrorCode.none
        assert (created.principal_type, created.principal_name) == ("User", "alice")
        assert (created.token_requester_principal_type, created.token_requester_principal_name) == ("User", "alice")
        issued, expiry = _ms(created.issue_timestamp), _ms(created.expiry_timestamp)
        maximum = _ms(created.max_timestamp)
        # Kafka's defaults: renew within a day, at most a week.
        assert expiry - issued == 86_400_000 and maximum - issued == 604_800_000
        uuid.UUID(created.token_id)
        assert len(bytes(created.hmac)) == 64  # HMAC-SHA512

        # Both SCRAM mechanisms log in with the token, acting as alice; such a connection may not ask for tokens.
        for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            client, answer = _login(broker, created.token_id, _password(created), token=True, mechanism=mechanism)
            with client:
                assert answer.error_code == ErrorCode.none, answer.error_message
                refused = _create(client)
                assert refused.error_code == ErrorCode.delegation_token_request_not_allowed
                assert _describe(client).error_code == ErrorCode.delegation_token_request_not_allowed

        # The token's id without tokenauth is no user; a wrong HMAC is a failed login.
        client, answer = _login(broker, created.token_id, _password(created))
        client.close()
        assert answer.error_code == ErrorCode.sasl_authentication_failed
        client, answer = _login(broker, created.token_id, base64.b64encode(b"x" * 64).decode(), token=True)
        client.close()
        assert answer.error_code == ErrorCode.sasl_authentication_failed

        # bob, a renewer, renews it (for at most the default expiry time) and sees it; a stranger cannot renew it.
        bob, _ = _login(broker, "bob")
        with bob:
            assert created.token_id in _ids(_describe(bob))
            renewed = _renew(bob, bytes(created.hmac), 60_000)
            assert renewed.error_code == ErrorCode.none
            assert 0 < _ms(renewed.expiry_timestamp) - issued <= 60_000 + 60_000
            assert created.token_id in _ids(_describe(alice, ("bob",)))  # bob renews it: an owner filter finds it
            assert _renew(bob, b"\x00" * 64).error_code == ErrorCode.delegation_token_not_found
        described = _describe(alice)
        (token,) = [t for t in described.tokens if t.token_id == created.token_id]
        assert bytes(token.hmac) == bytes(created.hmac)
        assert [(r.principal_type, r.principal_name) for r in token.renewers] == [("User", "bob")]
        assert token.expiry_timestamp == _ms(renewed.expiry_timestamp)

        # Expired at once by its owner: gone, and no login with it any more.
        expired = _expire(alice, bytes(created.hmac), -1)
        assert expired.error_code == ErrorCode.none
        assert created.token_id not in _ids(_describe(alice))
        client, answer = _login(broker, created.token_id, _password(created), token=True)
        client.close()
        assert answer.error_code == ErrorCode.sasl_authentication_failed
        assert f"Invalid tokenId : {created.token_id}" in answer.error_message
        assert _expire(alice, bytes(created.hmac), -1).error_code == ErrorCode.delegation_token_not_found


def test_the_token_acts_with_its_owners_acls(broker: BrokerProcess) -> None:
    """alice may describe no topic here; her token's connection gets the answers alice gets, not a super user's."""
    admin, _ = _login(broker, "admin")
    with admin:
        created = _create(admin, owner="alice")  # a super user may create a token for another user
        assert created.error_code == ErrorCode.none
        assert (created.principal_name, created.token_requester_principal_name) == ("alice", "admin")
        mine = _create(admin)
        assert mine.error_code == ErrorCode.none
    metadata = schema.build(codec.request_class(3, 12), topics=None, allow_auto_topic_creation=False,
                            include_topic_authorized_operations=False)
    from_alice, answer = _login(broker, created.token_id, _password(created), token=True)
    with from_alice:
        assert answer.error_code == ErrorCode.none
        alice_view = from_alice.request(schema.build(
            codec.request_class(3, 12), allow_auto_topic_creation=False, include_topic_authorized_operations=False,
            topics=(schema.build_nested(codec.request_class(3, 12), "topics", name="__consumer_offsets"),)))
        assert alice_view.topics[0].error_code == ErrorCode.topic_authorization_failed
    from_admin, answer = _login(broker, mine.token_id, _password(mine), token=True)
    with from_admin:
        assert answer.error_code == ErrorCode.none
        assert from_admin.request(metadata).brokers


def test_kafkas_refusals(broker: BrokerProcess) -> None:
    with WireClient(broker.endpoints["PLAINTEXT"][1]) as plain:  # no credential of its own
        assert _create(plain).error_code == ErrorCode.delegation_token_request_not_allowed
        assert _renew(plain, b"x").error_code == ErrorCode.delegation_token_request_not_allowed
        assert _describe(plain).error_code == ErrorCode.delegation_token_request_not_allowed
    bob, _ = _login(broker, "bob")
    with bob:
        # A token for another owner needs CREATE_TOKENS on that user; renewers are users.
        assert _create(bob, owner="alice").error_code == ErrorCode.delegation_token_authorization_failed
        assert _create(bob, renewers=("Group:ops",)).error_code == ErrorCode.invalid_principal_type
        created = _create(bob)
    alice, _ = _login(broker, "alice")
    with alice:
        # Neither the owner nor a renewer: alice cannot renew or expire bob's token, nor see it.
        assert _renew(alice, bytes(created.hmac)).error_code == ErrorCode.delegation_token_owner_mismatch
        assert _expire(alice, bytes(created.hmac)).error_code == ErrorCode.delegation_token_owner_mismatch
        assert created.token_id not in _ids(_describe(alice))
        assert _ids(_describe(alice, ())) == set()  # an empty owner list asks for none


def test_an_expired_token_is_refused_then_swept(broker: BrokerProcess) -> None:
    alice, _ = _login(broker, "alice")
    with alice:
        created = _create(alice, max_lifetime_ms=1_000)
        assert _ms(created.max_timestamp) - _ms(created.issue_timestamp) == 1_000
        client, answer = _login(broker, created.token_id, _password(created), token=True)
        with client:
            assert answer.error_code == ErrorCode.none
            # Its session ends with the token (SaslAuthenticate v1+ says so, and the client re-authenticates).
            assert 0 < answer.session_lifetime.total_seconds() <= 1.0
        # Swept by the controller once past its expiry (checked every 300 ms here).
        eventually(lambda: created.token_id not in _ids(_describe(alice)), timeout=15, what="the expired token swept")
        client, answer = _login(broker, created.token_id, _password(created), token=True)
        client.close()
        assert answer.error_code == ErrorCode.sasl_authentication_failed
        assert _renew(alice, bytes(created.hmac)).error_code == ErrorCode.delegation_token_not_found
    assert "delegation tokens past their expiry removed: " + created.token_id in broker.log_text()


def test_fjords_tools_log_in_with_a_token_as_kafkas_tools_do(broker: BrokerProcess, tmp_path: Path) -> None:
    """``--command-config`` with Kafka's ScramLoginModule line and ``tokenauth="true"``: the tool logs in with the
    token; with another HMAC it is refused in one line."""
    alice, _ = _login(broker, "alice")
    with alice:
        created = _create(alice)

    def share_groups(password: str) -> subprocess.CompletedProcess[str]:
        config = tmp_path / "token.properties"
        config.write_text(
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
            "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{created.token_id}" password="{password}" tokenauth="true";\n'
        )
        host, port = broker.endpoints["SASL"]
        return run_to_exit([sys.executable, "-m", "node.cli", "share-groups", "--bootstrap-server", f"{host}:{port}",
                            "--command-config", str(config), "--list", "--timeout", "10000"])

    listed = share_groups(_password(created))
    assert listed.returncode == 0 and "Traceback" not in listed.stderr, listed.stderr
    refused = share_groups(base64.b64encode(b"y" * 64).decode())
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and "authentication" in refused.stderr.lower(), refused.stderr


def _grant(admin: WireClient, principal: str, operation: int, resource_type: int, name: str) -> None:
    cls = codec.request_class(30, 3)
    created = admin.request(schema.build(cls, creations=(schema.build_nested(
        cls, "creations", resource_type=i8(resource_type), resource_name=name, resource_pattern_type=i8(3),
        principal=principal, host="*", operation=i8(operation), permission_type=i8(3)),)))
    assert [r.error_code for r in created.results] == [ErrorCode.none]


def test_user_acls_let_one_user_create_and_see_anothers_tokens(broker: BrokerProcess) -> None:
    """Kafka's ``User`` resource ACLs (KIP-373): CREATE_TOKENS to create a token owned by that user, DESCRIBE_TOKENS
    to see that user's tokens; a ``DelegationToken`` DESCRIBE to see one token."""
    operator = f"ops-{uuid.uuid4().hex[:6]}"
    admin, _ = _login(broker, "admin")
    with admin:
        upsert = schema.build(codec.request_class(51, 0), deletions=(), upsertions=(schema.build_nested(
            codec.request_class(51, 0), "upsertions", name=operator, mechanism=i8(2), iterations=4096,
            salt=b"salt", salted_password=SCRAM_SHA_512.salted_password(SCRAM_PASSWORD, b"salt", 4096)),))
        assert [r.error_code for r in admin.request(upsert).results] == [ErrorCode.none]
        _grant(admin, f"User:{operator}", 13, 7, "User:bob")  # CREATE_TOKENS on User:bob
    ops, answer = _login(broker, operator)
    with ops:
        assert answer.error_code == ErrorCode.none
        for_bob = _create(ops, owner="bob")
        assert for_bob.error_code == ErrorCode.none
        assert (for_bob.principal_name, for_bob.token_requester_principal_name) == ("bob", operator)
        assert _create(ops, owner="alice").error_code == ErrorCode.delegation_token_authorization_failed
        # The requester of bob's token is neither its owner nor a renewer: it does not see it without an ACL.
        assert for_bob.token_id not in _ids(_describe(ops))
        with admin_connection(broker) as admin:
            _grant(admin, f"User:{operator}", 14, 7, "User:bob")  # DESCRIBE_TOKENS on User:bob
        assert for_bob.token_id in _ids(_describe(ops))
    alice, _ = _login(broker, "alice")
    with alice:
        assert for_bob.token_id not in _ids(_describe(alice))
        with admin_connection(broker) as admin:
            _grant(admin, "User:alice", 8, 6, for_bob.token_id)  # DESCRIBE on the DelegationToken
        (seen,) = [t for t in _describe(alice).tokens if t.token_id == for_bob.token_id]
        assert (seen.principal_name, seen.token_requester_principal_name) == ("bob", operator)


def admin_connection(broker: BrokerProcess) -> WireClient:
    client, answer = _login(broker, "admin")
    assert answer.error_code == ErrorCode.none
    return client
