"""The first SCRAM users of a cluster, given on the command line as ``kafka-storage format --add-scram`` takes them.

::

    fjord server start --add-scram 'SCRAM-SHA-256=[name=admin,password=admin-secret]'

Without a first user nobody can authenticate with SCRAM to create the others (AlterUserScramCredentials needs a
connection). Fjord has no separate format step, so a broker (or combined) node creates these credentials when it
starts, before its listeners accept connections, and only those not already in the metadata: restarting with the
same option changes nothing, and a password changed since with ``kafka-configs.sh`` stays changed. The password
is salted and hashed here (as an admin client does) and never written anywhere; errors name the option and the
field at fault, never the value of a password.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Sequence

from kio.schema.errors import ErrorCode

from metadata.controller_api import ControllerClient, ScramUpsertion
from storage.config import ConfigError
from wire.sasl.scram import DEFAULT_ITERATIONS, MAX_ITERATIONS, MECHANISMS, MIN_ITERATIONS

logger = logging.getLogger(__name__)

OPTION = "--add-scram"
_FIELDS = frozenset(("name", "password", "iterations", "salt"))


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


def parse_add_scram(text: str) -> ScramUpsertion:
    """``MECHANISM=[name=...,password=...(,iterations=N)(,salt=...)]`` as the upsertion an admin client would
    send: a random salt (unless given) and the salted password, never the password."""
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
    if not password:
        raise ConfigError(f"{OPTION}: password is missing or empty for user {name}")
    try:
        iterations = int(fields.get("iterations", DEFAULT_ITERATIONS))
    except ValueError:
        raise ConfigError(f"{OPTION}: iterations of user {name} is not a number") from None
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ConfigError(f"{OPTION}: iterations of user {name} must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}")
    salt = fields["salt"].encode() if fields.get("salt") else secrets.token_bytes(32)
    return ScramUpsertion(
        name, mechanism.type_id, iterations, salt, mechanism.salted_password(password, salt, iterations)
    )


async def add_scram_credentials(controller: ControllerClient, upsertions: Sequence[ScramUpsertion]) -> None:
    """Creates the credentials that do not exist yet; ConfigError if the controller refuses one."""
    image = controller.image
    missing = [u for u in upsertions if image.scram_credential(u.name, u.mechanism) is None]
    if not missing:
        return
    for result in await controller.alter_user_scram_credentials((), missing):
        if result.error is not ErrorCode.none:
            raise ConfigError(f"{OPTION}: SCRAM credentials of user {result.user} refused: {result.message}")
        logger.info("SCRAM credentials of user %r created (%s)", result.user, OPTION)
