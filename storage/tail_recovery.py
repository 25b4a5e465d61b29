"""The part of a crashed node's WAL that exists nowhere else, and the rule for serving it before it is uploaded.

:func:`recoverable` walks a recovered WAL and keeps the records of the streams the WAL's owner still has opened at
the controller, from each one's committed end on and without a gap, tagged with the epoch each stream is opened at:
exactly the acknowledged appends object storage does not have yet. Two paths use it:

- a dead node's WAL (failover, ``StorageEngine.recover_wal``) is uploaded and committed from it at once, then the
  streams are closed so their new leaders can open them;
- a node's own restart (``StorageEngine.start``) does not wait for that upload, which would make every restart as
  slow as the WAL is long (``s3.wal.upload.threshold`` decides how long it may grow). The records go into the
  LogCache as if just appended, the upload pipeline uploads them in the background like any other block, and the
  streams stay opened at the controller at their old epoch (:class:`RecoveringStreams`). A partition reopening such
  a stream is given it at that epoch, with its end past the recovered records, which it reads from the LogCache.
  A crash during the background upload leaves the WAL untrimmed behind the records not committed yet and the
  streams still opened by this node, so the next start finds them again the same way.

Keeping the old stream epoch for one leadership term is safe because the stream epoch only has to fence *other*
writers: the previous incarnation of this node is fenced by its node epoch (``register_node`` at start), and any
other broker opens at a leader epoch above the old one. The next leadership change opens at a higher epoch again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from storage.metadata.api import OpeningStream
from storage.wal.base import WALRecord, WriteAheadLog

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class Recovered:
    """What :func:`recoverable` found, counted as it runs."""

    opening: Sequence[OpeningStream]
    replayed: int = 0
    skipped: int = 0
    #: The WAL position just past the last record read (recovered or skipped).
    wal_end: int = 0
    #: stream id -> the epoch it is opened at, for every stream with at least one recovered record.
    streams: dict[int, int] = field(default_factory=dict)


async def recoverable(wal: WriteAheadLog, found: Recovered, who: str) -> AsyncIterator[WALRecord]:
    """The records of ``wal`` (started, not yet appended to) that continue a stream of ``found.opening`` past its
    committed end, each batch tagged with the epoch its stream is opened at now; ``found`` counts as it goes."""
    expected = {s.stream_id: s.end_offset for s in found.opening}
    epochs = {s.stream_id: s.epoch for s in found.opening}
    async for record in wal.recover():
        found.wal_end = record.next_offset
        batch = record.batch
        want = expected.get(batch.stream_id)
        if want is None or batch.last_offset <= want:
            found.skipped += 1  # not ours any more, or already committed
            continue
        if batch.base_offset != want:
            logger.error(
                "WAL recovery of %s: stream %d record at offset %d (WAL position %d) does not continue the "
                "recovered end %d; dropping it",
                who,
                batch.stream_id,
                batch.base_offset,
                record.offset,
                want,
            )
            continue
        epoch = epochs[batch.stream_id]
        expected[batch.stream_id] = batch.last_offset
        found.replayed += 1
        found.streams[batch.stream_id] = epoch
        yield WALRecord(record.offset, record.next_offset, dataclasses.replace(batch, epoch=epoch))


async def upload_recovered_tail(
    drain: Callable[[], Awaitable[None]], close_recovered: Callable[[], Awaitable[list[int]]], who: str
) -> None:
    """Waits until every block submitted so far is committed (``drain``, called before anything else is appended:
    the recovered blocks, including any sealed early because the cache was full), then closes
    (``close_recovered``) the recovering streams no partition reopened, so another broker may open them. Never
    raises but on cancellation: it runs in the background, and shutdown awaits it."""
    started = time.monotonic()
    try:
        await drain()
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        # The records stay in the WAL (it is trimmed only behind committed blocks): the next start recovers them.
        logger.error("%s: upload of the recovered WAL tail failed: %s", who, exc)
        return
    try:
        closed = await close_recovered()
    except asyncio.CancelledError:
        raise
    except Exception:
        # Nothing awaits this task but shutdown and ``recovered_tail_uploaded``, which must not fail on it: the
        # streams not closed stay recovering (an open here takes them over, shutdown closes them).
        logger.exception("%s: closing the recovered streams no partition reopened failed", who)
        return
    logger.info(
        "%s: recovered WAL tail committed %.2f s after recovery; closed %d streams no partition reopened",
        who,
        time.monotonic() - started,
        len(closed),
    )


class RecoveringStreams:
    """The streams whose recovered tail is in the LogCache and not yet committed: opened at the controller by this
    node at their old epoch, until a partition reopens them (and takes them over at that epoch) or the background
    upload has committed their tail (and they are closed)."""

    __slots__ = ("_epochs",)

    def __init__(self) -> None:
        self._epochs: dict[int, int] = {}

    def add(self, streams: dict[int, int]) -> None:
        self._epochs.update(streams)

    def take(self, stream_id: int) -> int | None:
        """The stream's recovered epoch, no longer tracked here (its opener or closer owns it now)."""
        return self._epochs.pop(stream_id, None)

    def put_back(self, stream_id: int, epoch: int) -> None:
        """An open that took the stream failed: it is still recovering."""
        self._epochs[stream_id] = epoch

    def stream_ids(self) -> list[int]:
        return sorted(self._epochs)

    def __contains__(self, stream_id: int) -> bool:
        return stream_id in self._epochs

    def __len__(self) -> int:
        return len(self._epochs)
