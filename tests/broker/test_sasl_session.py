"""A connection's SASL session (wire.sasl.session) without sockets: what it lets through before and after
authenticating, re-authentication (KIP-368) and the end of a session, with a clock the test moves."""

from __future__ import annotations

from types import MappingProxyType
from typing import cast

import pytest
from kio.schema.errors import ErrorCode

from broker.handlers.context import ConnectionState, RequestContext
from broker.services import BrokerServices
from settings.security import ListenerSasl
from wire.sasl import SaslAuthenticationError
from wire.sasl.session import SaslSession, SaslStateError

METADATA = 3


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def session(clock: Clock, failures: list[str], reauth_ms: int = 0) -> SaslSession:
    settings = ListenerSasl("SASL", ("PLAIN", "SCRAM-SHA-256"), MappingProxyType({"alice": "a-pw", "bob": "b-pw"}))
    return SaslSession(
        settings,
        lambda _user, _mechanism: None,
        peer="127.0.0.1:5 on listener SASL",
        reauth_ms=reauth_ms,
        on_failure=failures.append,
        clock=clock,
    )


def test_only_the_sasl_apis_are_served_before_authentication() -> None:
    failures: list[str] = []
    s = session(Clock(), failures)
    assert s.refusal(18) is None and s.refusal(17) is None and s.refusal(36) is None
    assert "not authenticated" in (s.refusal(METADATA) or "")
    assert s.handshake("PLAIN", 1) is ErrorCode.none and not s.raw_tokens
    assert s.authenticate(b"\x00alice\x00a-pw") == b""
    assert s.principal == "User:alice" and s.refusal(METADATA) is None and not failures


def test_a_failure_refuses_everything_after_it(caplog: pytest.LogCaptureFixture) -> None:
    failures: list[str] = []
    s = session(Clock(), failures)
    s.handshake("PLAIN", 1)
    with pytest.raises(SaslAuthenticationError):
        s.authenticate(b"\x00alice\x00not-a-pw")
    assert failures == ["PLAIN"] and s.principal is None
    assert "failed" in (s.refusal(18) or "") and "failed" in (s.refusal(METADATA) or "")
    (line,) = [r.getMessage() for r in caplog.records if "SASL authentication failed" in r.getMessage()]
    assert "user 'alice'" in line and "on listener SASL" in line and "not-a-pw" not in line


def test_out_of_order_and_unknown_mechanisms() -> None:
    failures: list[str] = []
    s = session(Clock(), failures)
    with pytest.raises(SaslStateError):
        s.authenticate(b"\x00alice\x00a-pw")
    other = session(Clock(), failures)
    assert other.handshake("GSSAPI", 1) is ErrorCode.unsupported_sasl_mechanism
    third = session(Clock(), failures)
    third.handshake("SCRAM-SHA-256", 1)
    assert third.handshake("PLAIN", 1) is ErrorCode.illegal_sasl_state
    assert failures == ["none", "GSSAPI", "SCRAM-SHA-256"]


def test_handshake_v0_switches_to_raw_tokens_until_done() -> None:
    s = session(Clock(), [])
    s.handshake("PLAIN", 0)
    assert s.raw_tokens
    s.authenticate(b"\x00bob\x00b-pw")
    assert not s.raw_tokens and s.principal == "User:bob"


def test_a_session_ends_after_connections_max_reauth_ms_unless_renewed() -> None:
    clock = Clock()
    failures: list[str] = []
    s = session(clock, failures, reauth_ms=1000)
    s.handshake("PLAIN", 1)
    s.authenticate(b"\x00alice\x00a-pw")
    assert s.lifetime_ms == 1000
    clock.now += 0.9
    assert s.refusal(METADATA) is None
    s.handshake("PLAIN", 1)  # re-authentication, before the end
    s.authenticate(b"\x00alice\x00a-pw")
    clock.now += 0.9
    assert s.refusal(METADATA) is None
    clock.now += 0.2
    assert "expired" in (s.refusal(METADATA) or "")
    assert s.refusal(17) is None  # re-authenticating is still allowed
    s.handshake("PLAIN", 1)
    with pytest.raises(SaslAuthenticationError, match="Cannot change principals"):
        s.authenticate(b"\x00bob\x00b-pw")
    assert failures == ["PLAIN"]


def test_without_reauthentication_sasl_requests_after_authenticating_are_an_illegal_state() -> None:
    """connections.max.reauth.ms=0: Kafka's KafkaApis answers a SaslHandshake (whatever mechanism it names) and a
    SaslAuthenticate ILLEGAL_SASL_STATE, and the connection stays authenticated and served."""
    failures: list[str] = []
    s = session(Clock(), failures)
    s.handshake("PLAIN", 1)
    s.authenticate(b"\x00alice\x00a-pw")
    for mechanism in ("PLAIN", "SCRAM-SHA-256", "GSSAPI"):
        assert s.refusal(17) is None
        code = s.handshake(mechanism, 1)
        assert (code, s.listed_mechanisms(code)) == (ErrorCode.illegal_sasl_state, ())
    assert s.refusal(36) is None
    with pytest.raises(SaslStateError, match="SaslAuthenticate request received after successful authentication"):
        s.authenticate(b"\x00alice\x00a-pw")
    assert not s.failed and not s.raw_tokens and s.principal == "User:alice" and s.refusal(METADATA) is None
    assert failures == []


def test_reauthentication_uses_the_same_mechanism_at_most_once_a_second() -> None:
    clock = Clock()
    failures: list[str] = []
    s = session(clock, failures, reauth_ms=500)
    s.handshake("PLAIN", 1)
    s.authenticate(b"\x00alice\x00a-pw")
    clock.now += 0.4
    assert s.handshake("PLAIN", 1) is ErrorCode.none  # the first re-authentication
    assert "re-authenticating" in (s.refusal(METADATA) or "")  # nothing else until it ends
    s.authenticate(b"\x00alice\x00a-pw")
    clock.now += 0.3
    # Within a second of the last one's start, no re-authentication begins (KafkaApis answers), the session goes on.
    assert s.refusal(17) is None and s.handshake("PLAIN", 1) is ErrorCode.illegal_sasl_state
    assert s.refusal(METADATA) is None
    clock.now += 0.3  # the session ended, and it is still too early to renew it: the connection closes
    assert "expired" in (s.refusal(17) or "")
    assert failures == [] and not s.failed


@pytest.mark.parametrize("version", [0, 1])
def test_a_reauthentication_naming_another_mechanism_closes_the_connection(version: int) -> None:
    failures: list[str] = []
    s = session(Clock(), failures, reauth_ms=60_000)
    s.handshake("PLAIN", 1)
    s.authenticate(b"\x00alice\x00a-pw")
    # The handshake is answered (the mechanism is enabled); the next request fails, unanswered.
    code = s.handshake("SCRAM-SHA-256", version)
    assert (code, s.listed_mechanisms(code)) == (ErrorCode.none, ("PLAIN", "SCRAM-SHA-256"))
    message = "SASL mechanism 'SCRAM-SHA-256' requested by client is not supported for re-authentication of " \
        "mechanism 'PLAIN'"
    if version == 0:  # the next frame is a raw token
        with pytest.raises(SaslAuthenticationError, match=message):
            s.authenticate(b"n,,n=alice,r=abc")
    else:
        assert s.refusal(36) == message
    assert s.failed and "failed" in (s.refusal(METADATA) or "") and failures == ["PLAIN"]
    # A mechanism that is not enabled fails the re-authentication at its handshake, as the first one.
    other = session(Clock(), failures, reauth_ms=60_000)
    other.handshake("PLAIN", 1)
    other.authenticate(b"\x00alice\x00a-pw")
    assert other.handshake("GSSAPI", 1) is ErrorCode.unsupported_sasl_mechanism and other.failed


def test_the_principal_is_kept_on_the_connection_and_shown_in_request_logs() -> None:
    s = session(Clock(), [])
    state = ConnectionState(sasl=s)
    ctx = RequestContext(
        api_key=3,
        api_version=12,
        correlation_id=7,
        client_id="app",
        client_host="127.0.0.1",
        broker=cast(BrokerServices, None),
        connection=state,
    )
    assert state.principal is None and "principal" not in ctx.describe()
    s.handshake("PLAIN", 1)
    s.authenticate(b"\x00alice\x00a-pw")
    assert state.principal == "User:alice"
    assert ctx.describe().endswith("client='app'@127.0.0.1:0 principal=User:alice")
