"""``wire.log_text.untrusted``: a client-supplied string becomes one printable, capped run in a log line."""

from __future__ import annotations

from wire.log_text import LOG_TEXT_MAX, untrusted


def test_a_readable_name_is_unchanged() -> None:
    assert untrusted("orders.v2_eu-west") == "orders.v2_eu-west"
    assert untrusted("Zürich 東京") == "Zürich 東京"


def test_newlines_ansi_escapes_and_separators_are_escaped() -> None:
    forged = "t\n2026-01-01 00:00:00.000 CRITICAL x: DELETED\x1b[31m\r\t\u2028\x00\\"
    escaped = untrusted(forged)
    assert escaped == "t\\n2026-01-01 00:00:00.000 CRITICAL x: DELETED\\x1b[31m\\r\\t\\u2028\\x00\\\\"
    assert escaped.isprintable()


def test_a_long_name_is_cut_with_a_marker() -> None:
    escaped = untrusted("a" * (LOG_TEXT_MAX + 1000))
    assert escaped == "a" * LOG_TEXT_MAX + "...[1000 more characters]"
    assert untrusted("b" * 10, limit=4) == "bbbb...[6 more characters]"


def test_bytes_and_none() -> None:
    assert untrusted(b"ab\n\xff") == "ab\\n\ufffd"
    assert untrusted(None) == "None"
