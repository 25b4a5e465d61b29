"""Where a piece of blocking work runs: on the event loop when it is small, in a thread when it is not.

A thread hop is cheap only while the event loop is idle. CPython hands the GIL to a waiting thread only once the
holder has kept it for a whole switch interval (5 ms by default, 0.5 ms in a serving node:
``node/commands/server.py``) without letting go; a busy event loop lets go for every system call it makes, which
restarts that wait each time, so a worker thread's every return from a system call can wait many milliseconds for
the GIL (a 600 KB put to the local store, about a dozen such returns, took from milliseconds to 7.9 s against a loop
spinning in 2 ms slices, and 4 ms idle). A balancing move's close waits for such work on a loaded broker: its
closing block's build and put (0.1-1 MB) took 50-110 ms there. Work this small costs the loop well under a
millisecond when done in place, so it is; larger work (a full upload block, a whole-object read) still goes to a
thread so the loop keeps answering. Its users: the local store's puts and reads, an upload block's plan and build,
the S3 store's joining of a body's parts and its CRC32C, and the S3 WAL's encoding of an object. The produce path
uses its bound, :data:`INLINE_BYTES`, to check a compressed batch on the loop, and its own thread past it
(``broker.partition.partition_log.produce``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import ParamSpec, TypeVar

#: Blocking work over at most this many bytes runs on the event loop.
INLINE_BYTES = 1024 * 1024

P = ParamSpec("P")
T = TypeVar("T")


async def offload(size: int, work: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``work(*args, **kwargs)``, in place when ``size`` (the bytes it handles) is at most :data:`INLINE_BYTES`,
    else in the default thread pool."""
    if size <= INLINE_BYTES:
        return work(*args, **kwargs)
    return await asyncio.to_thread(work, *args, **kwargs)
