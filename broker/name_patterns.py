"""The regular expressions clients send to match names: KIP-848's topic subscriptions (``subscribedTopicRegex``)
and ListTransactions v2's transactional-id filter (KIP-1152).

Kafka evaluates subscriptions with RE2/J, so Fjord uses RE2 for both: the same syntax (no look-around, no
back-references; a Java-only construct in a ListTransactions filter is refused as invalid) and, as important on a
server, matching in time linear in the name whatever a client sends, so a pattern cannot make the broker backtrack
for ever. A pattern matches a name when it matches the whole name (Java's ``matches``).

RE2 is imported with the first pattern a client sends (:func:`_re2`): most brokers never see one (a regex
subscription or a filtered ListTransactions), and importing it cost every broker's start (issue 25).
"""

from __future__ import annotations

import importlib
from functools import cache, lru_cache
from types import ModuleType
from typing import Any

#: Longest pattern accepted. Kafka sets no bound of its own; a topic name is at most 249 characters, so a longer
#: pattern is almost certainly not a subscription, and a bound keeps what every member's record stores small.
MAX_REGEX_CHARS = 2048


@cache
def _re2() -> tuple[ModuleType, Any]:
    """The RE2 module and the options every pattern compiles with, imported on first use: see the module
    docstring."""
    re2 = importlib.import_module("re2")
    options = re2.Options()
    options.log_errors = False  # RE2 would print the client's pattern to stderr, raw
    return re2, options


class InvalidRegex(ValueError):
    """The pattern is not a valid RE2 expression, or is too long."""


@lru_cache(maxsize=1024)
def compile_regex(pattern: str) -> Any:
    if len(pattern) > MAX_REGEX_CHARS:
        raise InvalidRegex(f"the regular expression is longer than {MAX_REGEX_CHARS} characters")
    re2, options = _re2()
    try:
        return re2.compile(pattern, options=options)
    except re2.error as exc:
        raise InvalidRegex(f"the regular expression is not valid RE2: {exc}") from None


def matching_names(pattern: str, names: frozenset[str]) -> frozenset[str]:
    """Names of ``names`` the (valid) pattern matches whole."""
    compiled = compile_regex(pattern)
    return frozenset(name for name in names if compiled.fullmatch(name) is not None)
