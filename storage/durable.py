"""Crash-safe file primitives shared by the WAL, the metadata log and the node's own files.

POSIX makes a rename durable only once the directory holding it is fsync'd, and a file written in place can be left
half old, half new by a crash. Every file that must survive power loss whole goes through here.
"""

from __future__ import annotations

import os
from pathlib import Path


def fsync_dir(path: Path) -> None:
    """Makes the entries of ``path`` (files created, renamed or removed in it) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, data: bytes) -> None:
    """Replaces ``path`` with ``data`` via ``<name>.tmp``, fsync, rename and a directory fsync: after a crash
    readers see the old or the new content, never a mix. Raises OSError; callers say which file it was for."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)
