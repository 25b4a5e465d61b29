"""Running one test of librdkafka's own suite (2.0.2, from Debian's source package, built by
``scripts/build-librdkafka-tests.sh``) against a Fjord node or cluster: shared by the single-node allowlist run
(tests/broker/test_librdkafka_suite.py) and the tests that need three brokers (tests/cluster/). Tests that mostly
wait can run side by side (:class:`SideBySide`), as librdkafka's own runner runs up to five at once against one
cluster: every test makes its own randomly named topics and groups."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUITE = ROOT / ".cache" / "librdkafka" / "src"
RUNNER = SUITE / "tests" / "test-runner"
TIMEOUT_S = 300
NOT_BUILT = (
    "librdkafka's test suite is not built: run scripts/build-librdkafka-tests.sh "
    "(needs Debian's librdkafka source package, gcc, libssl-dev and zlib1g-dev)"
)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_RESULT = re.compile(r"\|\s*(\d{4}_\S+)\s*\|\s*(PASSED|FAILED|SKIPPED)\s*\|")


def write_suite_conf(path: Path, bootstrap: str, client: Mapping[str, str] | None = None) -> Path:
    """The suite's ``test.conf`` for the brokers at ``bootstrap`` (timeouts x3 for a loaded machine), with
    ``client``'s properties for every client the tests make (``security.protocol``, ``sasl.*``, ``ssl.*``)."""
    lines = [f"metadata.broker.list={bootstrap}", "test.timeout.multiplier=3"]
    lines += [f"{key}={value}" for key, value in (client or {}).items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def run_suite_test(
    test_id: str,
    suite_conf: Path,
    unset: tuple[str, ...] = (),
    *,
    quick: bool = False,
    env: Mapping[str, str] | None = None,
) -> tuple[bool, str, str]:
    """Runs one librdkafka test: (passed, a one-line summary, the end of its output).

    ``unset`` names environment variables the test must not see (0055 skips itself whenever ``CI`` is set).
    ``quick`` runs it in the suite's quick mode (-Q): only for a test whose quick mode still runs each of its checks
    once (0081's skips just the repeat of every subtest through a consumer handle).
    ``env`` adds environment variables, as trivup sets them for some tests (0097's ``SSL_*`` certificate files).
    """
    child_env = {key: value for key, value in os.environ.items() if key not in unset}
    child_env.update(env or {})
    child_env.update(
        TESTS=test_id,
        TEST_KAFKA_VERSION="3.6.0",
        RDKAFKA_TEST_CONF=str(suite_conf),
        LD_LIBRARY_PATH=f"{SUITE / 'src'}:{SUITE / 'src-cpp'}",
    )
    try:
        # -L: only tests that need a broker (local-only tests prove nothing about Fjord). Full mode unless asked:
        # quick mode (-Q) skips the SUB_TEST()s of many tests, which would then "pass" without doing anything.
        done = subprocess.run(
            [str(RUNNER), "-L", *(["-Q"] if quick else [])],
            check=False,
            cwd=SUITE / "tests",
            env=child_env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as exc:
        tail = _ANSI.sub("", (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else exc.stdout or "")
        return False, f"librdkafka test {test_id} did not finish in {TIMEOUT_S} s", tail[-3000:]
    output = _ANSI.sub("", done.stdout + done.stderr)
    results = {name: status for name, status in _RESULT.findall(output) if name.startswith(test_id)}
    passed = [name for name, status in results.items() if status == "PASSED"]
    failed = [name for name, status in results.items() if status == "FAILED"]
    ok = done.returncode == 0 and bool(passed) and not failed
    return ok, f"librdkafka test {test_id}: exit {done.returncode}, passed {passed}, failed {failed}", output[-4000:]


@dataclass(frozen=True)
class SuiteResult:
    """How one librdkafka test went: its last run (as :func:`run_suite_test` returns it) and the summaries and
    output tails of the failed runs before it, if it was run again."""

    ok: bool
    summary: str
    output: str
    earlier_failures: tuple[str, ...] = ()


class SideBySide:
    """Runs librdkafka tests, each in its own test-runner process, at most ``width`` at once, in the order they are
    started; each pytest case then takes its own test's result. Started in that order and by a pool that takes the
    next test as soon as one ends, a test starts before the ones after it end, so a case that waits for its results in
    the same order waits no longer than its own test runs (pytest's per-test timeout still holds)."""

    def __init__(self, width: int) -> None:
        self._pool = ThreadPoolExecutor(max_workers=width, thread_name_prefix="librdkafka-suite")
        self._runs: dict[str, Future[SuiteResult]] = {}

    def start(self, test_id: str, run: Callable[[], SuiteResult]) -> None:
        self._runs[test_id] = self._pool.submit(run)

    def result(self, test_id: str) -> SuiteResult:
        """``test_id``'s result, once its test has ended (it was started with the others, see :meth:`start`). The
        last test started returns only once every test has ended: a test started before it may still run, and
        what follows the last case must not share the node with any of them."""
        if test_id == next(reversed(self._runs)):
            wait(self._runs.values())
        return self._runs[test_id].result()

    def close(self) -> None:
        """Drops the tests not yet started and waits for the running ones (each ends within ``TIMEOUT_S``), so
        that none still runs when its broker stops."""
        self._pool.shutdown(wait=True, cancel_futures=True)
