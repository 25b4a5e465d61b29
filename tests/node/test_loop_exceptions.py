"""The node's event-loop exception handler (``node.logging_setup.loop_exception_handler``): a broken connection
that no task awaited (aiohttp's body-writing task when S3 drops a request) is one DEBUG line, not an ERROR
traceback per request of an outage; any other unretrieved exception keeps its traceback."""

from __future__ import annotations

import asyncio
import gc
import logging

import pytest

from node.logging_setup import loop_exception_handler


async def _fail_unretrieved(exc: BaseException) -> None:
    async def fail() -> None:
        raise exc

    loop = asyncio.get_running_loop()
    loop.set_exception_handler(loop_exception_handler)
    task = loop.create_task(fail())
    await asyncio.wait({task})
    del task  # never awaited: asyncio reports it when the task is collected
    gc.collect()


@pytest.mark.parametrize("exc", [ConnectionResetError("Cannot write to closing transport"), BrokenPipeError()])
def test_a_broken_connection_nobody_awaited_is_one_debug_line(
    exc: BaseException, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="asyncio")
    asyncio.run(_fail_unretrieved(exc))
    records = [r for r in caplog.records if r.name == "asyncio" and "never retrieved" in r.getMessage()]
    assert len(records) == 1, caplog.text
    assert records[0].levelno == logging.DEBUG and records[0].exc_info is None
    assert type(exc).__name__ in records[0].getMessage()


def test_any_other_unretrieved_exception_keeps_its_traceback(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="asyncio")
    asyncio.run(_fail_unretrieved(ValueError("a bug")))
    records = [r for r in caplog.records if r.name == "asyncio" and "never retrieved" in r.getMessage()]
    assert len(records) == 1, caplog.text
    assert records[0].levelno == logging.ERROR and records[0].exc_info is not None
