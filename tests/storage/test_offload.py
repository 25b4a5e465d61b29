"""Small blocking work runs on the event loop, large work in a thread (``storage.offload``), and why it matters: a
worker thread cannot get the GIL back from an event loop that stays busy."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path

from storage.objectstore.local import LocalObjectStore
from storage.offload import INLINE_BYTES, offload

#: The longest the busy loop below keeps spinning (a bound on the test, not a figure it measures).
_SPIN_LIMIT_S = 20.0


async def test_small_work_runs_in_place_and_large_work_in_a_thread() -> None:
    here = threading.get_ident()
    assert await offload(INLINE_BYTES, threading.get_ident) == here
    assert await offload(INLINE_BYTES + 1, threading.get_ident) != here


async def test_a_small_put_to_the_local_store_completes_while_the_event_loop_stays_busy(tmp_path: Path) -> None:
    """A loop that never idles (here, 2 ms slices of Python between its turns, as a loaded broker's) lets go of the
    GIL for every system call it makes, and each time a worker thread waiting for the GIL starts its wait over: a
    put made in a thread, a dozen system calls, finished only once the loop went quiet (a balancing move's closing
    upload waited for it). Done in place, it completes while the loop is still busy."""
    store = LocalObjectStore(tmp_path)
    data = os.urandom(600 * 1024)
    spinning = True
    deadline = time.monotonic() + _SPIN_LIMIT_S

    async def spin() -> None:
        while spinning and time.monotonic() < deadline:
            began = time.perf_counter()
            while time.perf_counter() - began < 0.002:
                pass
            await asyncio.sleep(0)

    spinner = asyncio.ensure_future(spin())
    await asyncio.sleep(0)
    await store.put("ab/_fjord_test/1", data)
    busy_throughout = not spinner.done()
    spinning = False
    await spinner
    assert busy_throughout, "the put completed only once the loop stopped spinning"
    assert await store.get("ab/_fjord_test/1", 0, len(data)) == data
