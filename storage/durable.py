"""Crash-safe file primitives shared by the WAL, the metadata log, the local object store and the node's own files.

POSIX makes a rename durable only once the directory holding it is fsync'd, and a file written in place can be left
half old, half new by a crash. Every file that must survive power loss whole goes through here.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from collections.abc import Sequence
from pathlib import Path

#: Flushes a file's data (and only the metadata needed to read it back); platforms without it get fsync.
fdatasync = getattr(os, "fdatasync", os.fsync)


#: A write that found no room: on the disk (ENOSPC) or in the user's quota (EDQUOT).
_DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc``, or the OSError it was raised from, is a write that found the disk full. Such a write can be
    undone and tried again once there is room, where any other write error leaves the file's state unknown."""
    cause = exc if isinstance(exc, OSError) else exc.__cause__
    return isinstance(cause, OSError) and cause.errno in _DISK_FULL_ERRNOS


_IOV_MAX = 1024  # buffers per pwritev call (POSIX guarantees at least 16; Linux allows 1024)


def write_all(fd: int, parts: Sequence[bytes | memoryview], position: int) -> None:
    """Writes ``parts`` back to back at file ``position`` with as few ``pwritev`` calls as the kernel allows: the
    kernel gathers the buffers, so nothing is copied into one big buffer first. Short writes are continued."""
    pending: list[bytes | memoryview] = list(parts)
    while pending:
        chunk = pending[:_IOV_MAX]
        written = os.pwritev(fd, chunk, position)
        position += written
        expected = sum(len(p) for p in chunk)
        if written == expected:
            del pending[: len(chunk)]
            continue
        # A short write: drop what went out whole and continue inside the buffer it stopped in.
        index = 0
        while written >= len(pending[index]):
            written -= len(pending[index])
            index += 1
        del pending[:index]
        pending[0] = memoryview(pending[0])[written:]


#: pwritev2's per-write O_DSYNC (Linux 4.7+); 0 where the platform has none.
_RWF_DSYNC: int = getattr(os, "RWF_DSYNC", 0)
_dsync_writes = [_RWF_DSYNC != 0]  # cleared for good once the kernel refuses the flag


def write_durably(fd: int, parts: Sequence[bytes | memoryview], position: int) -> None:
    """Writes ``parts`` at ``position`` and returns once they are as durable as ``write_all`` + ``fdatasync`` makes
    them. Where the kernel has ``RWF_DSYNC`` and the parts fit in one ``pwritev``, that is one system call: the
    write is synced as if the file were opened ``O_DSYNC`` (its data, and the metadata needed to read it back:
    overwriting allocated blocks still syncs no metadata). The writer thread then takes the GIL back once instead
    of twice, which is what a small write waits for most when the event loop is busy. Larger writes (more
    buffers than one call takes) keep ``write_all`` + ``fdatasync``: a synced write only syncs its own range."""
    if _dsync_writes[0] and len(parts) <= _IOV_MAX:
        try:
            _write_dsync(fd, parts, position)
            return
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                raise
            _dsync_writes[0] = False  # an old kernel: rewriting the same bytes the plain way is harmless
    write_all(fd, parts, position)
    fdatasync(fd)


def _write_dsync(fd: int, parts: Sequence[bytes | memoryview], position: int) -> None:
    """Every call carries RWF_DSYNC, so a short write's continuation is synced too (each call syncs its range)."""
    pending: list[bytes | memoryview] = list(parts)
    while pending:
        written = os.pwritev(fd, pending, position, _RWF_DSYNC)
        position += written
        while pending and written >= len(pending[0]):
            written -= len(pending[0])
            pending.pop(0)
        if pending and written:
            pending[0] = memoryview(pending[0])[written:]


def fsync_dir(path: Path) -> None:
    """Makes the entries of ``path`` (files created, renamed or removed in it) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def overwrite_in_place(path: Path, data: bytes) -> None:
    """Writes ``data`` over the start of the existing file ``path`` and fsyncs it: no new block is allocated, so it
    works on a full disk, where :func:`write_atomically`'s temporary file cannot be made. Crash-safe only for data
    within one disk sector (a few dozen bytes with their own CRC, as PostgreSQL writes its ``pg_control``); the
    file keeps its length, so ``data`` must be as long as what it replaces. Raises OSError."""
    fd = os.open(path, os.O_WRONLY)
    try:
        write_all(fd, [data], 0)
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, data: bytes, *, mode: int = 0o666) -> None:
    """Replaces ``path`` with ``data`` via ``<name>.tmp``, fsync, rename and a directory fsync: after a crash
    readers see the old or the new content, never a mix. ``mode`` (less the umask) is the new file's from its
    creation: 0o600 keeps a file that holds secrets from ever being readable by others. Raises OSError; callers
    say which file it was for."""
    tmp = path.with_name(path.name + ".tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()  # a crashed write's leftover keeps its mode through os.open
    with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode), "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


class DirectoryLockedError(OSError):
    """Another process (or another instance in this one) holds the directory's lock."""


def make_directory(path: Path) -> None:
    """``mkdir -p``, except that a file where the directory should be is reported as ENOTDIR ("Not a directory"),
    which says what is wrong, where ``mkdir`` reports EEXIST ("File exists")."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(path)) from None


def lock_directory(path: Path, lock_name: str = ".lock") -> int:
    """Takes an exclusive, non-blocking ``flock`` on ``path/lock_name`` (creating the directory) and returns the
    descriptor; closing it releases the lock, and so does the process dying, so a crash never leaves a stale lock.

    One writer per directory is what keeps two processes started on the same data (a restart racing the old
    process's shutdown, or two nodes given one ``log.dirs``) from interleaving writes into the same files, as Kafka's
    ``.lock`` in every log directory does. Raises DirectoryLockedError when the lock is held, OSError otherwise.
    """
    make_directory(path)
    fd = os.open(path / lock_name, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise DirectoryLockedError(exc.errno, f"{path} is in use by another process", str(path)) from None
        raise
    return fd
