"""A traceback in the node's log cannot carry a line a client wrote (``node.logging_setup.NodeFormatter``).

An exception's message may quote what a client sent. Printed raw by ``logger.exception``, a newline in it would
start a forged line (one that reads like another module's CRITICAL line) and an ANSI escape would repaint the
terminal. Each test logs such an exception and checks every line of the output is either the node's log prefix,
part of a traceback Python words (frames, chain markers), or an escaped exception line, and that the text is
still there, escaped.
"""

from __future__ import annotations

import io
import logging
import re
import subprocess
import sys
from collections.abc import Iterator

import pytest

from node.logging_setup import DATE_FORMAT, EXCEPTION_TEXT_MAX, FORMAT, NodeFormatter
from testkit.node_process import REPO

FORGED = "2026-01-01 00:00:00.000 CRITICAL controller.controller: SCRAM credentials of user 'admin' DELETED"
EVIL = f"topic-x\n{FORGED}\x1b[31m\r\u2028"
ESCAPED = "topic-x\\n" + FORGED + "\\x1b[31m\\r\\u2028"
PREFIX = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} ")


@pytest.fixture
def captured() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(NodeFormatter(FORMAT, DATE_FORMAT))
    log = logging.getLogger("tests.node.log_format")
    log.addHandler(handler)
    log.propagate = False
    try:
        yield log, out
    finally:
        log.removeHandler(handler)
        log.propagate = True


def _fail(text: str) -> None:
    raise ValueError(text)


def _forged_lines(output: str) -> list[str]:
    """Lines the attacker started (the forged line's date opens them) or that hold a raw escape."""
    return [line for line in output.split("\n") if line.startswith(FORGED[:10]) or "\x1b" in line or "\r" in line]


def test_an_exception_message_stays_one_escaped_line(captured: tuple[logging.Logger, io.StringIO]) -> None:
    log, out = captured
    try:
        _fail(EVIL)
    except ValueError:
        log.exception("request failed")
    text = out.getvalue()
    assert _forged_lines(text) == []
    assert f"ValueError: {ESCAPED}" in text.split("\n")
    assert "Traceback (most recent call last):" in text and "in _fail" in text  # the frames read as before


def test_chained_exceptions_notes_and_groups_are_escaped(captured: tuple[logging.Logger, io.StringIO]) -> None:
    log, out = captured
    try:
        try:
            _fail(EVIL)
        except ValueError as exc:
            raise LookupError(EVIL) from exc
    except LookupError as outer:
        outer.add_note(EVIL)
        log.exception("cause")
    try:
        try:
            _fail(EVIL)
        except ValueError:
            raise ExceptionGroup(EVIL, [RuntimeError(EVIL), TypeError("plain")]) from None
    except ExceptionGroup:
        log.exception("group")
    text = out.getvalue()
    assert _forged_lines(text) == [] and len([line for line in text.split("\n") if PREFIX.match(line)]) == 2
    lines = text.split("\n")
    assert f"ValueError: {ESCAPED}" in lines
    assert "The above exception was the direct cause of the following exception:" in lines
    assert f"LookupError: {ESCAPED}" in lines and ESCAPED in lines  # the note, one line
    assert "  | RuntimeError: " + ESCAPED in lines and "  | TypeError: plain" in lines
    assert "During handling" not in text  # `from None` is honoured as Python honours it


def test_a_long_exception_message_is_capped(captured: tuple[logging.Logger, io.StringIO]) -> None:
    log, out = captured
    try:
        _fail("n" * 100_000)
    except ValueError:
        log.exception("long")
    assert len(out.getvalue()) < 2 * EXCEPTION_TEXT_MAX + 1000
    assert f"...[{100_000 - EXCEPTION_TEXT_MAX + len('ValueError: ')} more characters]" in out.getvalue()


def test_a_node_process_logs_a_hostile_traceback_escaped() -> None:
    """The logging a ``fjord server start`` process configures, in a process of its own, on its stderr."""
    script = (
        "import logging, sys\n"
        "from node.logging_setup import configure_logging\n"
        "configure_logging('INFO')\n"
        "try:\n"
        "    raise LookupError(sys.argv[1])\n"
        "except LookupError:\n"
        "    logging.getLogger('broker.request_dispatcher').exception('handler failed')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, EVIL], cwd=REPO, capture_output=True, text=True, timeout=60, check=True
    )
    lines = done.stderr.split("\n")
    assert PREFIX.match(lines[0]) and lines[0].endswith("ERROR   broker.request_dispatcher: handler failed")
    assert _forged_lines(done.stderr) == []
    assert f"LookupError: {ESCAPED}" in lines
