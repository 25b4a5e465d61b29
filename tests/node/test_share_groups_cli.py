"""``fjord share-groups`` (Kafka's kafka-share-groups.sh) run as a subprocess against a real broker, with
confluent-kafka ``ShareConsumer``s in the groups: the tables an operator reads (members and their assignments, the
group's state, start offsets and lag moving as records are acknowledged), an offset reset that the next consumer
starts from, offsets and groups deleted, and bad input or a refusal answered with one ``fjord:`` line and a non-zero
exit, never a traceback.

One broker serves the module with short share heartbeats and sessions, so a closed consumer leaves its group at
once and a group is empty again within seconds; every test has its own topic and group, every wait is bounded.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import AcknowledgeType, Message, ShareConsumer

from testkit.node_process import BrokerProcess, start_broker
from testkit.waiting import eventually
from tests.broker.cg_clients import produce, unique
from tests.broker.share_clients import drain, set_group_config, share_consumer_factory
from tests.node.cli_exit import run_to_exit
from tests.topics import create_topic

SHARE_OVERRIDES = {
    "group.share.heartbeat.interval.ms": "500",
    "group.share.min.heartbeat.interval.ms": "500",
    "group.share.session.timeout.ms": "6000",
    "group.share.min.session.timeout.ms": "6000",
}
WAIT_S = 30.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = start_broker(tmp_path_factory.mktemp("share-cli"), SHARE_OVERRIDES)
    yield process
    assert process.stop() == 0, process.log_text()


@pytest.fixture()
def share_consumer(broker: BrokerProcess) -> Iterator[Callable[..., ShareConsumer]]:
    yield from share_consumer_factory(lambda: broker.bootstrap)


def fjord(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return run_to_exit(
        [sys.executable, "-m", "node.cli", "share-groups", "--bootstrap-server", broker.bootstrap, *args]
    )


def ok(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    result = fjord(broker, *args)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    return result


def rows(stdout: str) -> list[dict[str, str]]:
    """The table's rows as {column: cell}, cut where the header's columns start (a header may hold a space, as
    ``COORDINATOR (ID)`` does)."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    if not lines:
        return []
    header = lines[0]
    names = [name for name in header.split("  ") if name.strip()]
    starts = [header.index(name.strip()) for name in names]
    bounds = list(zip(starts, [*starts[1:], None], strict=True))
    return [
        {name.strip(): line[a:b].strip() for name, (a, b) in zip(names, bounds, strict=True)} for line in lines[1:]
    ]


def one_line_failure(result: subprocess.CompletedProcess[str], status: int, *fragments: str) -> str:
    assert result.returncode == status, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("fjord:")]
    assert len(errors) == 1, result.stderr
    for fragment in fragments:
        assert fragment in errors[0], errors[0]
    return errors[0]


def share_group(broker: BrokerProcess, topic: str, partitions: int) -> str:
    create_topic(broker.bootstrap, topic, partitions)
    group = unique("share")
    set_group_config(broker.bootstrap, group, {"share.auto.offset.reset": "earliest"})
    return group


def offsets(broker: BrokerProcess, group: str) -> dict[int, tuple[str, str]]:
    """partition -> (START-OFFSET, LAG) of ``--describe`` (offsets, the default)."""
    table = rows(ok(broker, "--describe", "--group", group).stdout)
    return {int(r["PARTITION"]): (r["START-OFFSET"], r["LAG"]) for r in table}


def consume_all(consumer: ShareConsumer, values: set[int]) -> list[int]:
    """Every record of ``values`` through ``consumer`` (implicitly acknowledged), then the acknowledgements sent."""
    seen: list[int] = []
    drain([consumer], lambda: set(seen) >= values, lambda c, m: seen.append(int(m.value())), "the records")
    consumer.poll(0.05)
    consumer.commit_sync(10)
    return seen


def wait_empty(broker: BrokerProcess, group: str) -> None:
    eventually(
        lambda: rows(ok(broker, "--describe", "--group", group, "--state").stdout)[0]["STATE"] == "Empty",
        timeout=WAIT_S, what=f"{group} to have no members",
    )


def test_describe_shows_the_members_their_assignments_and_the_group_state(
    broker: BrokerProcess, share_consumer: Callable[..., ShareConsumer]
) -> None:
    topic = unique("members")
    group = share_group(broker, topic, partitions=2)
    consumers = [share_consumer(group, topic, **{"client.id": f"worker-{i}"}) for i in range(2)]

    def members() -> list[dict[str, str]]:
        for consumer in consumers:  # keeps them heartbeating while the command runs
            consumer.poll(0.05)
        return rows(ok(broker, "--describe", "--group", group, "--members").stdout)

    eventually(lambda: len(members()) == 2 and all(m["#PARTITIONS"] == "1" for m in members()),
               timeout=WAIT_S, what="both members with a partition each")
    table = members()
    assert {m["GROUP"] for m in table} == {group}
    assert {m["CLIENT-ID"] for m in table} == {"worker-0", "worker-1"}
    assert all("127.0.0.1" in m["HOST"] and m["CONSUMER-ID"] for m in table)
    assert sorted(m["ASSIGNMENT"] for m in table) == [f"{topic}:0", f"{topic}:1"]
    verbose = rows(ok(broker, "--describe", "--group", group, "--members", "--verbose").stdout)
    assert all(int(m["MEMBER-EPOCH"]) > 0 for m in verbose)

    [state] = rows(ok(broker, "--describe", "--group", group, "--state").stdout)
    assert (state["GROUP"], state["STATE"], state["#MEMBERS"]) == (group, "Stable", "2")
    assert state["COORDINATOR (ID)"].startswith("127.0.0.1:") and state["COORDINATOR (ID)"].endswith(" (0)")
    assert group in ok(broker, "--list").stdout.split()
    listed = {r["GROUP"]: r["STATE"] for r in rows(ok(broker, "--list", "--state").stdout)}
    assert listed[group] == "Stable"
    assert group in {r["GROUP"] for r in rows(ok(broker, "--list", "--state", "stable").stdout)}
    assert group not in {r["GROUP"] for r in rows(ok(broker, "--list", "--state", "Empty").stdout)}

    for consumer in consumers:
        consumer.close()
    wait_empty(broker, group)
    result = ok(broker, "--describe", "--group", group, "--members")
    assert rows(result.stdout) == []
    assert f"Share group '{group}' has no active members." in result.stderr
    assert group in {r["GROUP"] for r in rows(ok(broker, "--list", "--state", "Empty").stdout)}


def test_start_offset_and_lag_move_as_records_are_acknowledged(
    broker: BrokerProcess, share_consumer: Callable[..., ShareConsumer]
) -> None:
    topic = unique("lag")
    group = share_group(broker, topic, partitions=1)
    produce(broker.bootstrap, topic, range(30), partitions=1)
    one_line_failure(fjord(broker, "--describe", "--group", group), 1, group, "GROUP_ID_NOT_FOUND")
    consumer = share_consumer(group, topic, **{"share.acknowledgement.mode": "explicit"})
    batch: list[Message] = []
    eventually(lambda: bool(batch.extend(consumer.poll(0.2)) or batch), timeout=WAIT_S, what="a first batch")
    # Acquired, not yet acknowledged: the start offset stays at 0 and every record still counts as lag.
    eventually(lambda: offsets(broker, group) == {0: ("0", "30")}, timeout=WAIT_S, what="the acquired window")

    for message in batch:
        consumer.acknowledge(message, AcknowledgeType.ACCEPT)
    consumer.commit_sync(10)
    acked = len(batch)
    eventually(lambda: offsets(broker, group) == {0: (str(acked), str(30 - acked))}, timeout=WAIT_S,
               what=f"the start offset past the {acked} acknowledged records")

    def accept(c: ShareConsumer, m: Message) -> None:
        c.acknowledge(m, AcknowledgeType.ACCEPT)
        batch.append(m)

    drain([consumer], lambda: len(batch) >= 30, accept, "the rest of the records")
    consumer.commit_sync(10)
    eventually(lambda: offsets(broker, group) == {0: ("30", "0")}, timeout=WAIT_S, what="no lag left")
    consumer.close()
    produce(broker.bootstrap, topic, range(30, 40), partitions=1)
    assert offsets(broker, group) == {0: ("30", "10")}, "new records are lag until the group reads them"
    verbose = rows(ok(broker, "--describe", "--group", group, "--verbose").stdout)
    assert [(r["LEADER-EPOCH"], r["START-OFFSET"], r["LAG"]) for r in verbose] == [("0", "30", "10")]


def test_a_reset_is_where_the_next_consumer_starts(
    broker: BrokerProcess, share_consumer: Callable[..., ShareConsumer]
) -> None:
    topic = unique("reset")
    group = share_group(broker, topic, partitions=1)
    produce(broker.bootstrap, topic, range(20), partitions=1)
    first = share_consumer(group, topic)
    consume_all(first, set(range(20)))
    eventually(lambda: offsets(broker, group) == {0: ("20", "0")}, timeout=WAIT_S, what="everything acknowledged")

    refused = fjord(broker, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute")
    one_line_failure(refused, 1, group, "not empty")
    first.close()
    wait_empty(broker, group)

    plan = rows(ok(broker, "--reset-offsets", "--group", group, "--topic", topic, "--to-offset", "5",
                   "--dry-run").stdout)
    assert plan == [{"GROUP": group, "TOPIC": topic, "PARTITION": "0", "NEW-OFFSET": "5"}]
    assert offsets(broker, group) == {0: ("20", "0")}, "a dry run changed the offsets"
    ok(broker, "--reset-offsets", "--group", group, "--topic", f"{topic}:0", "--to-offset", "5", "--execute")
    assert offsets(broker, group) == {0: ("5", "15")}

    second = share_consumer(group, topic)
    seen = consume_all(second, set(range(5, 20)))
    assert sorted(seen) == list(range(5, 20)), "the next consumer did not start at the reset offset"
    second.close()
    wait_empty(broker, group)

    earliest = rows(ok(broker, "--reset-offsets", "--group", group, "--all-topics", "--to-earliest",
                       "--execute").stdout)
    assert [r["NEW-OFFSET"] for r in earliest] == ["0"]
    assert offsets(broker, group) == {0: ("0", "20")}
    latest = rows(ok(broker, "--reset-offsets", "--group", group, "--topic", topic, "--to-latest", "--execute").stdout)
    assert [r["NEW-OFFSET"] for r in latest] == ["20"]
    future = fjord(broker, "--reset-offsets", "--group", group, "--topic", topic, "--to-datetime",
                   "2999-01-01T00:00:00.000", "--dry-run")
    assert [r["NEW-OFFSET"] for r in rows(future.stdout)] == ["20"] and "latest offset" in future.stderr
    past = rows(ok(broker, "--reset-offsets", "--group", group, "--topic", topic, "--to-datetime",
                   "2000-01-01T00:00:00.000Z", "--dry-run").stdout)
    assert [r["NEW-OFFSET"] for r in past] == ["0"]
    beyond = ok(broker, "--reset-offsets", "--group", group, "--topic", topic, "--to-offset", "99", "--dry-run")
    assert [r["NEW-OFFSET"] for r in rows(beyond.stdout)] == ["20"], "an offset past the log end was not kept in it"


def test_offsets_and_the_group_are_deleted(
    broker: BrokerProcess, share_consumer: Callable[..., ShareConsumer]
) -> None:
    topic = unique("delete")
    group = share_group(broker, topic, partitions=2)
    produce(broker.bootstrap, topic, range(10), partitions=2)
    consumer = share_consumer(group, topic)
    consume_all(consumer, set(range(10)))
    eventually(lambda: offsets(broker, group) == {0: ("5", "0"), 1: ("5", "0")}, timeout=WAIT_S,
               what="both partitions acknowledged")
    one_line_failure(fjord(broker, "--delete", "--group", group), 1, group, "NON_EMPTY_GROUP")
    one_line_failure(fjord(broker, "--delete-offsets", "--group", group, "--topic", topic), 1, group,
                     "NON_EMPTY_GROUP")
    consumer.close()
    wait_empty(broker, group)

    missing = unique("absent-topic")
    partly = fjord(broker, "--delete-offsets", "--group", group, "--topic", topic, "--topic", missing)
    one_line_failure(partly, 1, group, missing, "UNKNOWN_TOPIC_OR_PARTITION")
    assert {r["TOPIC"]: r["STATUS"] for r in rows(partly.stdout)} == {
        topic: "Successful", missing: "Error: UNKNOWN_TOPIC_OR_PARTITION"}
    described = ok(broker, "--describe", "--group", group)
    assert rows(described.stdout) == [] and "has no offset information" in described.stderr

    deleted = ok(broker, "--delete", "--group", group)
    assert f"'{group}'" in deleted.stdout and "successful" in deleted.stdout
    assert group not in ok(broker, "--list").stdout.split()
    one_line_failure(fjord(broker, "--describe", "--group", group), 1, group, "GROUP_ID_NOT_FOUND")
    one_line_failure(fjord(broker, "--delete", "--group", group), 1, group, "not a share group")


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["--list", "--describe"], ["exactly one action"]),
        (["--describe"], ["--group"]),
        (["--describe", "--group", "g", "--members", "--state"], ["at most one"]),
        (["--list", "--state", "Rebalancing"], ["Rebalancing", "Empty, Stable, Dead"]),
        (["--reset-offsets", "--group", "g", "--to-earliest"], ["--dry-run", "--execute"]),
        (["--reset-offsets", "--group", "g", "--execute"], ["--to-earliest"]),
        (["--reset-offsets", "--group", "g", "--to-latest", "--to-earliest", "--execute"], ["--to-earliest"]),
        (["--reset-offsets", "--group", "g", "--topic", "t:x", "--to-latest", "--execute"], ["t:x"]),
        (["--reset-offsets", "--group", "g", "--to-datetime", "yesterday", "--dry-run"], ["yesterday"]),
        (["--delete-offsets", "--group", "g"], ["--topic"]),
        (["--delete", "--group", "g", "--all-groups"], ["--all-groups"]),
    ],
)
def test_bad_options_are_one_line_and_exit_2(broker: BrokerProcess, args: list[str], fragments: list[str]) -> None:
    one_line_failure(fjord(broker, *args), 2, *fragments)


def test_what_the_cluster_refuses_is_one_line_naming_the_group_or_topic(broker: BrokerProcess) -> None:
    group = unique("nobody")
    one_line_failure(fjord(broker, "--describe", "--group", group), 1, group, "GROUP_ID_NOT_FOUND")
    one_line_failure(fjord(broker, "--describe", "--group", group, "--members"), 1, group, "GROUP_ID_NOT_FOUND")
    topic = unique("no-topic")
    one_line_failure(fjord(broker, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest",
                           "--execute"), 1, topic, "UNKNOWN_TOPIC_OR_PARTITION")
    existing = unique("short")
    create_topic(broker.bootstrap, existing, 1)
    one_line_failure(fjord(broker, "--reset-offsets", "--group", group, "--topic", f"{existing}:3", "--to-earliest",
                           "--execute"), 1, existing, "no partition 3")
    unreachable = run_to_exit([sys.executable, "-m", "node.cli", "share-groups", "--bootstrap-server",
                               "127.0.0.1:1", "--list", "--timeout", "3000"])
    one_line_failure(unreachable, 1, "127.0.0.1:1")
