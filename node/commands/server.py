"""``fjord server start``: run one node in the foreground until SIGTERM/SIGINT.

Configuration problems (a bad file, a bad value, a port in use, a data directory of another node) end the process
with one line on stderr and exit status 1, never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import gc
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

import uvloop

from node import dataclass_code
from node.early_listen import ListeningSockets, close_all, listen_early, without_tls
from node.logging_setup import configure_logging, loop_exception_handler
from settings.scram_option import parse_add_scram
from settings.server import ServerConfig
from storage.config import ConfigError, MiB

if TYPE_CHECKING:  # imported once the listeners listen (_serve)
    from node.process import Node
    from wire.early_answers import EarlyAnswers

logger = logging.getLogger(__name__)

#: CPython's GIL switch interval while the node serves (the default is 5 ms); see ``_shorten_gil_handoffs``.
GIL_SWITCH_INTERVAL_S = 0.0005
#: The switch interval while the node starts with its file WAL read back in a thread
#: (``_share_the_gil_with_the_wal_read``).
START_GIL_SWITCH_INTERVAL_S = 0.0001
#: How long a node whose metadata replica failed may take to stop before the process exits anyway.
FAILED_STOP_BUDGET_S = 30.0
#: glibc malloc while the node serves; see ``_reuse_freed_memory``. Buffers smaller than the first are carved from
#: the heap instead of mapped on their own, and the heap keeps up to the second of free memory at its top.
MALLOC_MMAP_THRESHOLD = 16 * MiB
MALLOC_TRIM_THRESHOLD = 64 * MiB
_M_TRIM_THRESHOLD = -1  # mallopt parameter numbers, from glibc's malloc.h
_M_MMAP_THRESHOLD = -3


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    server = subparsers.add_parser("server", help="run a Fjord node")
    actions = server.add_subparsers(dest="server_command", required=True, metavar="ACTION")
    start = actions.add_parser("start", help="run a node in the foreground (SIGTERM or Ctrl-C stops it cleanly)")
    start.add_argument("--config", metavar="FILE", help="properties file (default: built-in embedded defaults)")
    start.add_argument(
        "--override", metavar="KEY=VALUE", action="append", default=[],
        help="set one configuration key, overriding the file (repeatable)",
    )
    start.add_argument("--log-level", metavar="LEVEL", help="DEBUG, INFO (default), WARNING or ERROR")
    start.add_argument(
        "--add-scram", metavar="'MECHANISM=[name=USER,password=PASSWORD]'", action="append", default=[],
        help="create this SCRAM user before serving unless it exists, as kafka-storage format --add-scram does "
             "(repeatable; a broker or combined node)",
    )
    start.add_argument(
        "--feature", metavar="NAME=LEVEL", action="append", default=[],
        help="finalize this feature level on a new cluster, as kafka-storage format --feature does, e.g. "
             "transaction.version=1 (repeatable; ignored once the cluster finalized its features)",
    )
    start.set_defaults(run=run_start)


def run_start(args: argparse.Namespace) -> int:
    gc.disable()  # until the node serves: see _freeze_startup_heap
    try:
        configure_logging(args.log_level)
        config = ServerConfig.load(args.config, args.override)
    except (ConfigError, ValueError) as exc:
        print(f"fjord: configuration error: {exc}", file=sys.stderr)
        return 1
    try:
        return uvloop.run(_serve(config, args.add_scram, args.feature))
    except ConfigError as exc:
        print(f"fjord: configuration error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    except Exception as exc:  # a start that failed for another reason: one line, details at DEBUG
        logger.debug("node failed to start", exc_info=exc)
        print(f"fjord: cannot start the node: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


def _shorten_gil_handoffs() -> None:
    """Every WAL group commit crosses threads: the writer thread needs the GIL to pick up the group, again after
    the write/fdatasync, and to hand the result back to the loop. While the event loop runs Python without pause
    (a burst of requests), each of those waits until CPython forces a switch, every switch interval: 5 ms by
    default, so up to 15 ms per commit. GIL_SWITCH_INTERVAL_S bounds that wait well under a millisecond.

    Measured with bench/broker.py e2e-latency and timestamps around the WAL write (submit -> writer thread ->
    loop): on a quiet machine the hand-offs are short either way (p99 0.2-0.6 ms, p99.9 1-2 ms), so this changes
    little there; it guards the case of a saturated loop. The extra switches cost no measurable CPU or produce
    throughput (produce-1p)."""
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)


def _share_the_gil_with_the_wal_read() -> None:
    """Lets the thread reading the file WAL back (``storage.wal.early_read``) run while the main thread imports.

    The read is mostly ``pread`` and CRC-32C, which run without the GIL, but each WAL record also takes a little
    Python (its header checked, its batch made), so the thread needs the GIL twice a record. The imports hold it
    without a pause, and at CPython's default interval of 5 ms the thread waited that long for each of those
    turns: of a 540 MB tail it had read about 165 MB when the imports ended (about 0.8 s), and it went on for
    0.35-0.4 s after them, the node not serving. At START_GIL_SWITCH_INTERVAL_S it has read about 490 MB by then
    and ends 0.04-0.07 s after them (scratch measurements, 2026-12-01; bench/kill_acks.py has the restarts). A
    node with little in its WAL starts as before: with no other thread waiting for the GIL, the interval never
    comes into play. Once the node serves, ``_shorten_gil_handoffs`` sets the interval it serves with."""
    sys.setswitchinterval(START_GIL_SWITCH_INTERVAL_S)


def _freeze_startup_heap() -> None:
    """Moves everything alive once the node serves (imported modules, kio's schemas, botocore's service models when a
    bucket is on S3, the replayed metadata image) out of the garbage collector's reach, and turns the collector on.

    Those objects live as long as the process, yet every full collection would walk all of them, stalling the event
    loop for tens of milliseconds each time. Frozen, a full pass only walks what was made after the start (the
    fjord_broker_gc_seconds histogram times every pass). The collector is off until then (``run_start``): the start
    makes long-lived objects, and collecting as it goes would walk the growing heap again and again to free next to
    nothing. Nor is there a full collection before the freeze: the start leaves about 300 objects of cyclic garbage
    (kept for good; measured with the shipped config), and collecting them would hold the first answers for a pass
    over the whole start heap (40-80 ms of CPU on the loaded 2-core development machine)."""
    gc.freeze()
    gc.enable()
    if logger.isEnabledFor(logging.DEBUG):  # counting them walks every one: about 5 ms of each start, for a debug line
        logger.debug("%d startup objects frozen out of garbage collection", gc.get_freeze_count())


def _save_dataclass_code() -> None:
    """Writes the code of the dataclass methods the start compiled (``node.dataclass_code``) once the node serves,
    not only at exit: a node that is killed, never stopped, still starts faster the next time. On a thread of its
    own: the first start after an install or an upgrade writes about 2 MB, which the event loop answering its first
    requests should not wait for; every later start has nothing to write."""
    threading.Thread(target=dataclass_code.save, name="fjord-dataclass-code").start()


def _reuse_freed_memory() -> None:
    """Every produce request, appended batch and fetch response is a buffer of about a producer's batch size (tens of
    KiB to a few MiB), freed a moment later. glibc's defaults give such buffers back to the kernel: from 128 KiB up
    each is a separate mmap (the adaptive threshold only follows the largest buffer freed so far), and the top of
    the heap is trimmed whenever 128 KiB there are free. The next buffer then starts on fresh pages, one page
    fault per 4 KiB, about 12 µs each on this 2-core VM while the broker is busy (30 faults, 0.35 ms, for one
    112 KiB copy in ``PartitionLog.append``, counted with the thread's fault counter).

    Keeping freed memory for reuse took the broker from 15-17 to 12-13 CPU s/GB in bench/broker.py e2e-latency
    and its p99 from about 8.5 to 7.7 ms. Memory that only grows (a LogCache filling up) still faults once. The
    price is up to MALLOC_TRIM_THRESHOLD of free heap kept resident. Other C libraries (musl, macOS) have no
    mallopt or ignore it; there this does nothing."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    if not (mallopt(_M_MMAP_THRESHOLD, MALLOC_MMAP_THRESHOLD) and mallopt(_M_TRIM_THRESHOLD, MALLOC_TRIM_THRESHOLD)):
        logger.debug("mallopt refused the thresholds; the C library's defaults stay")


async def _serve(config: ServerConfig, add_scram: Sequence[str] = (), feature: Sequence[str] = ()) -> int:
    # The client listeners listen before anything else (node.early_listen): a client reconnecting to a restarting
    # node is then accepted, not refused, and answered once the node serves.
    listening = await listen_early(config)
    # Then its file WAL starts being read back, in a thread of its own, while the node imports its stacks (imported
    # here for the same reason as the node below: only a starting node needs it).
    from storage.wal import early_read  # noqa: PLC0415

    wal_read = early_read.start(config.storage) if "broker" in config.process_roles else None
    if wal_read is not None:
        _share_the_gil_with_the_wal_read()
    # And a client connecting meanwhile has its ApiVersions answered at once, so its connection is ready for the
    # request it sends next (wire.early_answers); the wire codec it needs is the node's own, imported anyway.
    from wire.early_answers import EarlyAnswers  # noqa: PLC0415

    answers = EarlyAnswers(without_tls(config, listening))
    answers.start()
    try:
        return await _run_node(config, add_scram, feature, listening, answers)
    finally:
        answers.abandon()
        if wal_read is not None:
            early_read.abandon(wal_read)
        close_all(listening)


async def _stop_failed(node: Node, error: Exception) -> int:
    """The node's Raft replica of the metadata failed for good (``Node.failed``): one line saying so, a stop
    within :data:`FAILED_STOP_BUDGET_S` (a broker still hands its partitions over through the active controller),
    and exit status 1, for the node's supervisor to start it again."""
    logger.error("node %d stops: its copy of the metadata log failed (%s)", node.node_id, error)
    try:
        async with asyncio.timeout(FAILED_STOP_BUDGET_S):
            await node.stop()
    except TimeoutError:
        logger.error("node %d did not stop within %.0f s; exiting", node.node_id, FAILED_STOP_BUDGET_S)
    return 1


async def _run_node(
    config: ServerConfig, add_scram: Sequence[str], feature: Sequence[str], listening: ListeningSockets,
    answers: EarlyAnswers,
) -> int:
    """Parses ``--add-scram`` and ``--feature`` (a ConfigError is the start's one line, as a bad config's is), then
    runs the node until a signal stops it."""
    # Imported once the client listeners listen, not when the CLI loads: the node pulls in the broker, controller and
    # storage stacks (about a second), which `fjord --help` and a configuration error have no use for, and which a
    # client reconnecting to a restarting node should not wait for to be accepted (tests/node/test_early_listen.py
    # checks that nothing listen_early does not need comes before it). The feature option's parser is the
    # controller's (it checks the levels against what the wire layer serves), hence imported here as well.
    from controller.feature_bootstrap import parse_feature  # noqa: PLC0415
    from node.process import Node  # noqa: PLC0415

    scram = [parse_add_scram(text) for text in add_scram]
    if scram and "broker" not in config.process_roles:
        raise ConfigError("--add-scram: give it to a broker or combined node (this node is a controller only)")
    features = [parse_feature(text) for text in feature]
    if features and "broker" not in config.process_roles:
        raise ConfigError("--feature: give it to a broker or combined node (this node is a controller only)")
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(loop_exception_handler)
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    node = Node(config, scram_credentials=scram, initial_features=features, listening=listening,
                early_answers=answers)
    starting = asyncio.create_task(node.start())
    stopper = asyncio.create_task(stop.wait())
    done, _ = await asyncio.wait({starting, stopper}, return_when=asyncio.FIRST_COMPLETED)
    if starting in done:
        starting.result()  # a failed start raises here (node.start already cleaned up)
        _save_dataclass_code()
        _freeze_startup_heap()
        _shorten_gil_handoffs()
        _reuse_freed_memory()
        node.metrics.watch_gc()
        lag = asyncio.create_task(node.metrics.watch_loop_lag(), name="event-loop lag probe")
        failing = asyncio.create_task(node.failed(), name="metadata replica watch")
        try:
            await asyncio.wait({stopper, failing}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            lag.cancel()
            node.metrics.unwatch_gc()
        if failing.done():
            return await _stop_failed(node, failing.result())
        failing.cancel()
        logger.info("signal received; shutting down node %d", node.node_id)
    else:
        logger.info("signal received while starting; shutting down node %d", node.node_id)
        starting.cancel()
        try:
            await starting
        except (asyncio.CancelledError, Exception):
            pass
    await node.stop()
    return 0
