"""Kafka's ``sasl.jaas.config`` values, parsed strictly: one login module, its control flag and its options.

::

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";

Only the shape Kafka's JaasConfig accepts is taken: exactly one ``<class> <flag> (<name>=<value>)* ;``, values
quoted (with backslash escapes) or bare words. Anything else is a :class:`JaasError`, whose message describes what
is wrong by position and option *name*, never by value: the text holds passwords, and the error ends up on the
operator's terminal naming the key (``settings.security``).

A client's own login (:meth:`JaasEntry.login`: its ``username`` and ``password`` options) is read here for both
kinds of client, a node logging in to its peers (``settings.client_login``) and an operator tool's
``--command-config`` (``node.client_config``), so the two accept the same entries.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from wire.sasl.client import SaslCredentials

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
FLAGS = ("required", "requisite", "sufficient", "optional")
_WORD_EXTRA = frozenset("._$-/:@*+#")


class JaasError(ValueError):
    """A malformed JAAS config; the message never quotes the text."""


@dataclass(frozen=True, slots=True)
class JaasEntry:
    login_module: str
    flag: str
    options: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}), repr=False)

    def users(self) -> dict[str, str]:
        """PlainLoginModule's ``user_<name>="<password>"`` options as name -> password."""
        return {name[len("user_") :]: value for name, value in self.options.items() if name.startswith("user_")}

    def login(self, mechanism: str) -> SaslCredentials | None:
        """The ``username`` and ``password`` options as what a client authenticates with over ``mechanism``;
        None when either is missing or empty: a server refuses an empty user or PLAIN password anyway, so the
        caller names the key to fix before any peer is asked."""
        user, password = self.options.get("username"), self.options.get("password")
        if not user or not password:
            return None
        # Kafka's ScramLoginModule option: the user name is a delegation token's id, the password its HMAC.
        token = mechanism.startswith("SCRAM-") and self.options.get("tokenauth", "").lower() == "true"
        return SaslCredentials(mechanism, user, password, token=token)


def _tokens(text: str) -> list[tuple[str, str]]:
    """(kind, text) tokens: "word", "quoted", "=" and ";"."""
    out: list[tuple[str, str]] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
        elif ch in "=;":
            out.append((ch, ch))
            i += 1
        elif ch == '"':
            i += 1
            chars: list[str] = []
            while True:
                if i >= n:
                    raise JaasError(f"unterminated quoted value (token {len(out) + 1})")
                ch = text[i]
                if ch == "\\" and i + 1 < n:
                    chars.append(text[i + 1])
                    i += 2
                elif ch == '"':
                    i += 1
                    break
                else:
                    chars.append(ch)
                    i += 1
            out.append(("quoted", "".join(chars)))
        elif ch.isalnum() or ch in _WORD_EXTRA:
            start = i
            while i < n and (text[i].isalnum() or text[i] in _WORD_EXTRA):
                i += 1
            out.append(("word", text[start:i]))
        else:
            raise JaasError(f"unexpected character at position {i}")
    return out


def parse_jaas(text: str) -> JaasEntry:
    """The one login module of ``text``; :class:`JaasError` if it is not exactly one well-formed entry."""
    tokens = _tokens(text)
    if len(tokens) < 3 or tokens[0][0] != "word" or tokens[1][0] != "word":
        raise JaasError("expected '<LoginModule class> <flag> <option>=<value> ... ;'")
    module, flag = tokens[0][1], tokens[1][1]
    if flag.lower() not in FLAGS:
        raise JaasError(f"control flag must be one of {', '.join(FLAGS)}")
    options: dict[str, str] = {}
    i = 2
    while i < len(tokens) and tokens[i][0] != ";":
        if i + 2 >= len(tokens):
            raise JaasError(f"option {len(options) + 1} is incomplete (expected name=value)")
        name, eq, value = tokens[i], tokens[i + 1], tokens[i + 2]
        if name[0] != "word" or eq[0] != "=" or value[0] not in ("word", "quoted"):
            raise JaasError(f"option {len(options) + 1} is not name=value")
        if name[1] in options:
            raise JaasError(f"option {name[1]} is given twice")
        options[name[1]] = value[1]
        i += 3
    if i >= len(tokens):
        raise JaasError("the login module entry does not end with ';'")
    if i != len(tokens) - 1:
        raise JaasError("exactly one login module is allowed (text follows the first ';')")
    return JaasEntry(module, flag.lower(), MappingProxyType(options))
