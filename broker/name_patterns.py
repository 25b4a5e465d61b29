"""The regular expressions clients send to match names: KIP-848's topic subscriptions (``subscribedTopicRegex``)
and ListTransactions v2's transactional-id filter (KIP-1152).

Kafka evaluates subscriptions with RE2/J, so Fjord uses RE2 for both: the same syntax (no look-around, no
back-references; a Java-only construct in a ListTransactions filter is refused as invalid) and, as important on a
server, matching in time linear in the name whatever a client sends, so a pattern cannot make the broker backtrack
for ever. A pattern matches a name when it matches the whole name (Java's ``matches``).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import re2

#: Longest pattern accepted. Kafka sets no bound of its own; a topic name is at most 249 characters, so a longer
#: pattern is almost certainly not a subscription, and a bound keeps what every member's record stores small.
MAX_REGEX_CHARS = 2048

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # RE2 would print the client's pattern to stderr, raw


class InvalidRegex(ValueError):
    """The pattern is not a valid RE2 expression, or is too long."""


@lru_cache(maxsize=1024)
def compile_regex(pattern: str) -> Any:
    if len(pattern) > MAX_REGEX_CHARS:
        raise InvalidRegex(f"the regular expression is longer than {MAX_REGEX_CHARS} characters")
    try:
        return re2.compile(pattern, options=_OPTIONS)
    except re2.error as exc:
        raise InvalidRegex(f"the regular expression is not valid RE2: {exc}") from None


def matching_names(pattern: str, names: frozenset[str]) -> frozenset[str]:
    """Names of ``names`` the (valid) pattern matches whole."""
    compiled = compile_regex(pattern)
    return frozenset(name for name in names if compiled.fullmatch(name) is not None)
