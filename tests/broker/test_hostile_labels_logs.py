"""A hostile client cannot shape a broker's ``/metrics`` or its log, with a real broker process.

What a client sends (a SASL mechanism name, an API key, a client id, the names in its requests) reaches metric
labels and log lines. An attacker with network access tries both: a hundred failed SaslHandshakes with distinct
30 KiB mechanism names and a hundred unknown API keys must leave ``/metrics`` about the size it was, with labels
from closed sets only (known mechanisms and API names, else ``other``); and a user with no rights asking for names
that hold a newline, a forged log line and an ANSI escape (Metadata, DescribeGroups, InitProducerId,
FindCoordinator, a failed login, a client id) must not add a line to the broker log that does not start with the
log format's timestamp and level, while the name still appears in the log, escaped and capped. Requests for a topic
that does not exist (Produce, Fetch, OffsetCommit) add no series either.
"""

from __future__ import annotations

import re
import struct
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from testkit.node_process import BrokerProcess, WireClient, start_broker
from testkit.waiting import eventually
from tests.broker.acl_clients import sasl_acl_overrides
from tests.broker.kafka_clients import fetch_request, produce_request
from tests.metrics_scrape import metrics_url, scrape
from wire import codec, schema
from wire.api_versions import API_VERSIONS, api_name
from wire.record_batch import Record, build_batch

PASSWORD = "hostile-pass-never-logged"
#: What each line of the broker's log starts with (``node.logging_setup.FORMAT``).
LOG_LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) ")
#: A line an attacker would like the log to show, after a newline, in ANSI red.
#: The ``mechanism`` labels a broker may show: Kafka's mechanisms, ``none`` (no handshake), ``SSL`` (client
#: certificates) and ``other`` for any name a client made up.
MECHANISM_LABELS = {"GSSAPI", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "none", "SSL", "other"}
FORGED = "2026-01-01 00:00:00.000 CRITICAL controller.controller: SCRAM credentials of user 'admin' DELETED"


@dataclass(frozen=True)
class HostileBroker:
    broker: BrokerProcess

    def port(self, listener: str) -> int:
        return self.broker.endpoints[listener][1]

    def metrics(self) -> str:
        return scrape(metrics_url(self.broker.log_text()))


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostileBroker]:
    overrides = sasl_acl_overrides(PASSWORD, "mallory") | {
        "connection.failed.authentication.delay.ms": "0",
        "metrics.port": "0",
    }
    broker = start_broker(tmp_path_factory.mktemp("hostile-broker"), overrides)
    try:
        yield HostileBroker(broker)
    finally:
        code = broker.stop()
    assert code == 0, broker.log_text()[-3000:]


def _evil(tag: str) -> str:
    """A name that, logged raw, would end the line, print a forged one in red and reset the colour."""
    return f"{tag}-{uuid.uuid4().hex[:6]}\n{FORGED}\x1b[31m\x1b[0m"


def _foreign_lines(log: str) -> list[str]:
    return [line for line in log.splitlines() if line and not LOG_LINE.match(line)]


def _label_values(text: str, label: str) -> set[str]:
    return set(re.findall(rf'[{{,]{label}="([^"]*)"', text))


def _handshake(client: WireClient, mechanism: str) -> Any:
    return client.request(schema.build(codec.request_class(17, 1), mechanism=mechanism))


def _unknown_api_frame(api_key: int, correlation_id: int) -> bytes:
    """A request header v1 for an API key no Kafka version has, with a few body bytes."""
    client_id = b"hostile"
    body = struct.pack(">hhih", api_key, 0, correlation_id, len(client_id)) + client_id + b"\x00" * 8
    return struct.pack(">i", len(body)) + body


def test_made_up_mechanisms_and_api_keys_do_not_grow_metrics(hostile: HostileBroker) -> None:
    before = hostile.metrics()
    for i in range(100):
        mechanism = f"M{i:03d}-" + "x" * (30 * 1024)
        with WireClient(hostile.port("SASL")) as client:
            assert _handshake(client, mechanism).error_code == ErrorCode.unsupported_sasl_mechanism
    for api_key in range(900, 1000):
        with WireClient(hostile.port("PLAINTEXT")) as client:
            client.send_raw(_unknown_api_frame(api_key, api_key))
            assert client.is_closed_by_peer(), f"api key {api_key} left the connection open"

    after = hostile.metrics()
    failures = re.search(
        r'^fjord_broker_authentication_failures_total\{listener="SASL",mechanism="other"\} (\S+)$', after, re.M
    )
    assert failures is not None and float(failures.group(1)) >= 100
    unknown = re.search(r'^fjord_broker_request_failures_total\{api="other"\} (\S+)$', after, re.M)
    assert unknown is not None and float(unknown.group(1)) >= 100
    assert _label_values(after, "mechanism") <= MECHANISM_LABELS
    assert _label_values(after, "api") <= {api_name(key) for key in API_VERSIONS} | {"other"}
    # A few new series (the other mechanism, the other API), not a hundred 30 KiB ones.
    assert len(after) - len(before) < 8 * 1024, f"/metrics grew from {len(before)} to {len(after)} bytes"
    assert max(len(line) for line in after.splitlines()) < 1024


def _login(client: WireClient, user: str) -> Any:
    assert _handshake(client, "PLAIN").error_code == ErrorCode.none
    token = f"\x00{user}\x00{PASSWORD}".encode()
    return client.request(schema.build(codec.request_class(36, 2), auth_bytes=token))


def _metadata(name: str) -> Any:
    cls = codec.request_class(3, 12)
    return schema.build(
        cls,
        topics=(schema.build_nested(cls, "topics", name=name, topic_id=uuid.UUID(int=0)),),
        allow_auto_topic_creation=True,
        include_topic_authorized_operations=False,
    )


def test_names_from_a_user_without_rights_are_logged_escaped(hostile: HostileBroker) -> None:
    topic, group, txn, key = _evil("topic"), _evil("group"), _evil("txn"), _evil("key")
    client_id = _evil("client")
    with WireClient(hostile.port("SASL")) as mallory:
        assert _login(mallory, "mallory").error_code == ErrorCode.none
        answer = mallory.request(_metadata(topic))
        assert [t.error_code for t in answer.topics] == [ErrorCode.topic_authorization_failed]
        groups = mallory.request(
            schema.build(codec.request_class(15, 5), groups=(group,), include_authorized_operations=False)
        )
        assert [g.error_code for g in groups.groups] == [ErrorCode.group_authorization_failed]
        init = mallory.request(
            schema.build(codec.request_class(22, 4), transactional_id=txn, transaction_timeout=timedelta(seconds=60))
        )
        assert init.error_code == ErrorCode.transactional_id_authorization_failed
        found = mallory.request(schema.build(codec.request_class(10, 4), key_type=1, coordinator_keys=(key,)))
        assert [c.error_code for c in found.coordinators] == [ErrorCode.transactional_id_authorization_failed]
        # A client id of the attacker's choosing (logged wherever a handler names who asked).
        correlation = mallory.send(_metadata(_evil("again")), client_id=client_id)
        got, _body = mallory.receive(3, 12)
        assert got == correlation
    user = _evil("user")
    with WireClient(hostile.port("SASL")) as forger:
        assert _login(forger, user).error_code == ErrorCode.sasl_authentication_failed

    def logged() -> str | None:
        log = hostile.broker.log_text()
        return log if all(_escaped(name)[:40] in log for name in (topic, group, txn, user)) else None

    log = eventually(logged, timeout=10, what="the denials and the failed login to be logged")
    assert _foreign_lines(log) == [], "the log gained lines that are not the broker's"
    assert "\x1b" not in log
    for name in (topic, group, txn):
        assert f":{_escaped(name)} (listener SASL)" in log, f"the denial of {name!r} is not logged escaped"
    # None of the refused names became a metric series.
    metrics = hostile.metrics()
    for name in (topic, group, txn, key, user, client_id):
        assert name.split("\n")[0] not in metrics


def _escaped(name: str) -> str:
    return name.replace("\\", "\\\\").replace("\n", "\\n").replace("\x1b", "\\x1b")


def test_a_long_hostile_name_is_capped_in_the_log(hostile: HostileBroker) -> None:
    name = f"long-{uuid.uuid4().hex[:6]}-" + "y" * 20_000
    with WireClient(hostile.port("SASL")) as mallory:
        assert _login(mallory, "mallory").error_code == ErrorCode.none
        answer = mallory.request(_metadata(name))
        assert [t.error_code for t in answer.topics] == [ErrorCode.topic_authorization_failed]
    lines = eventually(
        lambda: [line for line in hostile.broker.log_text().splitlines() if name[:20] in line],
        timeout=10,
        what="the denial of the long name to be logged",
    )
    assert all(len(line) < 2048 for line in lines), [len(line) for line in lines]
    assert any(f"...[{len(name) - 256} more characters]" in line for line in lines)


def test_requests_for_topics_that_do_not_exist_add_no_series(hostile: HostileBroker) -> None:
    """Even a super user's Produce, Fetch and OffsetCommit for a topic that does not exist leave no series: topic
    and group labels name the cluster's own objects once they exist, never a name a request made up."""
    ghost, group = f"ghost-{uuid.uuid4().hex[:8]}", f"ghost-group-{uuid.uuid4().hex[:8]}"
    batch = build_batch([Record(b"k", b"v", (), 0)])
    with WireClient(hostile.port("PLAINTEXT")) as admin:
        produced = admin.request(produce_request(ghost, 0, batch))
        assert produced.responses[0].partition_responses[0].error_code == ErrorCode.unknown_topic_or_partition
        fetched = admin.request(fetch_request(ghost, 0, 0))
        assert fetched.responses[0].partitions[0].error_code in (
            ErrorCode.unknown_topic_or_partition, ErrorCode.unknown_topic_id
        )
        cls = codec.request_class(8, 8)
        topic_cls = schema.field_entity(cls, "topics")
        part = schema.build_nested(topic_cls, "partitions", partition_index=0, committed_offset=1)
        entry = schema.build(topic_cls, name=ghost, partitions=(part,))
        commit = schema.build(cls, group_id=group, generation_id_or_member_epoch=-1, member_id="", topics=(entry,))
        loading = {
            ErrorCode.not_coordinator, ErrorCode.coordinator_not_available, ErrorCode.coordinator_load_in_progress
        }
        find = schema.build(codec.request_class(10, 4), key_type=0, coordinator_keys=(group,))

        def answered() -> ErrorCode | None:
            admin.request(find)  # as a client does first: the offsets topic is made then
            code = ErrorCode(admin.request(commit).topics[0].partitions[0].error_code)
            return None if code in loading else code

        code = eventually(answered, timeout=30, interval=0.2, what="the group coordinator to answer OffsetCommit")
        assert code == ErrorCode.unknown_topic_or_partition
    metrics = hostile.metrics()
    assert ghost not in metrics and group not in metrics
