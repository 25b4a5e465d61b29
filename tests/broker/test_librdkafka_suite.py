"""librdkafka's own test suite (from Debian's librdkafka source package) against a Fjord broker.

These are the conformance tests librdkafka's authors run against Apache Kafka. ``librdkafka_allowlist.txt`` beside
this file lists the ones Fjord must pass; each runs as its own pytest case so a regression names the test. The suite
is built by ``scripts/build-librdkafka-tests.sh`` (``make test`` runs it first).
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_support import BrokerProcess, start_broker

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / ".cache" / "librdkafka" / "src"
RUNNER = SUITE / "tests" / "test-runner"
ALLOWLIST = Path(__file__).with_name("librdkafka_allowlist.txt")
TIMEOUT_S = 300
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_RESULT = re.compile(r"\|\s*(\d{4}_\S+)\s*\|\s*(PASSED|FAILED|SKIPPED)\s*\|")

#: Tests that race the client's own timers against socket delays they inject, so that a loaded machine can make
#: them fail against any broker: each runs once more after a failure, and a second failure in a row counts. Every
#: other test's first failure counts.
RACES_THE_CLIENTS_TIMERS = {
    # 0086 purge_remote expects its first ProduceRequest to carry a whole batch of 10 messages (linger.ms 500, every
    # socket delayed 500 ms); on a loaded 2-core CI machine it once carried one.
    "0086": "the first ProduceRequest must carry all 10 messages lingered for 500 ms behind a 500 ms socket delay",
}


def allowlisted() -> list[str]:
    """Test numbers (``0001``) from the allowlist; ``#`` starts a comment."""
    tests = []
    for line in ALLOWLIST.read_text().splitlines():
        entry = line.split("#", 1)[0].strip()
        if entry:
            tests.append(entry)
    return tests


@pytest.fixture(scope="module")
def suite_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A node configured like the suite's "default" scenario (auto-created topics get 4 partitions)."""
    if not RUNNER.exists():
        pytest.skip(
            "librdkafka's test suite is not built: run scripts/build-librdkafka-tests.sh "
            "(needs Debian's librdkafka source package, gcc, libssl-dev and zlib1g-dev)"
        )
    process = start_broker(tmp_path_factory.mktemp("librdkafka-broker"), {"num.partitions": "4"})
    try:
        yield process
    finally:
        assert process.stop() == 0, process.log_text()


@pytest.fixture(scope="module")
def suite_conf(suite_broker: BrokerProcess, tmp_path_factory: pytest.TempPathFactory) -> Path:
    conf = tmp_path_factory.mktemp("librdkafka") / "test.conf"
    conf.write_text(f"metadata.broker.list={suite_broker.bootstrap}\ntest.timeout.multiplier=3\n")
    return conf


def _run_suite_test(test_id: str, suite_conf: Path) -> tuple[bool, str, str]:
    """Runs one librdkafka test: (passed, a one-line summary, the end of its output)."""
    env = dict(os.environ)
    env.update(
        TESTS=test_id,
        TEST_KAFKA_VERSION="3.6.0",
        RDKAFKA_TEST_CONF=str(suite_conf),
        LD_LIBRARY_PATH=f"{SUITE / 'src'}:{SUITE / 'src-cpp'}",
    )
    try:
        # -L: only tests that need a broker (local-only tests prove nothing about Fjord). Full mode, not quick (-Q):
        # quick mode skips the SUB_TEST()s of many tests, which would then "pass" without doing anything.
        done = subprocess.run(
            [str(RUNNER), "-L"],
            check=False,
            cwd=SUITE / "tests",
            env=env,
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


@pytest.mark.slow
@pytest.mark.parametrize("test_id", allowlisted())
def test_librdkafka_test_passes(test_id: str, suite_conf: Path, suite_broker: BrokerProcess) -> None:
    ok, summary, output = _run_suite_test(test_id, suite_conf)
    if not ok and test_id in RACES_THE_CLIENTS_TIMERS:
        # Printed, so pytest keeps the first attempt's output in the captured log of the test.
        print(f"{summary}; running it once more ({RACES_THE_CLIENTS_TIMERS[test_id]})\n{output[-2000:]}")
        ok, summary, output = _run_suite_test(test_id, suite_conf)
    assert ok, f"{summary}\n{output}\n--- broker log ---\n{suite_broker.log_text()[-3000:]}"


def test_only_allowlisted_tests_get_a_second_run() -> None:
    assert set(RACES_THE_CLIENTS_TIMERS) <= set(allowlisted()), "a rerun entry names a test that no longer runs"
