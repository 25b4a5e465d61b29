"""The bookkeeping both WAL modes keep alike: where the log is trimmed to and acknowledged up to, how much of the
capacity is in use, and whether appends may be made (started, not closed, not failed). Only how records become
durable differs between file.py and s3.py; this mixin keeps the rest from being written twice."""

from __future__ import annotations

import asyncio
import time

from storage.errors import WALError, WALUnavailableError
from storage.wal.capacity import CapacityGate
from storage.wal.pending import PendingAppend


class WALState:
    """Mixed into FileWAL and S3WAL, whose constructors set every attribute below."""

    _name: str  # how errors and logs name this WAL
    _gate: CapacityGate[PendingAppend]
    _trim_offset: int
    _durable_offset: int
    _started: bool
    _closed: bool
    _failure: WALError | None  # set once: nothing is acknowledged after a failed write or a fence
    # An episode of failed writes that are being retried (S3 away): when it began, and once it has lasted longer
    # than the WAL's bound, the error new appends are refused with.
    _unwritable_since: float | None = None
    _unwritable_total = 0.0
    _refusing: WALUnavailableError | None = None
    _refuse_timer: asyncio.TimerHandle | None = None

    @property
    def unwritable_seconds(self) -> float:
        """Seconds the WAL has spent unable to write, the episode under way included (a metric)."""
        since = self._unwritable_since
        return self._unwritable_total + (0.0 if since is None else time.monotonic() - since)

    @property
    def unwritable(self) -> bool:
        return self._unwritable_since is not None

    @property
    def unwritable_for(self) -> float:
        """Seconds the episode under way has lasted (0.0 while the WAL writes)."""
        since = self._unwritable_since
        return 0.0 if since is None else time.monotonic() - since

    def _episode_began(self) -> None:
        """Writes fail and are being retried (S3 away, a full disk): ``unwritable`` from now on, for the metrics."""
        self._unwritable_since = time.monotonic()

    def _episode_ended(self) -> float:
        """The writes go through again; returns the seconds the episode lasted."""
        assert self._unwritable_since is not None
        seconds = time.monotonic() - self._unwritable_since
        self._unwritable_total += seconds
        self._unwritable_since = None
        return seconds

    async def writes_begun(self) -> None:
        """``WriteAheadLog.writes_begun``: an S3 WAL's uploads are the event loop's own tasks, so there is nothing
        to wait for; the file WAL, whose writes run on its writer thread, waits for that thread."""
        return

    def refusal(self) -> WALError | None:
        """Why an append made now would be refused without being taken (None: it would be taken). Checked before
        a stream gives the append its offsets, so a refusal leaves nothing behind."""
        return self._failure or self._refusing

    @property
    def used_bytes(self) -> int:
        return self._gate.used

    @property
    def trim_offset(self) -> int:
        return self._trim_offset

    @property
    def durable_offset(self) -> int:
        """End of the acknowledged prefix."""
        return self._durable_offset

    def _moves_trim_point(self, offset: int) -> bool:
        """Whether trimming to ``offset`` moves the trim point (trimming again to an older offset is a no-op);
        WALError for an offset past the acknowledged prefix, which must never be trimmed away."""
        if offset <= self._trim_offset:
            return False
        if offset > self._durable_offset:
            raise WALError(
                f"{self._name}: cannot trim to offset {offset}: only offsets before {self._durable_offset} are durable"
            )
        return True

    def _require_started(self) -> None:
        if not self._started:
            raise WALError(f"{self._name}: not started")
        if self._closed:
            raise WALError(f"{self._name}: closed")

    def _check_writable(self) -> None:
        if self._failure is not None:
            raise self._failure
        self._require_started()
