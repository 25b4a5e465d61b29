"""The advertised ApiVersions table: issue 3's version requirements, handlers behind every key, v0 fallback."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from kio.schema.errors import ErrorCode

from testkit.node_process import BrokerProcess, WireClient, api_versions_request
from wire import codec, schema
from wire.api_versions import API_VERSIONS

# Issue 3: (api key, highest version in Apache Kafka 3.6, lowest version Kafka 4.0 still accepts).
REQUIRED = {
    18: ("ApiVersions", 3, 0), 3: ("Metadata", 12, 0), 0: ("Produce", 9, 3), 1: ("Fetch", 15, 4),
    2: ("ListOffsets", 8, 1), 23: ("OffsetForLeaderEpoch", 4, 2), 19: ("CreateTopics", 7, 2),
    20: ("DeleteTopics", 6, 1), 37: ("CreatePartitions", 3, 0), 21: ("DeleteRecords", 2, 0),
    32: ("DescribeConfigs", 4, 1), 33: ("AlterConfigs", 2, 0), 44: ("IncrementalAlterConfigs", 1, 0),
    60: ("DescribeCluster", 0, 0), 10: ("FindCoordinator", 4, 0), 11: ("JoinGroup", 9, 2), 14: ("SyncGroup", 5, 0),
    12: ("Heartbeat", 4, 0), 13: ("LeaveGroup", 5, 0), 8: ("OffsetCommit", 8, 2), 9: ("OffsetFetch", 8, 1),
    16: ("ListGroups", 4, 0), 15: ("DescribeGroups", 5, 0), 42: ("DeleteGroups", 2, 0), 47: ("OffsetDelete", 0, 0),
    22: ("InitProducerId", 4, 0), 61: ("DescribeProducers", 0, 0),
}
# The table may stay below 3.6's figure only where the issue's owner of that API has not finished it, so this list
# is kept explicit rather than silently loosened (none now: Fetch serves Kafka 4.2's v18).
BELOW_36_ALLOWED: set[int] = set()


@pytest.mark.parametrize("api_key", sorted(REQUIRED))
def test_table_meets_issue_requirements(api_key: int) -> None:
    name, kafka_36_max, kafka_40_floor = REQUIRED[api_key]
    entry = API_VERSIONS[api_key]
    assert entry.name == name
    assert entry.min_version <= kafka_40_floor
    if api_key not in BELOW_36_ALLOWED:
        assert entry.max_version >= kafka_36_max
    for version in range(entry.min_version, entry.max_version + 1):
        codec.request_class(api_key, version)  # kio can decode every version we would advertise


def test_every_advertised_version_is_answered(shared_broker: BrokerProcess, wire: Callable[[int], WireClient]) -> None:
    """Each advertised (key, version) gets a response of that version: a handler stands behind every entry."""
    client = wire(shared_broker.port)
    response = client.request(api_versions_request(3))
    assert response.error_code == ErrorCode.none
    advertised = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    for key in (18, 3, 19, 20, 37, 32, 33, 44, 60):  # this module's APIs are always served
        assert key in advertised
    for key, (low, high) in advertised.items():
        assert (low, high) == (API_VERSIONS[key].min_version, API_VERSIONS[key].max_version)
        for version in sorted({low, high}):
            fields: dict[str, object] = {"acks": -1, "timeout": 1000} if key == 0 else {}
            if key == 18 and version >= 3:
                fields = {"client_software_name": "t", "client_software_version": "1"}
            request = schema.build(codec.request_class(key, version), **fields)
            correlation_id = client.send(request)
            got, _ = client.receive(key, version)
            assert got == correlation_id, (key, version)


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_every_api_versions_version_is_answered(
    version: int, shared_broker: BrokerProcess, wire: Callable[[int], WireClient]
) -> None:
    response = wire(shared_broker.port).request(api_versions_request(version))
    assert response.error_code == ErrorCode.none
    assert any(k.api_key == 3 and k.max_version == API_VERSIONS[3].max_version for k in response.api_keys)


def test_newer_api_versions_gets_v0_fallback(shared_broker: BrokerProcess, wire: Callable[[int], WireClient]) -> None:
    client = wire(shared_broker.port)
    # kio has no v5 yet: a v4 frame with version 5 in its header (size i32, key i16, version i16, correlation id).
    frame = bytearray(codec.encode_request(api_versions_request(4), 77, "fjord-tests"))
    frame[6:8] = (5).to_bytes(2, "big")
    client.send_raw(bytes(frame))
    correlation_id = 77
    got, body = client.receive(18, 0)  # answered as v0, whatever version was asked
    assert got == correlation_id
    assert body.error_code == ErrorCode.unsupported_version
    assert any(k.api_key == 18 and k.max_version == 4 for k in body.api_keys)
    # The connection stays usable: the client retries with a version from the list.
    assert client.request(api_versions_request(3)).error_code == ErrorCode.none


def test_invalid_client_software_name_is_invalid_request(
    shared_broker: BrokerProcess, wire: Callable[[int], WireClient]
) -> None:
    request = schema.build(codec.request_class(18, 3), client_software_name="bad name!", client_software_version="1")
    assert wire(shared_broker.port).request(request).error_code == ErrorCode.invalid_request
