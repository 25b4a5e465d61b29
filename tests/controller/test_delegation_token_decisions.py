"""The controller's delegation-token decisions (``controller.decisions.delegation_tokens``) with Kafka's rules, the
tokens' place in the metadata image and its snapshots, and the ChangeDelegationToken RPC's frames (how a broker of a
quorum passes a token request to the active controller)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from controller.decisions.delegation_tokens import TokenLimits, plan_token_request, plan_token_sweep
from metadata.cluster_records import DelegationTokenRecord, RemoveDelegationTokenRecord
from metadata.delegation_tokens import CREATE, EXPIRE, RENEW, TokenRequest, TokenResult, token_hmac
from metadata.image import MetadataImage
from metadata.rpc.stream_codec import (
    decode_stream_request,
    decode_stream_response,
    encode_stream_request,
    encode_stream_response,
)
from metadata.rpc.stream_rpcs import ChangeDelegationToken, StreamResponse
from storage.metadata.api import NodeIdentity

SECRET = "secret"
LIMITS = TokenLimits(SECRET, max_lifetime_ms=10_000, expiry_time_ms=3_000)
NOW = 1_000_000


def _created(image: MetadataImage, **fields: object) -> tuple[MetadataImage, TokenResult]:
    plan = plan_token_request(image, LIMITS, TokenRequest(CREATE, "User:alice", **fields), NOW)  # type: ignore[arg-type]
    return image.apply(plan.records, image.offset + 1), plan.result


def test_without_a_secret_key_tokens_are_off() -> None:
    plan = plan_token_request(MetadataImage("c"), TokenLimits(None, 1, 1), TokenRequest(CREATE, "User:alice"), NOW)
    assert (plan.records, plan.result.error) == ([], ErrorCode.delegation_token_auth_disabled)


def test_a_creation_takes_the_default_lifetimes_or_a_shorter_maximum() -> None:
    image, result = _created(MetadataImage("c"), renewers=("User:bob",))
    token = result.token
    assert token is not None and result.error is ErrorCode.none
    assert (token.owner, token.requester, token.renewers) == ("User:alice", "User:alice", ("User:bob",))
    assert (token.issue_ms, token.expiry_ms, token.max_ms) == (NOW, NOW + 3_000, NOW + 10_000)
    assert result.token_hmac == token_hmac(SECRET, token.token_id)
    assert image.delegation_tokens[token.token_id] == token
    _, short = _created(MetadataImage("c"), max_lifetime_ms=1_000)
    assert short.token is not None and (short.token.expiry_ms, short.token.max_ms) == (NOW + 1_000, NOW + 1_000)
    _, bad = _created(MetadataImage("c"), renewers=("Group:ops",))
    assert bad.error is ErrorCode.invalid_principal_type


def test_renew_and_expire_follow_kafkas_rules() -> None:
    image, created = _created(MetadataImage("c"), renewers=("User:bob",))
    assert created.token is not None
    hmac = created.token_hmac

    def ask(kind: str, requester: str, period_ms: int, now_ms: int = NOW + 1_000, given: bytes = hmac) -> TokenResult:
        request = TokenRequest(kind, requester, token_hmac=given, period_ms=period_ms)
        return plan_token_request(image, LIMITS, request, now_ms).result

    assert ask(RENEW, "User:bob", 60_000).expiry_ms == NOW + 1_000 + 3_000  # at most the default expiry time
    assert ask(RENEW, "User:alice", 500).expiry_ms == NOW + 1_500
    assert ask(RENEW, "User:bob", -1, now_ms=NOW + 2_000).expiry_ms == NOW + 5_000  # the default period
    assert ask(EXPIRE, "User:alice", 100_000).expiry_ms == NOW + 10_000  # capped by the maximum
    assert ask(RENEW, "User:carol", -1).error is ErrorCode.delegation_token_owner_mismatch
    assert ask(RENEW, "User:alice", -1, given=b"x" * 64).error is ErrorCode.delegation_token_not_found
    assert ask(RENEW, "User:alice", -1, now_ms=NOW + 3_001).error is ErrorCode.delegation_token_expired
    at_once = plan_token_request(image, LIMITS, TokenRequest(EXPIRE, "User:bob", token_hmac=hmac, period_ms=-1), NOW)
    assert at_once.records == [RemoveDelegationTokenRecord(created.token.token_id)]


def test_the_sweep_removes_only_expired_tokens() -> None:
    image, first = _created(MetadataImage("c"), max_lifetime_ms=1_000)
    image, second = _created(image)
    assert first.token is not None and second.token is not None
    assert plan_token_sweep(image, NOW + 1_000) == []
    assert plan_token_sweep(image, NOW + 1_001) == [RemoveDelegationTokenRecord(first.token.token_id)]


def test_tokens_survive_a_snapshot() -> None:
    image, _ = _created(MetadataImage("c"), renewers=("User:bob",))
    records = image.to_records()
    assert [r for r in records if isinstance(r, DelegationTokenRecord)]
    assert MetadataImage("c").apply(records, 5).delegation_tokens == image.delegation_tokens


def test_the_change_rpc_carries_the_request_and_the_result() -> None:
    request = ChangeDelegationToken(NodeIdentity(1, 7), TokenRequest(RENEW, "User:alice", token_hmac=b"\x01\xff",
                                                                      period_ms=5))
    frame = encode_stream_request(request, 3)
    assert decode_stream_request(frame[4:])[1] == request
    _, created = _created(MetadataImage("c"))
    _, response = decode_stream_response(ChangeDelegationToken,
                                         encode_stream_response(3, StreamResponse(0, None, 1, created))[4:])
    assert response.result == created
