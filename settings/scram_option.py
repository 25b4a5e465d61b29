"""``--add-scram``: a first SCRAM user as ``kafka-storage format --add-scram`` takes it, salted here.

::

    'SCRAM-SHA-256=[name=admin,password=admin-secret]'    (iterations=N and a base64 salt=... may follow)
    'SCRAM-SHA-512=[name=admin,iterations=8192,salt="c2FsdA==",saltedpassword="..."]'    (salted elsewhere)

Without a first user nobody can authenticate with SCRAM to create the others (AlterUserScramCredentials needs a
connection), so both ``fjord storage format`` and ``fjord server start`` take it. The password is salted and hashed
as soon as the option is read (as an admin client does) and never kept: what a format writes to
``bootstrap.properties`` (``settings.bootstrap_file``) and what the node sends its controller
(``controller.scram_bootstrap``) is the salted password. Errors name the option and the field at fault, never the
value of a password.
"""

from __future__ import annotations

import base64
import binascii
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field

from storage.config import ConfigError
from wire.sasl.scram import DEFAULT_ITERATIONS, MAX_ITERATIONS, MECHANISMS, MIN_ITERATIONS, ScramMechanism

OPTION = "--add-scram"
_FIELDS = frozenset(("name", "password", "saltedpassword", "iterations", "salt"))


@dataclass(frozen=True, slots=True)
class AddScram:
    """One user's credential for one mechanism, as an AlterUserScramCredentials upsertion carries it."""

    mechanism: ScramMechanism
    name: str
    iterations: int
    salt: bytes = field(repr=False)
    salted_password: bytes = field(repr=False)


def parse_add_scram(text: str) -> AddScram:
    """``MECHANISM=[name=...,password=...(,iterations=N)(,salt=...)]`` salted: a random salt unless one is given.
    As Kafka's ``ScramParser``: the salt is base64, and ``saltedpassword`` (base64, with a salt) may stand for the
    password."""
    mechanism_name, sep, rest = text.partition("=")
    mechanism = MECHANISMS.get(mechanism_name.strip().upper())
    if mechanism is None:
        raise ConfigError(
            f"{OPTION}: mechanism must be one of {', '.join(MECHANISMS)} (as in "
            f"'SCRAM-SHA-256=[name=admin,password=...]')"
        )
    rest = rest.strip()
    if not sep or not rest.startswith("[") or not rest.endswith("]"):
        raise ConfigError(f"{OPTION}: expected {mechanism.name}=[name=...,password=...]")
    fields = _pairs(rest[1:-1])
    name, password = fields.get("name", ""), fields.get("password", "")
    if not name:
        raise ConfigError(f"{OPTION}: name is missing or empty")
    try:
        iterations = int(fields.get("iterations", DEFAULT_ITERATIONS))
    except ValueError:
        raise ConfigError(f"{OPTION}: iterations of user {name} is not a number") from None
    check_iterations(iterations, name)
    salt = _base64(fields["salt"], "salt", name) if fields.get("salt") else secrets.token_bytes(32)
    if password and "saltedpassword" in fields:
        raise ConfigError(f"{OPTION}: give password or saltedpassword for user {name}, not both")
    if password:
        return AddScram(mechanism, name, iterations, salt, mechanism.salted_password(password, salt, iterations))
    if not fields.get("saltedpassword"):
        raise ConfigError(f"{OPTION}: password (or saltedpassword) is missing or empty for user {name}")
    if not fields.get("salt"):
        raise ConfigError(f"{OPTION}: saltedpassword of user {name} needs the salt it was salted with")
    return AddScram(mechanism, name, iterations, salt, _base64(fields["saltedpassword"], "saltedpassword", name))


def _base64(text: str, field_name: str, name: str) -> bytes:
    """A base64 field's bytes; the error names the field, never its value (a salted password is a secret)."""
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ConfigError(f"{OPTION}: {field_name} of user {name} is not base64") from None


def check_iterations(iterations: int, name: str) -> None:
    """Kafka's bounds on a credential's iterations; ConfigError naming the user."""
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ConfigError(f"{OPTION}: iterations of user {name} must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}")


def _pairs(body: str) -> dict[str, str]:
    """``k=v,k="v, with commas"`` into a dict; quoted values may hold commas and escaped quotes."""
    out: dict[str, str] = {}
    i, n = 0, len(body)
    while i < n:
        eq = body.find("=", i)
        if eq < 0:
            raise ConfigError(f"{OPTION}: expected key=value inside [...]")
        key = body[i:eq].strip()
        i = eq + 1
        if i < n and body[i] == '"':
            i += 1
            chars: list[str] = []
            while i < n and body[i] != '"':
                if body[i] == "\\" and i + 1 < n:
                    i += 1
                chars.append(body[i])
                i += 1
            if i >= n:
                raise ConfigError(f"{OPTION}: unterminated quoted value of {key}")
            value = "".join(chars)
            i += 1
            if i < n and body[i] != ",":
                raise ConfigError(f"{OPTION}: expected ',' after the quoted value of {key}")
        else:
            end = body.find(",", i)
            end = n if end < 0 else end
            value = body[i:end]
            i = end
        if key not in _FIELDS:
            raise ConfigError(f"{OPTION}: unknown field {key!r} (expected {', '.join(sorted(_FIELDS))})")
        if key in out:
            raise ConfigError(f"{OPTION}: field {key} given twice")
        out[key] = value
        i += 1  # the comma
    return out


def last_of_each(credentials: Iterable[AddScram]) -> tuple[AddScram, ...]:
    """One credential per user and mechanism, the last given, as Kafka's replay of its bootstrap records keeps the
    last (sent together, two would be refused as altering one credential twice)."""
    last = {(c.name, c.mechanism.type_id): c for c in credentials}
    return tuple(last.values())
