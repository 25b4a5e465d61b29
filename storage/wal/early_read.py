"""A file WAL read back from the start of the process, while the node imports its stacks (issue 25).

A restarting node serves once its WAL's records are in the LogCache (``storage.tail_recovery``). Reading a long
tail back is mostly the kernel copying it out of the page cache into fresh memory (one page fault per 4 KiB: about
0.4 s of system time for 500 MiB on the 2-core development VM), and the node used to do it only after importing
its broker, controller and storage stacks and replaying its metadata (about half a second of one core). ``fjord
server start`` now starts that read in a thread of its own as soon as its client listeners listen
(``node/commands/server.py``): the read (``pread`` and CRC-32C release the GIL) runs on the second core while the
first imports, and the WAL the engine opens later takes over what it read (:func:`claim`).

The read takes the WAL directory's lock first, exactly as :class:`~storage.wal.file.FileWAL` does when it starts,
and hands the lock over with the records: nothing can append to the WAL between the read and the recovery, and a
directory another process holds is simply not read early (the WAL's own start then reports it). It reads ahead at
most ``budget`` bytes of records nobody took yet (the LogCache's size), then waits for the recovery to take them.
Only the recovery that decodes (``FileWAL.recover``) uses the read; anything else, or a WAL closed first, cancels it.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from storage.config import StorageConfig
from storage.durable import DirectoryLockedError, lock_directory
from storage.errors import WALError
from storage.wal.base import WALRecord
from storage.wal.recovery import SegmentScan
from storage.wal.segments import CHECKPOINT_NAME, LOCK_NAME, Segment, decode_checkpoint, parse_segment_name

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class OpenedDirectory:
    """A WAL directory locked for this process, its segments and trim point."""

    lock_fd: int
    trim_offset: int
    segments: list[Segment]


def open_directory_sync(directory: Path) -> OpenedDirectory:
    """Locks ``directory`` (one WAL instance per directory, across processes) and lists its segments and trim
    point. Blocking."""
    name = f"WAL {directory}"
    try:
        lock_fd = lock_directory(directory, LOCK_NAME)
    except DirectoryLockedError:
        raise WALError(f"{name}: directory is already open by another WAL instance") from None
    except OSError as exc:
        raise WALError(f"{name}: cannot lock the WAL directory: {exc.strerror}") from exc
    try:
        (directory / (CHECKPOINT_NAME + ".tmp")).unlink(missing_ok=True)
        segments = sorted(
            (Segment(base, directory / entry) for entry in os.listdir(directory)
             if (base := parse_segment_name(entry)) is not None),
            key=lambda s: s.base_offset,
        )
        return OpenedDirectory(lock_fd, _read_checkpoint_sync(directory, segments), segments)
    except BaseException:
        os.close(lock_fd)
        raise


def _read_checkpoint_sync(directory: Path, segments: list[Segment]) -> int:
    path = directory / CHECKPOINT_NAME
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return 0
    except OSError as exc:
        raise WALError(f"WAL {path}: cannot read the trim checkpoint: {exc.strerror}") from exc
    try:
        return decode_checkpoint(data, str(path))
    except WALError as exc:
        # Replaying from the oldest segment only re-delivers records that were already uploaded, which recovery
        # tolerates; refusing to start would lose availability for no gain in safety.
        fallback = segments[0].base_offset if segments else 0
        logger.error("%s; replaying from the oldest segment (offset %d)", exc, fallback)
        return fallback


class EarlyRead:
    """One WAL directory read in a thread of its own (see the module docstring)."""

    def __init__(self, directory: Path, budget: int) -> None:
        self.directory = directory
        self._budget = max(1, budget)
        self._cond = threading.Condition()
        self._ready: collections.deque[tuple[list[WALRecord], int]] = collections.deque()
        self._held = 0  # bytes of the records in ``_ready``
        self._opened: OpenedDirectory | None = None
        self._error: BaseException | None = None
        self._done = False
        self._cancelled = False
        #: The scan the records come from: its ``end`` and ``kept`` are final once :meth:`records` is exhausted.
        self.scan: SegmentScan | None = None
        self._thread = threading.Thread(target=self._run, name=f"fjord-wal-early-read {directory}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        try:
            opened = open_directory_sync(self.directory)
            scan = SegmentScan(opened.segments, opened.trim_offset, decode=True)
            with self._cond:
                self._opened, self.scan = opened, scan
                self._cond.notify_all()
            steps = scan.steps()
            try:
                for records in steps:
                    size = sum(r.batch.size for r in records)
                    with self._cond:
                        while self._held >= self._budget and not self._cancelled:
                            self._cond.wait()
                        if self._cancelled:
                            return
                        self._ready.append((records, size))
                        self._held += size
                        self._cond.notify_all()
            finally:
                steps.close()  # closes the segment being read (the start of a node runs with the collector off)
        except BaseException as exc:  # handed to the WAL that claims the read, which raises it as its own
            with self._cond:
                self._error = exc
        finally:
            with self._cond:
                self._done = True
                self._cond.notify_all()

    def opened(self) -> OpenedDirectory:
        """The directory, locked (blocks until it is): the caller owns the lock from now on. Raises what opening
        it raised."""
        with self._cond:
            while self._opened is None and not self._done:
                self._cond.wait()
            if self._opened is None:
                assert self._error is not None
                raise self._error
            return self._opened

    async def records(self) -> AsyncIterator[WALRecord]:
        """The records read, in order, waiting (in a worker thread) for the read where it is behind; raises what
        the read raised after the records before it."""
        while True:
            with self._cond:
                taken = self._ready.popleft() if self._ready else None
                if taken is not None:
                    self._held -= taken[1]
                    self._cond.notify_all()
                elif self._done:
                    if self._error is not None:
                        raise self._error
                    return
            if taken is None:
                await asyncio.to_thread(self._wait)
                continue
            for record in taken[0]:
                yield record

    def _wait(self) -> None:
        with self._cond:
            while not self._ready and not self._done:
                self._cond.wait()

    def cancel(self) -> None:
        """Stops the read (its records are not needed, or no WAL took it). The lock stays with whoever took it;
        an unclaimed read's lock is released once the read has stopped."""
        with self._cond:
            self._cancelled = True
            self._ready.clear()
            self._held = 0
            self._cond.notify_all()


    def release(self) -> None:
        """Stops the read of a directory no WAL took, and releases its lock."""
        self.cancel()
        self._thread.join()
        if self._opened is not None:
            os.close(self._opened.lock_fd)


#: The reads started and not claimed yet, by the absolute path of their directory.
_STARTED: dict[str, EarlyRead] = {}


def start(config: StorageConfig) -> EarlyRead | None:
    """Starts reading ``config``'s WAL back when it is a file WAL; None for any other."""
    if config.wal_url.scheme != "file":
        return None
    directory = Path(config.wal_url.path)
    read = EarlyRead(directory, config.wal_cache_size)
    _STARTED[os.path.abspath(directory)] = read
    read.start()
    return read


def claim(directory: Path) -> EarlyRead | None:
    """The read started for ``directory``, taken by the WAL that opens it (None when there is none)."""
    return _STARTED.pop(os.path.abspath(directory), None)


def abandon(read: EarlyRead) -> None:
    """``read`` is not needed (the node stopped before its WAL took it): stopped, and its lock released."""
    if _STARTED.get(os.path.abspath(read.directory)) is read:  # otherwise a WAL claimed it and owns it
        del _STARTED[os.path.abspath(read.directory)]
        read.release()
