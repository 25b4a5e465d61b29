"""librdkafka's own test suite (from Debian's librdkafka source package) against a Fjord broker.

These are the conformance tests librdkafka's authors run against Apache Kafka. ``librdkafka_allowlist.txt`` beside
this file lists the ones Fjord must pass on a node configured like the suite's "default" scenario but with no initial
rebalance delay (:data:`SUITE_NODE`); the few that need ACLs (:data:`NEEDS_AUTHORIZER`) run against a second node with
an authorizer, which also serves the SSL and SASL listeners of the tests that need one (:data:`NEEDS_SECURITY`), and
the three that need Kafka's initial rebalance delay (:data:`NEEDS_REBALANCE_DELAY`) against a third node that has it.
Each runs as its own pytest case so a regression names the test; the allowlist's tests that mostly wait
(:data:`MOSTLY_WAITS`) run side by side, before its others. The suite is built by
``scripts/build-librdkafka-tests.sh`` (``make test`` runs it first).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from settings.security import STANDARD_AUTHORIZER
from testkit.node_process import BrokerProcess, start_broker
from testkit.tls_certs import CertificateAuthority
from tests.librdkafka_suite import NOT_BUILT, RUNNER, SideBySide, SuiteResult, run_suite_test, write_suite_conf
from tests.trivup_certs import TrivupClientCertificate, write_trivup_client_certificate

ALLOWLIST = Path(__file__).with_name("librdkafka_allowlist.txt")

#: How many more runs a test of the two lists below gets after a failure: on a 2-core CI machine 0086 once failed
#: twice in a row, and later three times (its first ProduceRequest carried one message of the ten lingered for it).
RERUNS = 5
#: Tests that race the client's own timers against socket delays they inject, so that a loaded machine can make
#: them fail against any broker: each runs again after a failure (at most RERUNS more times), and only failures in
#: every run count. Every other test's first failure counts.
RACES_THE_CLIENTS_TIMERS = {
    # 0086 purge_remote expects its first ProduceRequest to carry a whole batch of 10 messages (linger.ms 500, every
    # socket delayed 500 ms). The delay makes the topic's metadata arrive after the messages' linger has passed, so
    # the batch is due the moment the first message reaches its partition; how many of the 20 are there by then is a
    # race between the client's thread that moves them from the unassigned queue and the leader's broker thread. On
    # 2-core CI machines the broker thread sometimes wins (one message), three runs in a row once; here it never has.
    "0086": "the first ProduceRequest must carry all 10 messages lingered for 500 ms behind a 500 ms socket delay",
    # 0061 consumer_lag compares the lag in each statistics event (emitted by the client's stats timer thread, from
    # the stored offset) with the lag the test computed from the last message it got: an event emitted between the
    # message's return and the store of its offset is one behind. Seen once in a CI run ("Stats consumer_lag 6,
    # expected 5"), after passing in the runs before it.
    "0061": "a statistics event emitted between a message's delivery and the store of its offset reports a lag one "
    "higher than the test computed",
    # 0102 static_group_rebalance (on :data:`NEEDS_REBALANCE_DELAY`'s node) blocks a static member for exactly its
    # max.poll.interval.ms plus its session.timeout.ms (9 s + 6 s), then expects one rebalance with both members: the
    # node's session timer and the member's rejoin race. Seen once: the node expired the session and ended a
    # generation with the other member alone 8 ms before the rejoin, so that member was revoked a second time.
    "0102": "a static member blocked for exactly max.poll.interval.ms plus session.timeout.ms races the node's "
    "session timer with its rejoin",
}

#: Tests that skip themselves when ``CI`` is set (their measurements are "not reliable on CI"), so they run without
#: it; they also race timers on a loaded machine, so each gets the reruns of the tests above.
MEASURES_LATENCY = {
    # 0055 producer_latency checks each message's delivery latency against linger.ms for acks 0/1/all, idempotent
    # and transactional producers: a broker that delays a produce response or a transaction's end fails it.
    "0055": "per-message delivery latency is checked against linger.ms, which a loaded 2-core machine can exceed",
}

#: Tests that need ACLs (Create/Describe/DeleteAcls answer SECURITY_DISABLED without an authorizer): they run against
#: a node of their own, :data:`AUTHORIZER_NODE`, not the allowlist's.
NEEDS_AUTHORIZER = {
    # 0081 admin: every admin API librdkafka has (topics, partitions, ACLs, configs, records, groups, offsets).
    "0081": "its CreateAcls/DescribeAcls/DeleteAcls subtests need an authorizer",
}

#: The suite's quick mode (-Q) for tests whose quick mode still runs each of their checks once (CI time).
QUICK_MODE = {
    # 0081 runs all its ~40 subtests through a producer handle, then (not in quick mode) all again through a
    # consumer handle: the same requests, about 37 s each time, mostly the test's own sleeps (2 s after each
    # validate_only CreateTopics, 6 s for static members' sessions to expire, 1 s for "propagation" in each
    # consumer-group-offsets subtest, 1 s polls waiting for an assignment).
    "0081": "its second pass repeats every subtest through a consumer handle",
}

#: How many of :data:`MOSTLY_WAITS`' tests run at once (:class:`~tests.librdkafka_suite.SideBySide`): four use about
#: half a core in all (0076's socket emulator most of it), and cut the 450 s they take one after another to about 120.
SIDE_BY_SIDE = 4

#: Allowlisted tests that spend nearly all their time waiting (for sessions and poll intervals to expire, for socket
#: delays they inject, in sleeps), so they run side by side on the allowlist's node, :data:`SIDE_BY_SIDE` at once,
#: before its other tests, which never share the node with them. Measured serially on a loaded 2-core machine
#: (seconds; CPU = the test-runner's and the node's CPU seconds during the test): together 450 s and under 40 s of
#: CPU, 25 of them 0076's. librdkafka's own runner runs up to five tests at once
#: against one cluster (three on CI), and every test names its own topics and groups from random ids, so none of
#: these sees another's data. Left serial: the tests that race the client's timers or measure latency (above), those
#: that assert a duration or a deadline of a few seconds (0001, 0018, 0019, 0084, 0114, 0123, 0125, 0137),
#: those that use the CPU (0011, 0030, 0038, 0041, 0048) and the short ones (under 10 s each: little to gain). Kept in
#: the order they start, longest first.
MOSTLY_WAITS = {
    # 0076 produce_retry (65 s, 25 s CPU: the socket emulator's thread): retries through a 3 s socket delay that
    # its own client injects, 12 s in all, then through a disconnect; deadlines of its own client's timers with 2 s
    # of slack, which a node busy with three other waiting tests does not approach.
    "0076": "sleeps through a socket delay its own client injects, then a disconnect",
    # 0091 max_poll_interval_timeout (62 s, 1 s CPU): two consumers each sleep 10 s per message to show that a
    # max.poll.interval.ms of 20 s, longer than socket.timeout.ms, keeps the group stable.
    "0091": "its consumers sleep 10 s per message against a 20 s max.poll.interval.ms",
    # 0094 idempotence_msg_timeout (54 s, 2 s CPU): messages time out behind a 10 s socket delay of its own client
    # (twice message.timeout.ms) until the delay is lifted at 15 s; it then checks what was delivered.
    "0094": "waits out a 10 s socket delay of its own client, twice the message timeout",
    # 0026 consume_pause (48 s, 1 s CPU): pauses and resumes partitions of its own group across rebalances and a 2 s
    # settle, waiting for assignments and end-of-partition events of a 6 s session.
    "0026": "waits for its own group's rebalances and a 2 s settle around pause and resume",
    # 0122 buffer_cleaning_after_rebalance (39 s, 2 s CPU): a batch consume waits its whole 12 s timeout across a
    # rebalance (it asks for more messages than exist), twice; the rebalance of its own group must end in that time.
    "0122": "each batch consume waits its whole 12 s timeout across a rebalance of its own group",
    # 0033 regex_subscribe (35 s, 1 s CPU): subscribes its own groups to regexes naming only its own topics (the
    # group id is in the regex) and waits for each assignment and revocation.
    "0033": "waits for assignments of regex subscriptions that match only its own topics",
    # 0093 holb_consumer (27 s, under 1 s CPU): one consumer sleeps 5 s while the second joins and polls for 10 s,
    # showing that the rebalance waits for the first's next poll.
    "0093": "its consumers sleep 5 s and poll 10 s while its own group rebalances",
    # 0088 produce_metadata_timeout (26 s, 1 s CPU): its client refuses connections for 15 s so that its metadata
    # expires, then sleeps 3 s and delivers within two 5 s lingers.
    "0088": "its client refuses connections for 15 s, then sleeps 3 s",
    # 0068 produce_timeout (23 s, under 1 s CPU): every message times out (2 s) behind a 10 s socket delay its own
    # client injects.
    "0068": "its messages time out behind a 10 s socket delay its own client injects",
    # 0049 consume_conn_close (16 s, under 1 s CPU): its client's network is down for 10 s, past the 6 s session, then
    # it consumes the rest of its own topic.
    "0049": "its client's network is down for 10 s, past its session",
    # 0069 consumer_add_parts (16 s, under 1 s CPU): after adding partitions, polls 10 s to show its consumer keeps
    # working.
    "0069": "polls for 10 s after adding partitions to its own topic",
    # 0045 subscribe_update (16 s, under 1 s CPU): waits 10 s to see that a topic outside its regex causes no
    # rebalance.
    "0045": "waits 10 s for no rebalance when a topic outside its own regex appears",
    # 0051 assign_adds (13 s, under 1 s CPU): after unassigning a topic, polls 9 s to see no message of it.
    "0051": "polls 9 s to see no message from a topic it unassigned",
    # 0050 subscribe_adds (13 s, under 1 s CPU): consumes its own topics as its subscription grows, end of partitions
    # awaited by polls.
    "0050": "waits for its own subscription's assignments as it grows",
}

#: The allowlist's node: what the suite's "default" scenario needs (4 partitions per auto-created topic), and no
#: initial rebalance delay, as Kafka's own config/server.properties ships for development and testing. With Kafka's
#: 3 s default every new group waits 3 s before its first assignment, against Kafka as against Fjord: the ~20 groups
#: of 0081 took about 70 s more per pass, and the allowlist as a whole about 3 minutes more (0030 51 s against 13 s,
#: 0033 65 s against 35 s).
#: Retention is checked once an hour, not every 5 minutes: 0059 bsearch produces records timestamped in 1970, which
#: ``retention.ms`` (7 days) deletes, as Kafka's would, when a check falls while it runs (once in CI: it then seeked
#: to a deleted offset and timed out on OFFSET_OUT_OF_RANGE). The suite's nodes live well under an hour.
SUITE_NODE = {
    "num.partitions": "4",
    "group.initial.rebalance.delay.ms": "0",
    "log.retention.check.interval.ms": "3600000",
}

#: Tests that need Kafka's default initial rebalance delay (3 s), as trivup's brokers have it: they run against a node
#: of their own, :data:`SUITE_NODE` with Kafka's default.
NEEDS_REBALANCE_DELAY = {
    # 0102 static_group_rebalance: two static members subscribe one after the other, and both must be assigned in the
    # group's first generation. The delay holds that generation open for the second; without it the first member is
    # assigned every partition alone, then revoked when the second joins, which the test refuses.
    "0102": "both static members must be assigned in the group's first generation",
    # 0089 max_poll_interval: two consumers of a one-partition topic subscribe one after the other; the one that gets
    # the first message stops polling, and the other must get a message only after max.poll.interval.ms (10 s). The
    # delay puts both in the first generation; without it the first is assigned the partition alone, and the second's
    # join moves it whenever the range assignor orders the second's random member id first (seen: "Consumer 1: did
    # not expect message for at least 7181ms").
    "0089": "both consumers must be in the group's first generation, so that the partition moves only when "
    "max.poll.interval.ms expires",
    # 0118 commit_rebalance: two consumers subscribe 3 ms apart; the test polls the first until it has 10 messages,
    # then only the second. Without the delay the first can be assigned every partition alone (seen: the second
    # joined 5 ms after the first generation was stable); the second's join then needs the first to rejoin, which it
    # does only when polled, and the second's poll times out after 30 s.
    "0118": "both consumers must be in the group's first generation: the test stops polling the first while the "
    "second waits for its assignment",
}

#: The authorizer node: :data:`SUITE_NODE` with Kafka's StandardAuthorizer and the suite's plaintext clients
#: (User:ANONYMOUS) a super user, so that the ACLs the test creates are kept and checked but never deny it.
AUTHORIZER_NODE = {
    **SUITE_NODE,
    "authorizer.class.name": STANDARD_AUTHORIZER,
    "super.users": "User:ANONYMOUS",
}

#: Tests that need an SSL or SASL listener: they run against :data:`AUTHORIZER_NODE`'s, with the ``test.conf`` client
#: properties and (0097) the ``SSL_*`` certificate files trivup gives them (without, each skips itself: a failure here).
NEEDS_SECURITY = {
    # 0097 ssl_verify: a client certificate loaded in each form librdkafka takes (files, PEM strings, PEM, DER and
    # PKCS#12 bytes) must be accepted by a listener requiring client certificates; a client whose verify callback
    # refuses the broker's certificate must not connect; a key set without its certificate fails client creation.
    "0097": "SSL",
    # 0135 sasl_credentials: wrong SASL credentials fail authentication (ERR__AUTHENTICATION), then the right ones
    # set at runtime (sasl_set_credentials) are used on the next connection.
    "0135": "SASL_PLAINTEXT",
}

#: The user 0135 authenticates as (a SCRAM-SHA-256 credential made at bootstrap, as trivup's ``sasl_users``) and the
#: password of every key and SASL credential of :data:`NEEDS_SECURITY`'s tests.
SASL_USER = "librdkafka"
SUITE_PASSWORD = "suite-pass-never-logged"


@dataclass(frozen=True)
class SuiteCertificates:
    """The CA of the authorizer node's SSL listener and the suite's client certificate it signed."""

    ca: CertificateAuthority
    client: TrivupClientCertificate


def security_listeners(certs: SuiteCertificates) -> dict[str, str]:
    """The authorizer node's SSL (client certificates required) and SASL_PLAINTEXT (SCRAM-SHA-256) listeners besides
    the PLAINTEXT one of :data:`NEEDS_AUTHORIZER`'s tests."""
    server = certs.ca.issue("suite-server", server=True)
    return {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,"
        "SASL_PLAINTEXT:SASL_PLAINTEXT",
        "ssl.keystore.location": str(server.keystore_path),
        "ssl.truststore.location": str(certs.ca.cert_path),
        "ssl.client.auth": "required",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256",
    }


def allowlisted() -> list[str]:
    """Test numbers (``0001``) from the allowlist; ``#`` starts a comment."""
    tests = []
    for line in ALLOWLIST.read_text().splitlines():
        entry = line.split("#", 1)[0].strip()
        if entry:
            tests.append(entry)
    return tests


@contextlib.contextmanager
def suite_node(directory: Path, config: Mapping[str, str], args: Sequence[str] = ()) -> Iterator[BrokerProcess]:
    """A node for the suite's tests (skipped when the suite is not built), which must stop cleanly after them."""
    if not RUNNER.exists():
        pytest.skip(NOT_BUILT)
    process = start_broker(directory, config, args=args)
    try:
        yield process
    finally:
        assert process.stop() == 0, process.log_text()


@pytest.fixture(scope="module")
def suite_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """The allowlist's node, :data:`SUITE_NODE`."""
    with suite_node(tmp_path_factory.mktemp("librdkafka-broker"), SUITE_NODE) as process:
        yield process


@pytest.fixture(scope="module")
def delayed_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """The node of :data:`NEEDS_REBALANCE_DELAY`'s tests: :data:`SUITE_NODE` with Kafka's default delay."""
    node = {**SUITE_NODE, "group.initial.rebalance.delay.ms": "3000"}
    with suite_node(tmp_path_factory.mktemp("librdkafka-delayed-broker"), node) as process:
        yield process


@pytest.fixture(scope="module")
def suite_conf(suite_broker: BrokerProcess, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_suite_conf(tmp_path_factory.mktemp("librdkafka") / "test.conf", suite_broker.bootstrap)


def run_with_reruns(test_id: str, suite_conf: Path) -> SuiteResult:
    """Runs one test, and again after a failure if it is one of :data:`RACES_THE_CLIENTS_TIMERS` or
    :data:`MEASURES_LATENCY` (at most :data:`RERUNS` more times)."""
    unset = ("CI",) if test_id in MEASURES_LATENCY else ()
    ok, summary, output = run_suite_test(test_id, suite_conf, unset, quick=test_id in QUICK_MODE)
    reason = RACES_THE_CLIENTS_TIMERS.get(test_id) or MEASURES_LATENCY.get(test_id)
    earlier: list[str] = []
    for _ in range(RERUNS if reason else 0):
        if ok:
            break
        earlier.append(f"{summary}; running it again ({reason})\n{output[-2000:]}")
        ok, summary, output = run_suite_test(test_id, suite_conf, unset, quick=test_id in QUICK_MODE)
    return SuiteResult(ok, summary, output, tuple(earlier))


def assert_passed(result: SuiteResult, broker: BrokerProcess, note: str = "") -> None:
    for failure in result.earlier_failures:
        # Printed, so pytest keeps each failed attempt's output in the captured log of the test.
        print(failure)
    log = broker.log_text()[-3000:]
    assert result.ok, f"{result.summary}{note}\n{result.output}\n--- broker log ---\n{log}"


@pytest.fixture(scope="module")
def waiting_tests(
    request: pytest.FixtureRequest, suite_conf: Path, suite_broker: BrokerProcess
) -> Iterator[SideBySide]:
    """:data:`MOSTLY_WAITS`' tests that this session runs, all started at once on the allowlist's node, at most
    :data:`SIDE_BY_SIDE` running together, in :data:`MOSTLY_WAITS`' order (the order of their pytest cases)."""
    selected = {
        item.callspec.params["test_id"]
        for item in request.session.items
        if isinstance(item, pytest.Function)
        and item.module is request.module
        and item.originalname == "test_waiting_librdkafka_test_passes"
    }
    runs = SideBySide(SIDE_BY_SIDE)
    try:
        for test_id in MOSTLY_WAITS:
            if test_id in selected:
                runs.start(test_id, functools.partial(run_with_reruns, test_id, suite_conf))
        yield runs
    finally:
        runs.close()


@pytest.mark.slow
@pytest.mark.parametrize("test_id", list(MOSTLY_WAITS))
def test_waiting_librdkafka_test_passes(test_id: str, waiting_tests: SideBySide, suite_broker: BrokerProcess) -> None:
    """Runs before the allowlist's other tests, which therefore never share the node with these."""
    note = f" (run side by side with up to {SIDE_BY_SIDE - 1} others of MOSTLY_WAITS: {MOSTLY_WAITS[test_id]})"
    assert_passed(waiting_tests.result(test_id), suite_broker, note)


@pytest.mark.slow
@pytest.mark.parametrize("test_id", [test_id for test_id in allowlisted() if test_id not in MOSTLY_WAITS])
def test_librdkafka_test_passes(test_id: str, suite_conf: Path, suite_broker: BrokerProcess) -> None:
    assert_passed(run_with_reruns(test_id, suite_conf), suite_broker)


@pytest.fixture(scope="module")
def suite_certificates(tmp_path_factory: pytest.TempPathFactory) -> SuiteCertificates:
    ca = CertificateAuthority(tmp_path_factory.mktemp("librdkafka-certs"), "suite CA")
    return SuiteCertificates(ca, write_trivup_client_certificate(ca, SUITE_PASSWORD))


@pytest.fixture(scope="module")
def authorizer_broker(
    suite_certificates: SuiteCertificates, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerProcess]:
    """The node of :data:`NEEDS_AUTHORIZER`'s tests (:data:`AUTHORIZER_NODE`) and :data:`NEEDS_SECURITY`'s."""
    with suite_node(
        tmp_path_factory.mktemp("librdkafka-authorizer-broker"),
        {**AUTHORIZER_NODE, **security_listeners(suite_certificates)},
        args=["--add-scram", f"SCRAM-SHA-256=[name={SASL_USER},password={SUITE_PASSWORD}]"],
    ) as process:
        yield process
    assert SUITE_PASSWORD not in process.log_text()


@pytest.mark.slow
@pytest.mark.parametrize("test_id", sorted(NEEDS_REBALANCE_DELAY))
def test_librdkafka_test_passes_with_kafkas_rebalance_delay(
    test_id: str, delayed_broker: BrokerProcess, tmp_path: Path
) -> None:
    suite_conf = write_suite_conf(tmp_path / "test.conf", delayed_broker.bootstrap)
    assert_passed(run_with_reruns(test_id, suite_conf), delayed_broker)


@pytest.mark.slow
@pytest.mark.parametrize("test_id", sorted(NEEDS_AUTHORIZER))
def test_librdkafka_test_passes_with_an_authorizer(
    test_id: str, authorizer_broker: BrokerProcess, tmp_path: Path
) -> None:
    suite_conf = write_suite_conf(tmp_path / "test.conf", authorizer_broker.bootstrap)
    ok, summary, output = run_suite_test(test_id, suite_conf, quick=test_id in QUICK_MODE)
    assert ok, f"{summary}\n{output}\n--- broker log ---\n{authorizer_broker.log_text()[-3000:]}"


@pytest.mark.slow
@pytest.mark.parametrize("test_id", sorted(NEEDS_SECURITY))
def test_librdkafka_test_passes_on_a_secured_listener(
    test_id: str, authorizer_broker: BrokerProcess, suite_certificates: SuiteCertificates, tmp_path: Path
) -> None:
    listener = NEEDS_SECURITY[test_id]
    host, port = authorizer_broker.endpoints[listener]
    if listener == "SSL":
        client, env = suite_certificates.client.client_conf, suite_certificates.client.env
    else:
        client = {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": SASL_USER,
            "sasl.password": SUITE_PASSWORD,
        }
        env = {}
    suite_conf = write_suite_conf(tmp_path / "test.conf", f"{host}:{port}", client)
    ok, summary, output = run_suite_test(test_id, suite_conf, env=env)
    assert ok, f"{summary}\n{output}\n--- broker log ---\n{authorizer_broker.log_text()[-3000:]}"


def test_only_allowlisted_tests_get_a_second_run() -> None:
    runs = set(allowlisted()) | set(NEEDS_REBALANCE_DELAY)
    assert set(RACES_THE_CLIENTS_TIMERS) <= runs, "a rerun entry names a test that no longer runs"
    assert set(MEASURES_LATENCY) <= set(allowlisted()), "a latency entry names a test that no longer runs"
    assert not set(NEEDS_AUTHORIZER) & set(allowlisted()), "a test runs on both nodes"
    others = set(allowlisted()) | set(NEEDS_AUTHORIZER) | set(NEEDS_SECURITY)
    assert not set(NEEDS_REBALANCE_DELAY) & others, "a test runs twice"
    assert not set(NEEDS_SECURITY) & (set(allowlisted()) | set(NEEDS_AUTHORIZER)), "a test runs twice"
    assert set(QUICK_MODE) <= set(allowlisted()) | set(NEEDS_AUTHORIZER), "a quick entry names a test that never runs"


def test_only_tests_that_mostly_wait_run_side_by_side() -> None:
    assert set(MOSTLY_WAITS) <= set(allowlisted()), "a side-by-side entry names a test that is not allowlisted"
    timed = set(RACES_THE_CLIENTS_TIMERS) | set(MEASURES_LATENCY)
    assert not set(MOSTLY_WAITS) & timed, "a test that races timers or measures latency runs alongside others"
