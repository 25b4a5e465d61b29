"""The authorization decision and the ACL plans, pure: Kafka's StandardAuthorizer semantics without a process.

Literal, wildcard and prefixed patterns; the principal and host wildcards; DENY over ALLOW; the implied operations;
super users; allow.everyone.if.no.acl.found; MATCH/ANY filters; CreateAcls/DeleteAcls records, replayed into the
image and kept by a snapshot."""

from __future__ import annotations

import itertools

import pytest
from kio.schema.errors import ErrorCode

from controller.decisions.acls import plan_create_acls, plan_delete_acls
from metadata.acl.authorizer import Authorizer, AuthorizerSettings, parse_super_users
from metadata.acl.binding import (
    CLUSTER_NAME,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    PatternType,
    PermissionType,
    ResourceType,
)
from metadata.image import MetadataImage

Op, Rt, Pt, Perm = AclOperation, ResourceType, PatternType, PermissionType
ALICE, BOB = "User:alice", "User:bob"


def acl(
    name: str,
    op: AclOperation = Op.READ,
    *,
    principal: str = ALICE,
    kind: ResourceType = Rt.TOPIC,
    pattern: PatternType = Pt.LITERAL,
    perm: PermissionType = Perm.ALLOW,
    host: str = "*",
) -> AclBinding:
    return AclBinding(kind, name, pattern, principal, host, op, perm)


def bindings(*acls: AclBinding) -> dict[str, AclBinding]:
    return {str(i): a for i, a in enumerate(acls)}


def allowed(
    acls: dict[str, AclBinding],
    op: AclOperation,
    name: str = "orders",
    *,
    principal: str = ALICE,
    kind: ResourceType = Rt.TOPIC,
    host: str = "10.0.0.1",
    settings: AuthorizerSettings | None = None,
) -> bool:
    authorizer = Authorizer(settings or AuthorizerSettings())
    return authorizer.authorize(acls, principal, host, op, resource=kind, name=name)


def test_literal_acl_allows_only_its_resource_operation_and_principal() -> None:
    acls = bindings(acl("orders", Op.READ))
    assert allowed(acls, Op.READ)
    assert not allowed(acls, Op.WRITE)
    assert not allowed(acls, Op.READ, "payments")
    assert not allowed(acls, Op.READ, principal=BOB)
    assert not allowed(acls, Op.READ, kind=Rt.GROUP)


def test_wildcard_resource_principal_and_host() -> None:
    assert allowed(bindings(acl("*", Op.WRITE)), Op.WRITE, "anything")
    everyone = bindings(acl("orders", Op.READ, principal="User:*"))
    assert allowed(everyone, Op.READ, principal=BOB)
    only_host = bindings(acl("orders", Op.READ, host="10.0.0.2"))
    assert not allowed(only_host, Op.READ, host="10.0.0.1")
    assert allowed(only_host, Op.READ, host="10.0.0.2")


@pytest.mark.parametrize(
    ("binding_host", "client", "matches"),
    [
        ("0:0:0:0:0:0:0:1", "::1", True),  # as Kafka's tools write it (Java's getHostAddress), Python's peer name
        ("::1", "::1", True),
        ("0000:0000:0000:0000:0000:0000:0000:0001", "::1", True),
        ("10.0.0.1", "::ffff:10.0.0.1", True),  # an IPv4 client of a dual-stack listener: Java reports it as IPv4
        ("0:0:0:0:0:0:0:2", "::1", False),
        ("::ffff:10.0.0.2", "10.0.0.1", False),
        ("*", "::1", True),
    ],
)
def test_an_ipv6_binding_host_matches_however_it_is_spelt(binding_host: str, client: str, matches: bool) -> None:
    acls = bindings(acl("orders", Op.WRITE, host=binding_host))
    assert allowed(acls, Op.WRITE, host=client) is matches
    assert Authorizer().allowed_on_some(acls, ALICE, client, Op.WRITE, Rt.TOPIC) is matches
    denied = bindings(acl("orders", Op.WRITE), acl("orders", Op.WRITE, host=binding_host, perm=Perm.DENY))
    assert allowed(denied, Op.WRITE, host=client) is not matches


def test_prefixed_patterns_cover_names_that_start_with_them() -> None:
    acls = bindings(acl("ord", Op.READ, pattern=Pt.PREFIXED))
    assert allowed(acls, Op.READ, "orders")
    assert allowed(acls, Op.READ, "ord")
    assert not allowed(acls, Op.READ, "payments")
    # a literal binding named like a prefix is not a prefix
    assert not allowed(bindings(acl("ord", Op.READ)), Op.READ, "orders")


def test_deny_beats_allow_wherever_it_comes_from() -> None:
    allow_all = acl("*", Op.ALL)
    assert not allowed(bindings(allow_all, acl("orders", Op.READ, perm=Perm.DENY)), Op.READ)
    assert not allowed(bindings(allow_all, acl("ord", Op.ALL, pattern=Pt.PREFIXED, perm=Perm.DENY)), Op.WRITE)
    # a DENY of another operation or principal does not matter
    assert allowed(bindings(allow_all, acl("orders", Op.WRITE, perm=Perm.DENY)), Op.READ)
    assert allowed(bindings(allow_all, acl("orders", Op.READ, principal=BOB, perm=Perm.DENY)), Op.READ)
    # a DENY of DESCRIBE is not implied by a DENY of READ
    assert allowed(bindings(allow_all, acl("orders", Op.READ, perm=Perm.DENY)), Op.DESCRIBE)


@pytest.mark.parametrize(
    ("granted", "implied"),
    [
        (Op.READ, Op.DESCRIBE),
        (Op.WRITE, Op.DESCRIBE),
        (Op.DELETE, Op.DESCRIBE),
        (Op.ALTER, Op.DESCRIBE),
        (Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS),
        (Op.ALL, Op.WRITE),
        (Op.ALL, Op.ALTER_CONFIGS),
    ],
)
def test_implied_operations(granted: AclOperation, implied: AclOperation) -> None:
    assert allowed(bindings(acl("orders", granted)), implied)


def test_implication_goes_one_way_only() -> None:
    assert not allowed(bindings(acl("orders", Op.DESCRIBE)), Op.READ)
    assert not allowed(bindings(acl("orders", Op.DESCRIBE_CONFIGS)), Op.ALTER_CONFIGS)
    assert not allowed(bindings(acl("orders", Op.READ)), Op.DESCRIBE_CONFIGS)


def test_super_users_may_do_everything_even_against_a_deny() -> None:
    settings = AuthorizerSettings(super_users=parse_super_users(" User:admin ;User:broker;"))
    assert settings.super_users == {"User:admin", "User:broker"}
    acls = bindings(acl("*", Op.ALL, principal="User:*", perm=Perm.DENY))
    assert allowed(acls, Op.DELETE, principal="User:admin", settings=settings)
    assert not allowed(acls, Op.DELETE, principal=ALICE, settings=settings)


def test_allow_everyone_if_no_acl_found_applies_only_to_resources_without_any_acl() -> None:
    open_settings = AuthorizerSettings(allow_everyone_if_no_acl_found=True)
    acls = bindings(acl("orders", Op.READ, principal=BOB))
    assert allowed({}, Op.WRITE, settings=open_settings)
    assert allowed(acls, Op.WRITE, "payments", settings=open_settings)
    # an ACL on the resource (for someone else) means the default no longer applies
    assert not allowed(acls, Op.READ, settings=open_settings)
    assert not allowed({}, Op.WRITE)


def test_allowed_on_some_resource_of_a_type() -> None:
    authorizer = Authorizer()
    write_one = bindings(acl("orders", Op.WRITE))
    assert authorizer.allowed_on_some(write_one, ALICE, "h", Op.WRITE, Rt.TOPIC)
    assert not authorizer.allowed_on_some(write_one, BOB, "h", Op.WRITE, Rt.TOPIC)
    denied_everywhere = bindings(acl("orders", Op.WRITE), acl("*", Op.WRITE, perm=Perm.DENY))
    assert not authorizer.allowed_on_some(denied_everywhere, ALICE, "h", Op.WRITE, Rt.TOPIC)
    denied_prefix = bindings(acl("orders", Op.WRITE), acl("ord", Op.ALL, pattern=Pt.PREFIXED, perm=Perm.DENY))
    assert not authorizer.allowed_on_some(denied_prefix, ALICE, "h", Op.WRITE, Rt.TOPIC)


def test_allowed_on_some_decides_a_literal_hardcode_first() -> None:
    """Kafka's authorizeByResourceType first authorizes a literal topic named "hardcode": with
    allow.everyone.if.no.acl.found an ACL on some other topic (whoever it names) refuses nothing, unless an ACL
    covers "hardcode" too; a super user passes whatever DENY exists."""
    everyone = Authorizer(AuthorizerSettings(allow_everyone_if_no_acl_found=True))
    others_topic = bindings(acl("orders", Op.READ, principal=BOB))
    assert everyone.allowed_on_some(others_topic, ALICE, "h", Op.WRITE, Rt.TOPIC)
    covering = bindings(acl("hard", Op.WRITE, pattern=Pt.PREFIXED, principal=BOB))
    assert not everyone.allowed_on_some(covering, ALICE, "h", Op.WRITE, Rt.TOPIC)
    admin = Authorizer(AuthorizerSettings(super_users=frozenset({ALICE})))
    assert admin.allowed_on_some(bindings(acl("*", Op.ALL, perm=Perm.DENY)), ALICE, "h", Op.WRITE, Rt.TOPIC)


def test_allowed_on_some_counts_no_implied_operation_and_a_wildcard_allow_wins_over_literal_denies() -> None:
    authorizer = Authorizer()
    # READ implies DESCRIBE on the topic it names, but Kafka's by-type check wants the operation itself (or ALL)
    assert not authorizer.allowed_on_some(bindings(acl("orders", Op.READ)), ALICE, "h", Op.DESCRIBE, Rt.TOPIC)
    assert authorizer.allowed_on_some(bindings(acl("orders", Op.ALL)), ALICE, "h", Op.DESCRIBE, Rt.TOPIC)
    wildcard = bindings(acl("*", Op.WRITE), acl("orders", Op.WRITE, perm=Perm.DENY))
    assert authorizer.allowed_on_some(wildcard, ALICE, "h", Op.WRITE, Rt.TOPIC)
    # a literal DENY does not cover a PREFIXED ALLOW of the same name
    prefixed = bindings(acl("orders", Op.WRITE, pattern=Pt.PREFIXED), acl("orders", Op.WRITE, perm=Perm.DENY))
    assert authorizer.allowed_on_some(prefixed, ALICE, "h", Op.WRITE, Rt.TOPIC)


def test_authorized_operations_lists_what_is_allowed() -> None:
    acls = bindings(acl("orders", Op.READ), acl("orders", Op.WRITE, perm=Perm.DENY))
    ops = Authorizer().authorized_operations(
        acls, ALICE, "h", resource=Rt.TOPIC, name="orders", operations=[Op.READ, Op.WRITE, Op.DESCRIBE, Op.DELETE]
    )
    assert ops == {Op.READ, Op.DESCRIBE}


def test_the_index_follows_a_new_image() -> None:
    authorizer = Authorizer()
    assert not authorizer.authorize({}, ALICE, "h", Op.READ, resource=Rt.TOPIC, name="orders")
    acls = bindings(acl("orders"))
    assert authorizer.authorize(acls, ALICE, "h", Op.READ, resource=Rt.TOPIC, name="orders")


# ---------------------------------------------------------------------------------------------- filters

LITERAL = acl("orders", Op.READ)
WILDCARD = acl("*", Op.WRITE, principal=BOB)
PREFIX = acl("ord", Op.DESCRIBE, pattern=Pt.PREFIXED, perm=Perm.DENY)
GROUP = acl("app", Op.READ, kind=Rt.GROUP)
ALL_ACLS = (LITERAL, WILDCARD, PREFIX, GROUP)


@pytest.mark.parametrize(
    ("acl_filter", "expected"),
    [
        (AclBindingFilter(), ALL_ACLS),
        (AclBindingFilter(Rt.TOPIC), (LITERAL, WILDCARD, PREFIX)),
        (AclBindingFilter(Rt.ANY, "orders"), (LITERAL,)),
        (AclBindingFilter(Rt.TOPIC, "orders", Pt.MATCH), (LITERAL, WILDCARD, PREFIX)),
        (AclBindingFilter(Rt.TOPIC, "payments", Pt.MATCH), (WILDCARD,)),
        (AclBindingFilter(Rt.TOPIC, None, Pt.PREFIXED), (PREFIX,)),
        (AclBindingFilter(Rt.TOPIC, "orders", Pt.PREFIXED), ()),
        (AclBindingFilter(principal=BOB), (WILDCARD,)),
        (AclBindingFilter(operation=Op.READ), (LITERAL, GROUP)),
        (AclBindingFilter(permission=Perm.DENY), (PREFIX,)),
        (AclBindingFilter(host="10.0.0.1"), ()),
    ],
)
def test_filters(acl_filter: AclBindingFilter, expected: tuple[AclBinding, ...]) -> None:
    assert tuple(b for b in ALL_ACLS if acl_filter.matches(b)) == expected


def test_a_filter_with_an_unknown_code_is_refused() -> None:
    assert AclBindingFilter(Rt.UNKNOWN).unknown() is not None
    assert AclBindingFilter().unknown() is None


# ---------------------------------------------------------------------------------------------- plans and image


def test_create_validates_each_binding_and_skips_duplicates() -> None:
    ids = (f"id-{i}" for i in itertools.count())
    invalid = [
        acl("orders", Op.ANY),
        acl("orders", perm=Perm.ANY),
        acl("orders", pattern=Pt.MATCH),
        acl("orders", kind=Rt.ANY),
        acl("", Op.READ),
        acl("orders", principal="alice"),
        acl("other-cluster", Op.ALTER, kind=Rt.CLUSTER),
    ]
    plan = plan_create_acls({}, [LITERAL, *invalid, LITERAL, PREFIX], lambda: next(ids))
    codes = [r.error for r in plan.results]
    assert codes == [ErrorCode.none, *[ErrorCode.invalid_request] * len(invalid), ErrorCode.none, ErrorCode.none]
    image = MetadataImage("c").apply(plan.records, 1)
    assert set(image.acls.values()) == {LITERAL, PREFIX}
    again = plan_create_acls(image.acls, [LITERAL, acl(CLUSTER_NAME, Op.ALTER, kind=Rt.CLUSTER)])
    assert len(again.records) == 1 and all(r.error is ErrorCode.none for r in again.results)


def test_delete_removes_what_each_filter_matches_once_and_a_snapshot_keeps_the_rest() -> None:
    ids = (f"id-{i}" for i in itertools.count())
    image = MetadataImage("c").apply(plan_create_acls({}, ALL_ACLS, lambda: next(ids)).records, 1)
    snapshot = MetadataImage("c").apply(image.to_records(), 1)
    assert snapshot.acls == image.acls
    plan = plan_delete_acls(
        image.acls,
        [
            AclBindingFilter(Rt.TOPIC, "orders", Pt.LITERAL),
            AclBindingFilter(Rt.TOPIC, "orders", Pt.MATCH),
            AclBindingFilter(Rt.UNKNOWN),
        ],
    )
    assert plan.results[0].deleted == (LITERAL,)
    assert set(plan.results[1].deleted) == {LITERAL, WILDCARD, PREFIX}
    assert plan.results[2].error is ErrorCode.invalid_request
    assert len(plan.records) == 3
    after = image.apply(plan.records, 2)
    assert set(after.acls.values()) == {GROUP}
