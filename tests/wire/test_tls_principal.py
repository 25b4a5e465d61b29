"""``wire.tls_principal``: Kafka's ``ssl.principal.mapping.rules`` over the cases of Kafka's SslPrincipalMapperTest,
and the subject DN of a certificate in the RFC 2253 form Java prints."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509.oid import NameOID

from testkit.tls_certs import CertificateAuthority
from wire.tls_principal import PrincipalMappingError, PrincipalRulesError, parse_rules, subject_dn


@pytest.mark.parametrize(
    "rules",
    [
        "DEFAULT",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/",
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L",
        "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U",
        "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/",
        "RULE:^CN=([^,DEFAULT,]+)(,.*|$)/$1/",
    ],
)
def test_kafkas_valid_rules_parse(rules: str) -> None:
    assert parse_rules(rules).rules


@pytest.mark.parametrize(
    "rules",
    [
        "default",
        "DEFAUL",
        "DEFAULT/L",
        "DEFAULT/U",
        "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
        "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
        "RULE:^CN=(unclosed/$1/",  # a pattern Python's re cannot compile: an error at start, as Java's would be
    ],
)
def test_kafkas_invalid_rules_are_refused(rules: str) -> None:
    with pytest.raises(PrincipalRulesError):
        parse_rules(rules)


def test_kafkas_mapping_cases() -> None:
    mapper = parse_rules(
        ", ".join(
            [
                "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
                "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
                "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U",
                "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
                "DEFAULT",
            ]
        )
    )
    assert mapper.name("CN=Duke,OU=ServiceUsers,O=Org,C=US") == "duke"
    assert mapper.name("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US") == "duke@sme"
    assert mapper.name("cn=duke,ou=sme,dc=mycp,dc=com") == "DUKE@SME"
    assert mapper.name("cN=duke,OU=JavaSoft,O=Sun Microsystems") == "DUKE"
    assert mapper.name("OU=JavaSoft,O=Sun Microsystems,C=US") == "OU=JavaSoft,O=Sun Microsystems,C=US"


@pytest.mark.parametrize(
    ("expected", "rules"),
    [
        ("[]", ""),
        ("[DEFAULT]", "DEFAULT"),
        ("[RULE:/]", "RULE://"),
        ("[RULE:/.*]", "RULE:/.*/"),
        ("[RULE:/.*/L]", "RULE:/.*/L"),
        ("[RULE:/, DEFAULT]", "RULE://,DEFAULT"),
        ("[RULE:/, DEFAULT]", "  RULE:// ,  DEFAULT  "),
        ("[RULE:   /     , DEFAULT]", "  RULE:   /     / ,  DEFAULT  "),
        ("[RULE:  /     /U, DEFAULT]", "  RULE:  /     /U   ,DEFAULT  "),
        ("[RULE:([A-Z]*)/$1/U, RULE:([a-z]+)/$1, DEFAULT]", "  RULE:([A-Z]*)/$1/U   ,RULE:([a-z]+)/$1/,   DEFAULT  "),
        # empty rules are ignored
        ("[]", ",   , , ,      , , ,   "),
        ("[RULE:/, DEFAULT]", ",,RULE://,,,DEFAULT,,"),
        ("[RULE: /   , DEFAULT]", ",  , RULE: /   /    ,,,   DEFAULT, ,   "),
        ("[RULE:   /  /U, DEFAULT]", "     ,  , RULE:   /  /U    ,,  ,DEFAULT, ,"),
        # escape sequences
        ("[RULE:\\/\\\\\\(\\)\\n\\t/\\/\\/]", "RULE:\\/\\\\\\(\\)\\n\\t/\\/\\//"),
        ("[RULE:\\**\\/+/*/L, RULE:\\/*\\**/**]", "RULE:\\**\\/+/*/L,RULE:\\/*\\**/**/"),
        # rules rule
        (
            "[RULE:,RULE:,/,RULE:,\\//U, RULE:,/RULE:,, RULE:,RULE:,/L,RULE:,/L, RULE:, DEFAULT, /DEFAULT, DEFAULT]",
            "RULE:,RULE:,/,RULE:,\\//U,RULE:,/RULE:,/,RULE:,RULE:,/L,RULE:,/L,RULE:, DEFAULT, /DEFAULT/,DEFAULT",
        ),
        # a newline after a comma is whitespace (a rule list continued over lines of a properties file)
        ("[RULE:^CN=(.*)$/$1/L, DEFAULT]", "RULE:^CN=(.*)$/$1/L,\n    DEFAULT"),
    ],
)
def test_kafkas_rule_splitting(expected: str, rules: str) -> None:
    assert str(parse_rules(rules)) == expected


def test_kafkas_comma_with_whitespace() -> None:
    mapper = parse_rules("RULE:^CN=((\\\\, *|\\w)+)(,.*|$)/$1/,DEFAULT")
    assert mapper.name("CN=Tkac\\, Adam,OU=ITZ,DC=geodis,DC=cz") == "Tkac\\, Adam"


def test_no_matching_rule_is_an_error_naming_the_dn() -> None:
    mapper = parse_rules("RULE:^CN=([^,]+),.*$/$1/L")
    assert mapper.name("CN=Alice,OU=eng,O=Acme,C=US") == "alice"
    with pytest.raises(PrincipalMappingError, match="CN=carol"):
        mapper.name("CN=carol")


def test_replacement_back_references_follow_java() -> None:
    """``$12`` with one group is group 1 then "2"; a group beyond the pattern's is literal text (Kafka's escape);
    ``\\$`` is a dollar sign; ``${name}`` a named group."""
    assert parse_rules("RULE:^CN=(\\w+)$/$12/").name("CN=bob") == "bob2"
    assert parse_rules("RULE:^CN=(\\w+)$/$1@$4/").name("CN=bob") == "bob@$4"
    assert parse_rules("RULE:^CN=(\\w+)$/\\$$1/").name("CN=bob") == "$bob"
    assert parse_rules("RULE:^CN=(?P<user>\\w+)$/${user}/U").name("CN=bob") == "BOB"
    assert parse_rules("RULE:^CN=\\w+$/fixed/").name("CN=bob") == "fixed"


def test_subject_dn_is_javas_rfc2253(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path)
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.COUNTRY_NAME, "US"),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Acme, Inc."),
            x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "eng"),
            x509.NameAttribute(NameOID.COMMON_NAME, "alice"),
        ]
    )
    identity = ca.issue("alice", server=False, subject=subject)
    der = x509.load_pem_x509_certificate(identity.cert_pem.encode()).public_bytes(Encoding.DER)
    assert subject_dn(der) == "CN=alice,OU=eng,O=Acme\\, Inc.,C=US"


@pytest.mark.parametrize(
    ("attributes", "expected"),
    [
        # Java escapes = and # anywhere, and leading or trailing spaces
        ([x509.NameAttribute(NameOID.COMMON_NAME, " a=b#c ")], "CN=\\ a\\=b\\#c\\ "),
        # keywords outside RFC 2253's (emailAddress, serialNumber) are the dotted OID and the DER value in hex
        (
            [x509.NameAttribute(NameOID.COMMON_NAME, "svc"), x509.NameAttribute(NameOID.EMAIL_ADDRESS, "a@b.c")],
            "1.2.840.113549.1.9.1=#16056140622e63,CN=svc",
        ),
        (
            [x509.NameAttribute(NameOID.DOMAIN_COMPONENT, "example"), x509.NameAttribute(NameOID.USER_ID, "u1")],
            "UID=u1,DC=example",
        ),
    ],
)
def test_subject_dn_escapes_and_oids(tmp_path: Path, attributes: list[x509.NameAttribute], expected: str) -> None:
    ca = CertificateAuthority(tmp_path)
    identity = ca.issue("x", server=False, subject=x509.Name(attributes))
    der = x509.load_pem_x509_certificate(identity.cert_pem.encode()).public_bytes(Encoding.DER)
    assert subject_dn(der) == expected


def test_subject_dn_refuses_bytes_that_are_not_a_certificate() -> None:
    for garbage in (b"", b"\x30", b"\x30\x05\x02\x01\x01", b"not der at all"):
        with pytest.raises(ValueError):
            subject_dn(garbage)
