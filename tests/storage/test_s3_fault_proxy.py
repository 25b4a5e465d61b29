"""testkit/s3_fault_proxy.py against real clients: boto3 with its retries off sees each fault exactly as S3 sends
it, and the project's own S3ObjectStore (aiobotocore) rides every fault out and returns the right bytes."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    EndpointConnectionError,
    ReadTimeoutError,
    ResponseStreamingError,
)
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from storage.objectstore.metrics import StoreStatsCollector
from storage.objectstore.s3 import S3ObjectStore
from testkit.s3_fault_proxy import S3FaultProxy
from tests.conftest import S3_ACCESS_KEY, S3_REGION, S3_SECRET_KEY, S3Server


@pytest.fixture
def proxy(s3_server: S3Server) -> Iterator[S3FaultProxy]:
    with S3FaultProxy(s3_server.endpoint, seed=7) as running:
        yield running


@pytest.fixture
def bucket(s3_server: S3Server) -> str:
    return s3_server.create_bucket("proxy")


def _raw_client(endpoint: str, read_timeout: float = 10.0) -> Any:
    """boto3 without retries: every fault reaches the test."""
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=S3_REGION,
        aws_access_key_id=S3_ACCESS_KEY,
        aws_secret_access_key=S3_SECRET_KEY,
        config=Config(retries={"total_max_attempts": 1}, read_timeout=read_timeout, connect_timeout=2),
    )


def _store(proxy: S3FaultProxy, bucket: str, **kwargs: Any) -> S3ObjectStore:
    return S3ObjectStore(
        bucket,
        endpoint=proxy.endpoint,
        path_style=True,
        access_key=S3_ACCESS_KEY,
        secret_key=S3_SECRET_KEY,
        retry_base_delay=0.01,
        retry_max_delay=0.05,
        seed=1,
        **kwargs,
    )


def test_without_faults_requests_pass_through_unchanged(proxy: S3FaultProxy, bucket: str) -> None:
    client = _raw_client(proxy.endpoint)
    body = os.urandom(3 * 1024 * 1024)  # large enough for botocore's Expect: 100-continue
    client.put_object(Bucket=bucket, Key="a", Body=body)
    assert client.get_object(Bucket=bucket, Key="a")["Body"].read() == body
    assert client.get_object(Bucket=bucket, Key="a", Range="bytes=10-19")["Body"].read() == body[10:20]
    assert client.head_object(Bucket=bucket, Key="a")["ContentLength"] == len(body)
    assert [o["Key"] for o in client.list_objects_v2(Bucket=bucket)["Contents"]] == ["a"]
    assert proxy.stats.forwarded == proxy.stats.requests == 5


@pytest.mark.parametrize(
    ("field", "code", "status"), [("slow_down", "SlowDown", 503), ("internal_error", "InternalError", 500)]
)
def test_error_answers_carry_s3s_code_and_status(
    proxy: S3FaultProxy, bucket: str, field: str, code: str, status: int
) -> None:
    client = _raw_client(proxy.endpoint)
    client.put_object(Bucket=bucket, Key="k", Body=b"v")
    setattr(proxy.faults, field, 1.0)
    for operation, kwargs in (("get_object", {}), ("put_object", {"Body": b"w"})):
        with pytest.raises(ClientError) as raised:
            getattr(client, operation)(Bucket=bucket, Key="k", **kwargs)
        assert raised.value.response["Error"]["Code"] == code
        assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == status
        assert raised.value.response["ResponseMetadata"]["RequestId"]
    proxy.clear()
    assert client.get_object(Bucket=bucket, Key="k")["Body"].read() == b"v"  # the refused put never reached S3


def test_refused_writes_fail_while_reads_are_answered(proxy: S3FaultProxy, bucket: str) -> None:
    client = _raw_client(proxy.endpoint)
    client.put_object(Bucket=bucket, Key="kept", Body=b"before")
    proxy.refuse_writes()
    assert client.get_object(Bucket=bucket, Key="kept")["Body"].read() == b"before"
    assert client.head_object(Bucket=bucket, Key="kept")["ContentLength"] == 6
    for write in (
        lambda: client.put_object(Bucket=bucket, Key="kept", Body=b"after"),
        lambda: client.delete_object(Bucket=bucket, Key="kept"),
        lambda: client.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "kept"}]}),
    ):
        with pytest.raises(ClientError) as refused:
            write()
        assert refused.value.response["Error"]["Code"] == "InternalError"
    assert [o["Key"] for o in client.list_objects_v2(Bucket=bucket)["Contents"]] == ["kept"]
    proxy.clear()
    client.put_object(Bucket=bucket, Key="kept", Body=b"after")
    assert client.get_object(Bucket=bucket, Key="kept")["Body"].read() == b"after"


def test_a_reset_mid_body_cuts_the_response_off(proxy: S3FaultProxy, bucket: str) -> None:
    client = _raw_client(proxy.endpoint)
    client.put_object(Bucket=bucket, Key="k", Body=b"x" * 100_000)
    proxy.faults.reset_mid_body = 1.0
    with pytest.raises(ResponseStreamingError):
        client.get_object(Bucket=bucket, Key="k")["Body"].read()
    assert proxy.stats.resets == 1


def test_a_refusing_outage_refuses_then_ends_on_time(proxy: S3FaultProxy, bucket: str) -> None:
    client = _raw_client(proxy.endpoint)
    proxy.outage(1.5, mode="refuse")
    with pytest.raises(EndpointConnectionError):
        client.list_objects_v2(Bucket=bucket)
    started = time.monotonic()
    while True:  # the outage ends by itself, on the same port
        try:
            client.list_objects_v2(Bucket=bucket)
            break
        except EndpointConnectionError:
            assert time.monotonic() - started < 5, "the outage did not end"
            time.sleep(0.1)
    assert 0.5 < time.monotonic() - started < 3


def test_an_armed_outage_begins_with_the_first_matching_request(proxy: S3FaultProxy, bucket: str) -> None:
    client = _raw_client(proxy.endpoint)
    client.put_object(Bucket=bucket, Key="wal/a", Body=b"x")
    client.put_object(Bucket=bucket, Key="other", Body=b"y")
    proxy.outage_at(rf"^GET /{bucket}/wal/", 30.0)
    assert client.get_object(Bucket=bucket, Key="other")["Body"].read() == b"y"
    client.put_object(Bucket=bucket, Key="wal/b", Body=b"z")  # not a GET: no outage yet
    assert not proxy.outage_started.is_set() and not proxy.in_outage
    with pytest.raises((EndpointConnectionError, ConnectionClosedError)):
        client.get_object(Bucket=bucket, Key="wal/a")
    assert proxy.outage_started.is_set() and proxy.in_outage
    with pytest.raises(EndpointConnectionError):
        client.get_object(Bucket=bucket, Key="other")
    proxy.end_outage()
    assert client.get_object(Bucket=bucket, Key="wal/a")["Body"].read() == b"x"  # fired once, not re-armed


def test_a_black_holed_request_is_never_answered(proxy: S3FaultProxy, bucket: str) -> None:
    client = _raw_client(proxy.endpoint, read_timeout=0.5)
    proxy.outage(3.0, mode="blackhole")
    started = time.monotonic()
    with pytest.raises((ReadTimeoutError, ConnectionClosedError)):
        client.list_objects_v2(Bucket=bucket)
    assert time.monotonic() - started >= 0.5
    proxy.end_outage()
    client.list_objects_v2(Bucket=bucket)


def test_delays_hold_requests(proxy: S3FaultProxy, bucket: str) -> None:
    client = _raw_client(proxy.endpoint)
    proxy.faults.delay, proxy.faults.delay_max_s = 1.0, 0.3
    started = time.monotonic()
    for _ in range(4):
        client.list_objects_v2(Bucket=bucket)
    assert proxy.stats.delays == 4
    assert time.monotonic() - started > 0.1


async def test_the_object_store_rides_out_slow_downs_errors_and_resets(proxy: S3FaultProxy, bucket: str) -> None:
    store = _store(proxy, bucket, max_retries=30)
    payloads = {f"obj-{i}": os.urandom(20_000 + i) for i in range(12)}
    proxy.faults.slow_down, proxy.faults.internal_error, proxy.faults.reset_mid_body = 0.3, 0.1, 0.3
    try:
        for key, data in payloads.items():
            await store.put(key, data)
        for key, data in payloads.items():
            assert await store.get(key) == data
            assert await store.get(key, 100, 5000) == data[100:5000]
    finally:
        await store.close()
    assert proxy.stats.slow_downs and proxy.stats.internal_errors and proxy.stats.resets
    assert store.retries >= proxy.stats.slow_downs + proxy.stats.internal_errors
    # What an operator scrapes: every failed attempt by operation and S3's error code, and the retries.
    registry = CollectorRegistry()
    registry.register(StoreStatsCollector(lambda: store.stats))
    scraped = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        for sample in family.samples
    }
    errors = {labels: value for (name, labels), value in scraped.items() if name == "fjord_object_store_errors_total"}
    by_code: dict[str, float] = {}
    for labels, value in errors.items():
        by_code[dict(labels)["code"]] = by_code.get(dict(labels)["code"], 0) + value
    assert by_code["SlowDown"] == proxy.stats.slow_downs
    assert by_code["InternalError"] == proxy.stats.internal_errors
    assert by_code["reset"] == proxy.stats.resets
    assert scraped[("fjord_object_store_retries_total", ())] == store.retries
    assert ("fjord_object_store_errors_total", (("code", "SlowDown"), ("operation", "put"))) in scraped
