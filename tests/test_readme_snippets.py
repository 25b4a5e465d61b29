"""Every ```python block of README.md runs as written, against a real node started from config/server.properties.

A reader pastes the blocks in order into one Python session, so the test runs them so: one fresh interpreter, one
namespace, each block in turn (a later block may use what an earlier one imported or made). A block right after a
``<!-- readme-test: own process -->`` line runs alone in its own interpreter (a Spark Connect session cannot share
a process with the classic session an earlier block started). The only edit is the address: the node's port
replaces 127.0.0.1:9092, since the suite's nodes take free ports. What a block leaves to the reader is supplied,
no more: the share-group block calls ``render`` and catches ``TemporaryError`` and ``BadInput`` (its loop runs until
``render`` has seen every record produced while it runs).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.node_process import REPO, BrokerProcess, start_broker

README = REPO / "README.md"
OWN_PROCESS = "<!-- readme-test: own process -->"
RUN_TIMEOUT_S = 240

# Supplied to the blocks: what the share-group example leaves to its reader, and a guard that ends a block that
# waits forever. ``render`` ends the example's endless loop once it has seen the records a background producer
# writes to ``images`` (a share group starts at the latest offset, so they are produced while the loop runs).
PRELUDE = textwrap.dedent(
    """
    import signal, sys, threading, time
    from confluent_kafka import Producer as _Producer

    BOOTSTRAP = sys.argv[1]

    class TemporaryError(Exception): ...
    class BadInput(Exception): ...
    class _Rendered(BaseException): ...

    class _TimedOut(BaseException): ...

    def _timed_out(signum, frame):
        raise _TimedOut("a README block did not finish within its time")

    signal.signal(signal.SIGALRM, _timed_out)

    _seen = set()
    _stop = threading.Event()

    def _produce_images():
        producer = _Producer({"bootstrap.servers": BOOTSTRAP})
        n = 0
        while not _stop.is_set():
            producer.produce("images", value=f"image {n % 5}".encode())
            producer.flush(5)
            n += 1
            time.sleep(0.2)

    def render(value):
        _seen.add(value)
        if len(_seen) == 5:
            _stop.set()
            raise _Rendered()
    """
)

RUNNER = textwrap.dedent(
    """
    import json
    blocks = json.loads(sys.argv[2])
    for index, (line, source) in enumerate(blocks):
        signal.alarm(180)
        if "render(" in source:
            threading.Thread(target=_produce_images, daemon=True).start()
        try:
            exec(compile(source, f"README.md block at line {line}", "exec"), globals())
        except _Rendered:
            pass
        except BaseException:
            print(f"README.md block at line {line} failed:", file=sys.stderr)
            raise
        finally:
            signal.alarm(0)
        print(f"README.md block at line {line}: ok", flush=True)
    """
)


def python_blocks(text: str) -> list[tuple[int, str, bool]]:
    """(first line number, source, runs in its own process) of each ```python block."""
    blocks: list[tuple[int, str, bool]] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        if lines[index].strip() == "```python":
            start = index + 1
            end = start
            while lines[end].strip() != "```":
                end += 1
            own = index > 0 and lines[index - 1].strip() == OWN_PROCESS
            blocks.append((start + 1, "\n".join(lines[start:end]) + "\n", own))
            index = end
        index += 1
    return blocks


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = start_broker(tmp_path_factory.mktemp("readme-node"), config=REPO / "config" / "server.properties")
    try:
        yield process
    finally:
        assert process.stop() == 0, process.log_text()


def run_blocks(blocks: list[tuple[int, str]], bootstrap: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    sources = [(line, source.replace("127.0.0.1:9092", bootstrap)) for line, source in blocks]
    return subprocess.run(
        [sys.executable, "-c", PRELUDE + RUNNER, bootstrap, json.dumps(sources)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )


def test_readme_has_the_blocks_this_test_knows() -> None:
    blocks = python_blocks(README.read_text(encoding="utf-8"))
    assert len(blocks) >= 4
    first = blocks[0][1]
    assert "create_topics" in first and "AdminClient" in first


def test_every_readme_python_block_runs_as_written(node: BrokerProcess, tmp_path: Path) -> None:
    blocks = python_blocks(README.read_text(encoding="utf-8"))
    shared = [(line, source) for line, source, own in blocks if not own]
    separate = [(line, source) for line, source, own in blocks if own]
    result = run_blocks(shared, node.bootstrap, tmp_path)
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr[-6000:]}"
    assert result.stdout.count(": ok") == len(shared)
    for line, source in separate:
        alone = run_blocks([(line, source)], node.bootstrap, tmp_path)
        assert alone.returncode == 0, f"{alone.stdout}\n{alone.stderr[-6000:]}"
    # The first block's consumer printed the first record of `orders`, and the Spark block showed values.
    assert re.search(r"^orders \d \d+ b'order \d+'$", result.stdout, re.MULTILINE), result.stdout
    assert "|order " in result.stdout, result.stdout
