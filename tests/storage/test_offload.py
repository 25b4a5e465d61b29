"""Small blocking work runs on the event loop, large work in a thread (``storage.offload``), and why it matters: a
worker thread on a loaded broker can wait long to be woken, get a core and get the GIL back from a busy loop."""

from __future__ import annotations

import asyncio
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from storage.objectstore.local import LocalObjectStore
from storage.offload import INLINE_BYTES, offload

#: How long the test below holds the worker threads (a bound on the test, not a figure it measures).
_HELD_S = 20.0


async def test_small_work_runs_in_place_and_large_work_in_a_thread() -> None:
    here = threading.get_ident()
    assert await offload(INLINE_BYTES, threading.get_ident) == here
    assert await offload(INLINE_BYTES + 1, threading.get_ident) != here


async def test_a_small_put_to_the_local_store_does_not_wait_for_a_worker_thread(tmp_path: Path) -> None:
    """A worker thread on a loaded broker waits to be woken, for a core and, at each return from a system call, for
    the GIL from a loop that stays busy: a 600 KB put made in a thread took from milliseconds to seconds against a
    loop spinning in 2 ms slices (a balancing move's closing upload waited for it). Here every worker is held
    outright: done in place, the put still completes."""
    store = LocalObjectStore(tmp_path)
    data = os.urandom(600 * 1024)
    workers = ThreadPoolExecutor(max_workers=1)
    asyncio.get_running_loop().set_default_executor(workers)
    released = threading.Event()
    workers.submit(released.wait, _HELD_S)
    try:
        await asyncio.wait_for(store.put("ab/_fjord_test/1", data), _HELD_S / 2)
    finally:
        released.set()
    assert await store.get("ab/_fjord_test/1", 0, len(data)) == data
