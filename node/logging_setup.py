"""Logging for a foreground node: readable lines on stderr, one logger per module, none an attacker can forge.

The level comes from ``--log-level`` or ``FJORD_LOG_LEVEL`` (default INFO). Noisy third-party loggers are kept at
WARNING so that INFO shows what happened to which partition, not HTTP chatter.

Every client-supplied string a log call names goes through ``wire.log_text.untrusted`` at the call site. A
traceback is the one part of a line no call site formats: ``logger.exception`` prints ``str(exc)``, and an
exception's message may hold what a client sent (a name, a body quoted by a parser, a peer's error text). Printed
raw, a newline in it starts a line of the attacker's choosing that reads like any other module's line, and an ANSI
escape repaints the terminal. :class:`NodeFormatter` therefore writes the traceback itself, from the public parts
of ``traceback.TracebackException``:

- the frames (``Traceback (most recent call last):`` and each ``File ..., line N`` with its source line) as Python
  prints them: they come from the node's own code on disk, never from a client, and escaping them would only make
  a source line with a backslash harder to read;
- every part Python derives from the exception object (the ``Type: message`` line, each ``__notes__`` entry, a
  SyntaxError's text) through ``untrusted``, so each is exactly one line: its newlines read ``\\n``, its escapes
  ``\\x1b``, and past :data:`EXCEPTION_TEXT_MAX` characters it is cut with a marker;
- the chain (``__cause__``, ``__context__``) and the members of an exception group, indented, as Python orders them.

So a traceback keeps its shape (an operator reads it as before) and no line of it can start with text a client
chose: each line is a frame, a chain marker Python words, or an escaped exception line beginning with the
exception's type. ``stack_info`` (``stack_info=True``) holds frames only and is left as ``logging`` formats it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import Final

from wire.log_text import LOG_TEXT_MAX, untrusted

FORMAT = "%(asctime)s.%(msecs)03d %(levelname)-7s %(name)s: %(message)s"
DATE_FORMAT = "%Y-%m-%d %H:%M:%S"
_QUIET = ("aiobotocore", "botocore", "urllib3", "asyncio", "kio")

#: Characters of one exception line (``Type: message``, a note) kept in a traceback: longer than a name's cap, as
#: an exception message often quotes several names, but still bounded.
EXCEPTION_TEXT_MAX: Final = 4 * LOG_TEXT_MAX

_CAUSE: Final = "The above exception was the direct cause of the following exception:"
_CONTEXT: Final = "During handling of the above exception, another exception occurred:"
_GROUP_INDENT: Final = "  | "

ExcInfo = tuple[type[BaseException], BaseException, TracebackType | None] | tuple[None, None, None]


class NodeFormatter(logging.Formatter):
    """``logging.Formatter`` whose tracebacks cannot carry a line a client wrote (see the module docstring)."""

    def formatException(self, ei: ExcInfo) -> str:
        exc_type, exc, tb = ei
        if exc_type is None or exc is None:
            return "NoneType: None"
        summary = traceback.TracebackException(exc_type, exc, tb, compact=True)
        return "\n".join(_traceback_lines(summary))


def _traceback_lines(summary: traceback.TracebackException) -> Iterator[str]:
    """``summary`` as Python prints it, oldest exception of the chain first, each exception-derived part escaped."""
    if summary.__cause__ is not None:
        yield from _traceback_lines(summary.__cause__)
        yield from ("", _CAUSE, "")
    elif summary.__context__ is not None and not summary.__suppress_context__:
        yield from _traceback_lines(summary.__context__)
        yield from ("", _CONTEXT, "")
    if summary.stack:
        yield "Traceback (most recent call last):"
        for frame in summary.stack.format():
            yield from frame.rstrip("\n").split("\n")
    # Notes are taken out first: Python splits a note at its newlines, which would let one start a line.
    notes, summary.__notes__ = summary.__notes__, None
    for part in summary.format_exception_only():
        yield untrusted(part.rstrip("\n"), EXCEPTION_TEXT_MAX)
    if isinstance(notes, Sequence) and not isinstance(notes, str):
        yield from (untrusted(_note_text(note), EXCEPTION_TEXT_MAX) for note in notes)
    elif notes is not None:
        yield untrusted(_note_text(notes, repr), EXCEPTION_TEXT_MAX)
    for number, member in enumerate(summary.exceptions or (), start=1):
        yield f"{_GROUP_INDENT}sub-exception {number}:"
        yield from (_GROUP_INDENT + line for line in _traceback_lines(member))


def _note_text(note: object, text: Callable[[object], str] = str) -> str:
    try:
        return text(note)
    except Exception:
        return f"<note of type {type(note).__name__} that cannot be printed>"


def configure_logging(level: str | None = None) -> None:
    name = (level or os.environ.get("FJORD_LOG_LEVEL") or "INFO").upper()
    numeric = logging.getLevelName(name)
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r} (use DEBUG, INFO, WARNING or ERROR)")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(NodeFormatter(FORMAT, DATE_FORMAT))
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(numeric)
    for noisy in _QUIET:
        logging.getLogger(noisy).setLevel(max(numeric, logging.WARNING))


def loop_exception_handler(loop: asyncio.AbstractEventLoop, context: dict[str, object]) -> None:
    """The node's event-loop exception handler: what no task awaited reaches it (``Task exception was never
    retrieved``, a failed callback).

    A broken connection that nobody awaited is expected, not a bug: aiohttp writes a request body in a task of its
    own, and when S3 (or a proxy) closes the connection mid-request, that task fails with ``Cannot write to closing
    transport`` while the request itself fails, is classified and retried by the object store, which logs the
    episode once. asyncio's default handler would print a traceback for it at ERROR, one per request of an outage;
    here it is one DEBUG line. Every other exception keeps the default handler's traceback."""
    exc = context.get("exception")
    if isinstance(exc, ConnectionError):
        message = context.get("message") or "unretrieved exception"
        logging.getLogger("asyncio").debug("%s: %s: %s", message, type(exc).__name__, untrusted(str(exc)))
        return
    loop.default_exception_handler(context)
