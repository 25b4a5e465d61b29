"""A caller the CONTROLLER listener refuses cannot make it decode a body (issue 26), against a real controller process.

With an authorizer configured, the controller checks who asks from the request's header alone: a refused request is
answered CLUSTER_AUTHORIZATION_FAILED without its body being decoded, so ``User:ANONYMOUS`` (not a super user here)
sending a body that lies about its arrays is answered, not closed, and one sending an 8 MiB body of a million tiny
nested elements costs the controller the bytes it sent, not the objects they would decode into. The admin APIs,
answered item by item, read a refused body up to the pre-authentication bound and close the connection on a lie.
None of it logs a traceback, and the controller keeps serving.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from metadata.rpc import kafka_apis
from testkit.node_process import WireClient
from testkit.quorum_cluster import QuorumCluster
from testkit.waiting import eventually
from tests.broker.test_hostile_memory import MIB
from tests.hostile_bodies import claiming_body, frame, uvarint
from wire import codec, schema
from wire.codec import UnsupportedRequestError

#: The Kafka APIs a refused caller is answered on from the header (the admin APIs' refusals answer each item).
ANSWERED_FROM_HEADER = {
    kafka_apis.VOTE,
    kafka_apis.BEGIN_QUORUM_EPOCH,
    kafka_apis.END_QUORUM_EPOCH,
    kafka_apis.FETCH,
    kafka_apis.FETCH_SNAPSHOT,
    kafka_apis.BROKER_REGISTRATION,
    kafka_apis.BROKER_HEARTBEAT,
    kafka_apis.UNREGISTER_BROKER,
    kafka_apis.ALLOCATE_PRODUCER_IDS,
    kafka_apis.DESCRIBE_QUORUM,
    kafka_apis.DESCRIBE_CLUSTER,
}


@pytest.fixture(scope="module")
def controller(tmp_path_factory: pytest.TempPathFactory) -> Iterator[QuorumCluster]:
    cluster = QuorumCluster(
        tmp_path_factory.mktemp("unread"),
        size=1,
        overrides={
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:admin",  # not User:ANONYMOUS, whom a PLAINTEXT listener names
        },
    )
    cluster.start_all()
    port = cluster.voters[0].port

    def answers() -> bool:
        with WireClient(port, timeout=2) as client:
            return bool(client.request(schema.build(codec.request_class(18, 3))).error_code == ErrorCode.none)

    try:
        eventually(answers, timeout=30, retry_on=(OSError,), what="the controller to answer ApiVersions")
        yield cluster
    finally:
        code = cluster.stop(0)
        log = cluster.voters[0].log_text()
        assert code == 0, log[-3000:]
        assert "Traceback" not in log, log[log.index("Traceback") - 1000 :][:5000]


def _served(port: int) -> list[tuple[int, int]]:
    """(api key, highest version) of every Kafka API the controller lists (not its own stream RPCs)."""
    with WireClient(port) as client:
        versions = client.request(schema.build(codec.request_class(18, 3)))
    served = []
    for entry in versions.api_keys:
        try:
            codec.request_class(int(entry.api_key), int(entry.max_version))
        except UnsupportedRequestError:
            continue  # a stream RPC: checked before its JSON body is parsed since the first part of issue 26
        served.append((int(entry.api_key), int(entry.max_version)))
    return served


def _top_error(response: Any) -> ErrorCode | None:
    code = getattr(response, "error_code", None)
    return None if code is None else ErrorCode(code)


def _answer(port: int, api_key: int, version: int, data: bytes) -> Any | None:
    """The response to ``data`` on a fresh connection, or None when the controller closed it."""
    with WireClient(port, timeout=5) as client:
        client.send_raw(data)
        try:
            _, response = client.receive(api_key, version)
        except ConnectionError:
            return None
        return response


@pytest.mark.parametrize("nested", [False, True], ids=["top-level", "nested"])
def test_a_refused_caller_lying_about_its_arrays_is_answered_from_the_header(
    controller: QuorumCluster, nested: bool
) -> None:
    port = controller.voters[0].port
    served = dict(_served(port))
    assert set(served) >= ANSWERED_FROM_HEADER
    for api_key, version in sorted(served.items()):
        if api_key in (kafka_apis.API_VERSIONS, kafka_apis.SASL_HANDSHAKE, kafka_apis.SASL_AUTHENTICATE):
            continue  # read before any caller is known, as in Kafka
        body = claiming_body(codec.request_class(api_key, version), nested=nested)
        response = _answer(port, api_key, version, frame(api_key, version, body))
        if api_key in ANSWERED_FROM_HEADER:
            assert response is not None, f"api key {api_key} v{version}: closed instead of answered"
            assert _top_error(response) == ErrorCode.cluster_authorization_failed, (api_key, response)
        elif response is not None:  # an admin API: answered item by item, or closed on the lie
            assert _top_error(response) in (None, ErrorCode.cluster_authorization_failed), (api_key, response)
    with WireClient(port) as client:  # still serving
        describe = client.request(schema.build(codec.request_class(kafka_apis.DESCRIBE_QUORUM, 2)))
        assert describe.error_code == ErrorCode.cluster_authorization_failed


def _describe_quorum_of(partitions: int) -> bytes:
    """DescribeQuorum v2 naming one topic of ``partitions`` partitions: 5 bytes each on the wire."""
    topic = b"\x02x" + uvarint(partitions + 1) + b"\x00\x00\x00\x00\x00" * partitions + b"\x00"
    return frame(kafka_apis.DESCRIBE_QUORUM, 2, b"\x02" + topic + b"\x00")


def test_a_refused_body_costs_the_bytes_sent_not_what_it_would_decode_into(controller: QuorumCluster) -> None:
    voter = controller.voters[0]
    assert voter.proc is not None
    data = _describe_quorum_of(8 * MIB // 5)  # decoded, 1.7 million entities: several hundred MiB
    assert len(data) > 8 * MIB
    before = _peak_rss(voter.proc.pid)
    for _ in range(3):
        response = _answer(voter.port, kafka_apis.DESCRIBE_QUORUM, 2, data)
        assert response is not None and response.error_code == ErrorCode.cluster_authorization_failed
    grown = _peak_rss(voter.proc.pid) - before
    assert grown < 64 * MIB, f"the peak RSS grew by {grown / MIB:.0f} MiB for three refused 8 MiB bodies"


def _peak_rss(pid: int) -> int:
    """The process's peak resident set so far (VmHWM): decoded objects freed by the time of a later look count."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for {pid}")


def test_a_refused_admin_request_over_the_pre_authentication_bound_is_not_read(controller: QuorumCluster) -> None:
    """CreateAcls is answered item by item, so a refused one's body is read, but only up to what a client may
    send before authenticating (512 KiB): past it the connection closes, naming the principal."""
    port = controller.voters[0].port
    cls = codec.request_class(kafka_apis.CREATE_ACLS, 3)
    creation = schema.build_nested(cls, "creations", resource_type=2, resource_name="t", resource_pattern_type=3,
                                   principal="User:x", host="*", operation=2, permission_type=3)
    small = codec.encode_request(schema.build(cls, creations=(creation,)), 5, "acl-tool")
    response = _answer(port, kafka_apis.CREATE_ACLS, 3, small)
    assert response is not None
    assert [r.error_code for r in response.results] == [ErrorCode.cluster_authorization_failed]
    large = codec.encode_request(schema.build(cls, creations=(creation,) * 40_000), 6, "acl-tool")
    assert len(large) > 512 * 1024
    assert _answer(port, kafka_apis.CREATE_ACLS, 3, large) is None
    log = controller.voters[0].log_text()
    line = next(x for x in log.splitlines() if "-byte body is not read" in x)
    assert "User:ANONYMOUS" in line and str(len(large) - 4) in line
