"""SASL configuration and SCRAM metadata without a broker: JAAS parsing, the per-listener SASL settings, the
``--add-scram`` option, the controller's AlterUserScramCredentials decisions and the image's SCRAM credentials."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from controller.decisions.scram import plan_scram_alterations
from metadata.cluster_records import RemoveUserScramCredentialRecord, UserScramCredentialRecord
from metadata.controller_api import ScramDeletion, ScramUpsertion
from metadata.image import MetadataImage
from settings.jaas import JaasError, parse_jaas
from settings.scram_option import parse_add_scram
from settings.server import ServerConfig
from storage.config import ConfigError
from storage.metadata.record_codec import decode_record, encode_record
from wire.sasl.scram import SCRAM_SHA_256, SCRAM_SHA_512, credential_from_salted

SECRET = "never-printed-secret"
PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"


def test_jaas_config_as_kafka_writes_it() -> None:
    entry = parse_jaas(
        f'{PLAIN} required\n  username="admin" password="{SECRET}"\n  user_admin="{SECRET}" '
        f'user_alice=alice-pw user_bob="with \\" quote";'
    )
    assert entry.login_module == PLAIN and entry.flag == "required"
    assert entry.users() == {"admin": SECRET, "alice": "alice-pw", "bob": 'with " quote'}
    assert SECRET not in repr(entry)


@pytest.mark.parametrize(
    "text",
    [
        "",
        PLAIN,
        f"{PLAIN} required",
        f'{PLAIN} mandatory user_a="{SECRET}";',
        f'{PLAIN} required user_a="{SECRET}"',
        f'{PLAIN} required user_a="{SECRET};',
        f'{PLAIN} required user_a "{SECRET}";',
        f"{PLAIN} required ={SECRET};",
        f'{PLAIN} required user_a="{SECRET}" user_a="x";',
        f'{PLAIN} required user_a="{SECRET}"; {SCRAM} required;',
        f"{PLAIN} required user_a={SECRET} !;",
    ],
)
def test_malformed_jaas_configs_are_refused_without_their_text(text: str) -> None:
    with pytest.raises(JaasError) as failure:
        parse_jaas(text)
    assert SECRET not in str(failure.value)


def _config(**props: str) -> ServerConfig:
    base = {
        "listeners": "PLAINTEXT://127.0.0.1:9092,SASL://127.0.0.1:9094,CONTROLLER://127.0.0.1:9093",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL:SASL_PLAINTEXT",
    }
    base.update({key.replace("__", "."): value for key, value in props.items()})
    return ServerConfig.from_properties(base)


def test_a_sasl_listener_takes_its_mechanisms_and_plain_users() -> None:
    config = ServerConfig.from_properties(
        {
            "listeners": "PLAINTEXT://127.0.0.1:9092,SASL://127.0.0.1:9094,CONTROLLER://127.0.0.1:9093",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL:SASL_PLAINTEXT",
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "listener.name.sasl.sasl.enabled.mechanisms": "plain,SCRAM-SHA-256",
            "listener.name.sasl.plain.sasl.jaas.config": f'{PLAIN} required user_admin="{SECRET}";',
            "listener.name.sasl.scram-sha-256.sasl.jaas.config": f"{SCRAM} required;",
            "connections.max.reauth.ms": "60000",
        }
    )
    assert set(config.sasl) == {"SASL"}
    assert config.sasl["SASL"].mechanisms == ("PLAIN", "SCRAM-SHA-256")
    assert dict(config.sasl["SASL"].plain_users) == {"admin": SECRET}
    assert SECRET not in repr(config.sasl)
    assert config.value("connections.max.reauth.ms") == 60000


def test_the_global_jaas_config_serves_plain() -> None:
    config = _config(sasl__enabled__mechanisms="PLAIN", sasl__jaas__config=f'{PLAIN} required user_a="{SECRET}";')
    assert dict(config.sasl["SASL"].plain_users) == {"a": SECRET}


@pytest.mark.parametrize(
    ("props", "fragment"),
    [
        ({}, "sasl.enabled.mechanisms: mechanism GSSAPI is not implemented"),
        ({"sasl.enabled.mechanisms": "OAUTHBEARER"}, "mechanism OAUTHBEARER is not implemented"),
        (
            {"listener.name.sasl.sasl.enabled.mechanisms": "SCRAM-SHA-256,GSSAPI"},
            "listener.name.sasl.sasl.enabled.mechanisms: mechanism GSSAPI",
        ),
        (
            {"sasl.enabled.mechanisms": "PLAIN"},
            "listener.name.sasl.plain.sasl.jaas.config: listener SASL enables PLAIN",
        ),
        (
            {
                "sasl.enabled.mechanisms": "PLAIN",
                "listener.name.sasl.plain.sasl.jaas.config": f'{PLAIN} required x="{SECRET}"',
            },
            "listener.name.sasl.plain.sasl.jaas.config: malformed JAAS config",
        ),
        (
            {
                "sasl.enabled.mechanisms": "PLAIN",
                "listener.name.sasl.plain.sasl.jaas.config": f'{SCRAM} required x="{SECRET}";',
            },
            "the login module for PLAIN must be",
        ),
        (
            {
                "sasl.enabled.mechanisms": "PLAIN",
                "listener.name.sasl.plain.sasl.jaas.config": f'{PLAIN} required p="{SECRET}";',
            },
            "no user_<name>",
        ),
        (
            {
                "sasl.enabled.mechanisms": "PLAIN",
                "listener.name.other.sasl.enabled.mechanisms": "PLAIN",
                "sasl.jaas.config": f'{PLAIN} required user_a="{SECRET}";',
            },
            "listener OTHER is not a SASL listener",
        ),
        ({"sasl.kerberos.service.name": "kafka"}, "sasl.kerberos.service.name: not implemented"),
    ],
)
def test_sasl_settings_fjord_cannot_serve_stop_the_load(props: dict[str, str], fragment: str) -> None:
    base = {
        "listeners": "PLAINTEXT://127.0.0.1:9092,SASL://127.0.0.1:9094,CONTROLLER://127.0.0.1:9093",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL:SASL_PLAINTEXT",
        **props,
    }
    with pytest.raises(ConfigError, match=fragment.replace("<", ".").replace(">", ".")) as failure:
        ServerConfig.from_properties(base)
    assert SECRET not in str(failure.value)


def test_add_scram_salts_and_hashes_the_password() -> None:
    upsertion = parse_add_scram(f"SCRAM-SHA-512=[name=admin,password={SECRET},iterations=8192]")
    assert (upsertion.name, upsertion.mechanism, upsertion.iterations) == ("admin", SCRAM_SHA_512, 8192)
    assert upsertion.salted_password == SCRAM_SHA_512.salted_password(SECRET, upsertion.salt, 8192)
    quoted = parse_add_scram('scram-sha-256=[name="a,b",password="p,w"]')
    assert quoted.name == "a,b" and quoted.salted_password == SCRAM_SHA_256.salted_password("p,w", quoted.salt, 4096)
    assert SECRET not in repr(upsertion)


def test_add_scram_takes_kafkas_base64_salt_and_a_password_salted_elsewhere() -> None:
    """As Kafka's ScramParser: ``salt`` is base64, and ``saltedpassword`` (base64) may stand for the password."""
    salt = b"0123456789abcdef"
    salted = SCRAM_SHA_256.salted_password(SECRET, salt, 8192)
    given = parse_add_scram(f'SCRAM-SHA-256=[name=alice,iterations=8192,salt="{base64.b64encode(salt).decode()}",'
                            f'saltedpassword="{base64.b64encode(salted).decode()}"]')
    assert (given.salt, given.salted_password, given.iterations) == (salt, salted, 8192)
    from_password = parse_add_scram(f"SCRAM-SHA-256=[name=alice,iterations=8192,"
                                    f"salt={base64.b64encode(salt).decode()},password={SECRET}]")
    assert from_password == given


@pytest.mark.parametrize(
    "text",
    [
        f"SCRAM-SHA-256=[name=a,salt=not_base64!,password={SECRET}]",
        f"SCRAM-SHA-256=[name=a,saltedpassword={base64.b64encode(SECRET.encode()).decode()}]",
        f"SCRAM-SHA-256=[name=a,salt=c2FsdA==,saltedpassword={SECRET}!]",
        f"SCRAM-SHA-256=[name=a,salt=c2FsdA==,saltedpassword=eA==,password={SECRET}]",
        f"SCRAM-SHA-1=[name=a,password={SECRET}]",
        f"SCRAM-SHA-256=name=a,password={SECRET}",
        "SCRAM-SHA-256=[name=a]",
        f"SCRAM-SHA-256=[password={SECRET}]",
        f"SCRAM-SHA-256=[name=a,password={SECRET},iterations=10]",
        f"SCRAM-SHA-256=[name=a,password={SECRET},colour=red]",
        f'SCRAM-SHA-256=[name=a,password="{SECRET}]',
    ],
)
def test_bad_add_scram_values_are_one_line_without_the_password(text: str) -> None:
    with pytest.raises(ConfigError, match="--add-scram") as failure:
        parse_add_scram(text)
    assert SECRET not in str(failure.value)


def _upsert(name: str, mechanism: int = 1, iterations: int = 4096) -> ScramUpsertion:
    return ScramUpsertion(name, mechanism, iterations, b"salt", b"salted-password")


def _image(*records: Any) -> MetadataImage:
    return MetadataImage("cluster").apply(records, len(records) - 1)


def test_scram_alterations_become_records_of_keys_only() -> None:
    plan = plan_scram_alterations(_image(), [], [_upsert("alice"), _upsert("alice", 2), _upsert("bob", 2, 8192)])
    assert [(r.user, r.error) for r in plan.results] == [("alice", ErrorCode.none), ("bob", ErrorCode.none)]
    assert all(isinstance(r, UserScramCredentialRecord) for r in plan.records)
    assert all(b"salted-password" not in encode_record(r) for r in plan.records)
    image = _image(*plan.records)
    expected = credential_from_salted(SCRAM_SHA_512, b"salted-password", b"salt", 8192)
    assert image.scram_credential("bob", 2) == expected
    assert set(image.scram_credentials["alice"]) == {1, 2}
    assert _image(*image.to_records()).scram_credentials == image.scram_credentials  # snapshots keep them
    assert [decode_record(encode_record(r)) for r in plan.records] == plan.records

    removed = image.apply([RemoveUserScramCredentialRecord("alice", 1), RemoveUserScramCredentialRecord("bob", 2)], 9)
    assert set(removed.scram_credentials) == {"alice"} and set(removed.scram_credentials["alice"]) == {2}


def test_a_user_with_one_invalid_alteration_gets_none_of_them() -> None:
    image = _image(*plan_scram_alterations(_image(), [], [_upsert("carol")]).records)
    plan = plan_scram_alterations(
        image,
        [ScramDeletion("alice", 1), ScramDeletion("carol", 1), ScramDeletion("dave", 1)],
        [
            _upsert("alice", 2),
            _upsert("bob", 3),
            _upsert("dave", 1),
            _upsert("erin", 1, 100),
            _upsert(""),
            ScramUpsertion("frank", 1, 4096, b"", b"x"),
        ],
    )
    assert [(r.user, r.error) for r in plan.results] == [
        ("alice", ErrorCode.resource_not_found),
        ("carol", ErrorCode.none),
        ("dave", ErrorCode.duplicate_resource),
        ("bob", ErrorCode.unsupported_sasl_mechanism),
        ("erin", ErrorCode.unacceptable_credential),
        ("", ErrorCode.unacceptable_credential),
        ("frank", ErrorCode.unacceptable_credential),
    ]
    assert plan.records == [RemoveUserScramCredentialRecord("carol", 1)]


def test_a_malformed_jaas_config_for_a_mechanism_not_enabled_still_stops_the_load() -> None:
    with pytest.raises(
        ConfigError, match=r"listener\.name\.sasl\.scram-sha-512\.sasl\.jaas\.config: malformed"
    ) as failure:
        _config(
            sasl__enabled__mechanisms="SCRAM-SHA-256",
            **{"listener.name.sasl.scram-sha-512.sasl.jaas.config": f'{SCRAM} required x="{SECRET}"'},
        )
    assert SECRET not in str(failure.value)
