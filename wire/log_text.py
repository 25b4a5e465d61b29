"""The one way a client-supplied string enters a log line: escaped and length-capped.

A topic, group, transactional id, client id, user name, mechanism, SNI, principal or member id is whatever a client
put on the wire. Logged raw, a newline in it starts a line of the attacker's choosing (one that looks like any
other module's line), an ANSI escape repaints the operator's terminal, and a 30 KiB name makes a 30 KiB line per
request. :func:`untrusted` makes such a string one printable run: backslashes doubled, every character
``str.isprintable`` refuses (control characters, ANSI's ESC, line and paragraph separators, format characters)
written as its Python escape (``\\n``, ``\\x1b``, ``\\u2028``), and past :data:`LOG_TEXT_MAX` characters cut with a
marker saying how many were left out. Readable names are unchanged, so a log line of an ordinary client reads as
before. It lives in wire because every layer that logs what clients send (wire, metadata's ACL denials, the
controller's RPC listener, the broker) may import it.

Metric labels are the other place a client's text reaches an operator, and they take it differently: a label value
is a series' key, so ``broker.telemetry.exported.label_value`` drops control characters rather than escaping them
(the Prometheus exposition escapes quotes and newlines itself), and most labels never hold client text at all (a
made-up SASL mechanism or API key is counted as ``other``).
"""

from __future__ import annotations

from typing import Final

#: Characters of a client-supplied string kept in a log line; the rest is replaced by a marker.
LOG_TEXT_MAX: Final = 256

_NAMED: Final = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped(char: str) -> str:
    named = _NAMED.get(char)
    if named is not None:
        return named
    if char.isprintable():
        return char
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def untrusted(text: str | bytes | None, limit: int = LOG_TEXT_MAX) -> str:
    """``text`` as one printable run of at most ``limit`` of its characters (escapes count as one), for ``%s`` in
    a log line. None reads ``None``; bytes are decoded as UTF-8 (an undecodable byte reads U+FFFD)."""
    if text is None:
        return "None"
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    kept = text[:limit]
    escaped = kept if kept.isprintable() and "\\" not in kept else "".join(_escaped(char) for char in kept)
    if len(text) > limit:
        return f"{escaped}...[{len(text) - limit} more characters]"
    return escaped
