"""Certificate reload without a restart: a TLS listener's key and CA files are polled, and when they change a new
:class:`ssl.SSLContext` serves the connections that open from then on (open connections keep theirs).

Kafka reloads a listener's keystore when an operator alters ``listener.name.<l>.ssl.keystore.location``; tools that
renew certificates (cert-manager, Vault agents, certbot hooks) only rewrite the files, so Fjord watches them:
every ``ssl.reload.interval.ms`` the (inode, size, mtime) of each file is compared with the last one seen
(:func:`stamps`, cheap and pure enough to reason about), and a change rebuilds the context. A file that does not
load (half written, a key that does not match, a wrong password) keeps the previous context and is logged once per
change, naming the listener and the file and never a password; the next change is tried again, so a writer that
finishes a half-written file is picked up at the next poll.

A node's own connections (to the quorum's CONTROLLER listener, to its peers' inter-broker listener) present the
same certificates as a client: :class:`ReloadingClientContext` compares the stamps at each connect instead of on a
timer, so a renewed certificate reaches the next (re)connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl
from collections.abc import Callable, Sequence
from typing import Protocol

logger = logging.getLogger(__name__)

#: What identifies one version of a file: (inode, size, mtime in ns), or None when it cannot be read.
Stamp = tuple[int, int, int] | None


def stamps(paths: Sequence[str]) -> tuple[Stamp, ...]:
    """The current :data:`Stamp` of each path. An inode is part of it, so a file replaced by a rename (the usual
    atomic way to renew one) is a change even when its size and mtime happen to be the same."""
    out: list[Stamp] = []
    for path in paths:
        try:
            info = os.stat(path)
        except OSError:
            out.append(None)
            continue
        out.append((info.st_ino, info.st_size, info.st_mtime_ns))
    return tuple(out)


class TlsServer(Protocol):
    """What a reloader needs of a TLS listener (a :class:`wire.listener.KafkaListener` is one): its name for the log
    lines and the context its next handshake reads. Structural, so that this module, which
    :mod:`settings.security` imports for :class:`ReloadingClientContext`, does not import the listener and its
    connection, codec and metrics stack: reading a node's config needs none of it."""

    listener_name: str
    ssl_context: ssl.SSLContext | None


class CertificateReloader:
    """Polls one TLS listener's files and installs a new context in ``listener.ssl_context`` when they change.

    ``build`` makes the context from the files as they are now and raises (any exception: its message must name
    no secret) when they do not load."""

    def __init__(
        self, listener: TlsServer, paths: Sequence[str], build: Callable[[], ssl.SSLContext], interval_s: float
    ) -> None:
        self.listener = listener
        self.paths = tuple(paths)
        self.build = build
        self.interval_s = interval_s
        self._seen = stamps(self.paths)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None and self.paths and self.interval_s > 0:
            self._task = asyncio.get_running_loop().create_task(self._poll())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def check(self) -> bool:
        """One poll: True when changed files were loaded and the new context installed."""
        now = stamps(self.paths)
        if now == self._seen:
            return False
        seen, self._seen = self._seen, now
        context = _rebuild(f"listener {self.listener.listener_name}", self.paths, seen, now, self.build)
        if context is None:
            return False
        self.listener.ssl_context = context
        return True

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            self.check()


class ReloadingClientContext:
    """The client context of a node's own TLS connections, called at each connect: rebuilt when its files' stamps
    changed since the last call, else the one built before (a file that does not load keeps it, as for a listener).

    ``name`` says whose connections these are in the log lines; ``build`` is as for :class:`CertificateReloader`
    and is called once here, so a context that does not load fails where the caller is built."""

    def __init__(self, name: str, paths: Sequence[str], build: Callable[[], ssl.SSLContext]) -> None:
        self.name = name
        self.paths = tuple(paths)
        self.build = build
        self._seen = stamps(self.paths)
        self._context = build()

    def __call__(self) -> ssl.SSLContext:
        now = stamps(self.paths)
        if now != self._seen:
            seen, self._seen = self._seen, now
            self._context = _rebuild(self.name, self.paths, seen, now, self.build) or self._context
        return self._context


def _rebuild(
    name: str, paths: Sequence[str], seen: Sequence[Stamp], now: Sequence[Stamp], build: Callable[[], ssl.SSLContext]
) -> ssl.SSLContext | None:
    """The context built from changed files, logged either way; None when they do not load (keep the old one)."""
    changed = ", ".join(path for path, old, new in zip(paths, seen, now, strict=True) if old != new)
    try:
        context = build()
    except Exception as exc:  # any failure keeps the old context; the next change is tried again
        logger.warning("%s keeps its previous TLS certificates: %s changed but does not load: %s", name, changed, exc)
        return None
    logger.info("%s uses the TLS certificates reloaded from %s for new connections", name, changed)
    return context
