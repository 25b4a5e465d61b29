"""S3-only behaviour, against moto's real HTTP server: retries, bounded concurrency, pagination, chunked deletes,
multipart abort, and conditional puts whose response was lost.

Faults are injected by a small HTTP proxy on 127.0.0.1 between the store and moto, so the store sees genuine
503 SlowDown responses and genuinely dropped connections on real sockets. The proxy also checks each upload's
``x-amz-checksum-crc32c`` against its body and answers 400 BadDigest on a mismatch, as S3 and MinIO do: moto 5.2
stores the checksum it is given without checking it.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import aiohttp
import boto3
import crc32c
import pytest
from aiohttp import web
from botocore.awsrequest import AWSRequest

from storage.config import BucketURL
from storage.errors import ObjectExistsError, ObjectStoreError
from storage.objectstore.s3 import S3ObjectStore
from storage.objectstore.s3_signing import CHECKSUM_HEADER, sign_checksummed_puts_unsigned

if TYPE_CHECKING:
    from conftest import S3Server

_SLOW_DOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message><RequestId>fault</RequestId></Error>"
)
_BAD_DIGEST = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>BadDigest</Code><Message>The CRC32C you specified did not'
    b" match the calculated checksum.</Message><RequestId>proxy</RequestId></Error>"
)
_HOP_BY_HOP = {"content-length", "transfer-encoding", "connection", "keep-alive", "content-encoding", "date", "server"}


@dataclass
class _Fault:
    method: str | None
    action: str  # "slowdown": answer 503 without forwarding; "drop": close the connection; "lose": forward, then 503;
    # "flip": alter one byte of the body in transit
    remaining: int


@dataclass
class FaultProxy:
    """Forwards every request to ``upstream`` unless a queued fault matches it."""

    upstream: str
    faults: list[_Fault] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)  # each request's headers, lower-case names
    in_flight: int = 0
    max_in_flight: int = 0
    delay: float = 0.0
    endpoint: str = ""

    def inject(self, action: str, times: int, method: str | None = None) -> None:
        self.faults.append(_Fault(method, action, times))

    def _take(self, method: str) -> str | None:
        for fault in self.faults:
            if fault.remaining > 0 and fault.method in (None, method):
                fault.remaining -= 1
                return fault.action
        return None

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(f"{request.method} {request.path_qs}")
        self.headers.append({k.lower(): v for k, v in request.headers.items()})
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            body = await request.read()
            if self.delay:
                await asyncio.sleep(self.delay)
            action = self._take(request.method)
            if action == "flip" and body:
                body = bytes([body[0] ^ 1]) + body[1:]
            checksum = request.headers.get(CHECKSUM_HEADER)
            if checksum and checksum != base64.b64encode(crc32c.crc32c(body).to_bytes(4, "big")).decode():
                return web.Response(status=400, body=_BAD_DIGEST, content_type="application/xml")
            if action == "slowdown":
                return web.Response(status=503, body=_SLOW_DOWN, content_type="application/xml")
            if action == "drop":
                assert request.transport is not None
                request.transport.abort()
                return web.Response(status=500)
            headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")}
            async with (
                aiohttp.ClientSession(auto_decompress=False) as session,
                session.request(request.method, self.upstream + request.path_qs, headers=headers, data=body) as up,
            ):
                payload = await up.read()
                if action == "lose":
                    return web.Response(status=503, body=_SLOW_DOWN, content_type="application/xml")
                out_headers = {k: v for k, v in up.headers.items() if k.lower() not in _HOP_BY_HOP}
                return web.Response(status=up.status, body=payload, headers=out_headers)
        finally:
            self.in_flight -= 1


@pytest.fixture
async def proxy(s3_server: S3Server) -> AsyncIterator[FaultProxy]:
    fault_proxy = FaultProxy(upstream=s3_server.endpoint)
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_route("*", "/{tail:.*}", fault_proxy.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server = site._server
    assert server is not None
    port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
    fault_proxy.endpoint = f"http://127.0.0.1:{port}"
    try:
        yield fault_proxy
    finally:
        await runner.cleanup()


def _store(url: BucketURL, endpoint: str, **kwargs: Any) -> S3ObjectStore:
    options: dict[str, Any] = {"retry_base_delay": 0.01, "retry_max_delay": 0.05, "seed": 1}
    options.update(kwargs)
    return S3ObjectStore(
        url.bucket,
        region=url.region,
        endpoint=endpoint,
        path_style=True,
        access_key=url.access_key,
        secret_key=url.secret_key,
        **options,
    )


async def test_slow_down_responses_are_retried_until_success(proxy: FaultProxy, s3_bucket_url: BucketURL) -> None:
    store = _store(s3_bucket_url, proxy.endpoint, max_retries=5)
    try:
        proxy.inject("slowdown", 3, method="PUT")
        await store.put("retry/put", b"payload")
        proxy.inject("slowdown", 2, method="GET")
        assert await store.get("retry/put") == b"payload"
        assert store.retries == 5
        assert store.stats.puts == 4  # every attempt is a billed request
    finally:
        await store.close()


async def test_dropped_connections_are_retried(proxy: FaultProxy, s3_bucket_url: BucketURL) -> None:
    store = _store(s3_bucket_url, proxy.endpoint, max_retries=3)
    try:
        await store.put("retry/drop", b"abc")
        proxy.inject("drop", 2, method="GET")
        assert await store.get_tail("retry/drop", 2) == (b"bc", 3)
        # aiohttp itself retries once when a pooled keep-alive connection dies, so the store may see one or both.
        assert len([r for r in proxy.requests if r.startswith("GET")]) == 3
        assert 1 <= store.retries <= 2
    finally:
        await store.close()


async def test_retries_are_bounded_and_the_error_names_bucket_and_key(
    proxy: FaultProxy, s3_bucket_url: BucketURL
) -> None:
    store = _store(s3_bucket_url, proxy.endpoint, max_retries=2)
    try:
        proxy.inject("slowdown", 100, method="PUT")
        with pytest.raises(ObjectStoreError) as info:
            await store.put("retry/never", b"x")
        message = str(info.value)
        assert f"s3://{s3_bucket_url.bucket}/retry/never" in message
        assert "3 attempts" in message and "SlowDown" in message
        assert len([r for r in proxy.requests if r.startswith("PUT")]) == 3
    finally:
        await store.close()


async def test_conditional_put_whose_response_was_lost_still_succeeds(
    proxy: FaultProxy, s3_bucket_url: BucketURL
) -> None:
    """The first attempt lands but its response is lost; the retry sees 412 for its own object."""
    store = _store(s3_bucket_url, proxy.endpoint, max_retries=3)
    try:
        proxy.inject("lose", 1, method="PUT")
        await store.put("cond/lost", b"mine", if_none_match=True)
        assert await store.get("cond/lost") == b"mine"
        # Someone else's object under the key is still reported as existing.
        proxy.inject("lose", 1, method="PUT")
        with pytest.raises(ObjectExistsError):
            await store.put("cond/lost", b"theirs", if_none_match=True)
    finally:
        await store.close()


async def test_concurrency_is_bounded_by_the_semaphore(proxy: FaultProxy, s3_bucket_url: BucketURL) -> None:
    store = _store(s3_bucket_url, proxy.endpoint, max_concurrency=3)
    try:
        await store.put("c/k", b"v" * 100)
        proxy.delay = 0.02
        proxy.max_in_flight = 0
        results = await asyncio.gather(*(store.get("c/k", i, i + 1) for i in range(20)))
        assert results == [b"v"] * 20
        assert proxy.max_in_flight == 3
    finally:
        await store.close()


async def test_list_follows_continuation_and_delete_goes_in_chunks(s3_bucket_url: BucketURL) -> None:
    # S3 caps both at 1000 keys per request; smaller limits exercise the same paging without 1000 PUTs.
    keys = [f"many/{i:05d}" for i in range(25)]
    store = _store(s3_bucket_url, s3_bucket_url.endpoint or "", list_page_size=10, delete_batch=10)
    try:
        await asyncio.gather(*(store.put(key, b"") for key in keys))
        await store.put("other/key", b"")
        listed = await store.list("many/")
        assert [i.key for i in listed] == keys
        assert store.stats.lists == 3
        await store.delete([*keys, "many/absent"])
        assert store.stats.deletes == 3
        assert await store.list("many/") == []
        assert [i.key for i in await store.list("")] == ["other/key"]
    finally:
        await store.close()


async def test_failed_conditional_multipart_upload_is_aborted(s3_server: S3Server, s3_bucket_url: BucketURL) -> None:
    store = _store(
        s3_bucket_url, s3_bucket_url.endpoint or "", multipart_threshold=6 * 1024 * 1024, part_size=5 * 1024 * 1024
    )
    data = bytes(range(256)) * (44 * 1024)  # 11 MiB: parts of 5, 5 and 1 MiB
    try:
        await store.put("mp/obj", data, if_none_match=True)
        assert await store.get("mp/obj") == data
        head = s3_server.client().head_object(Bucket=s3_bucket_url.bucket, Key="mp/obj")
        assert head["ETag"].strip('"').endswith("-3")
        with pytest.raises(ObjectExistsError):
            await store.put("mp/obj", data[::-1], if_none_match=True)
        assert await store.get("mp/obj", 0, 256) == data[:256]
        uploads = s3_server.client().list_multipart_uploads(Bucket=s3_bucket_url.bucket)
        assert uploads.get("Uploads", []) == []
    finally:
        await store.close()


async def test_unreachable_endpoint_fails_with_a_named_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # Nothing listens on the port now: every attempt is refused.
    store = S3ObjectStore(
        "nowhere",
        endpoint=f"http://127.0.0.1:{port}",
        path_style=True,
        access_key="a",
        secret_key="b",
        max_retries=1,
        retry_base_delay=0.01,
        connect_timeout=1,
    )
    try:
        with pytest.raises(ObjectStoreError, match="s3://nowhere/some/key: get failed after 2 attempts"):
            await store.get("some/key")
    finally:
        await store.close()


async def test_puts_carry_the_crc32c_s3_checks_the_body_against(s3_server: S3Server, s3_bucket_url: BucketURL) -> None:
    # The checksum S3 verifies an upload against is Fjord's CRC32C (hardware, off the event loop when large), not
    # botocore's CRC32 on the loop; a small body, a large one and one given in parts all carry it.
    store = _store(s3_bucket_url, s3_bucket_url.endpoint or "")
    bodies: dict[str, bytes | list[bytes]] = {
        "small": b"a few bytes",
        "large": bytes(range(256)) * 4096,
        "parts": [b"first part ", b"second part"],
    }
    try:
        for key, body in bodies.items():
            await store.put(key, body)
    finally:
        await store.close()
    client = s3_server.client()
    for key, body in bodies.items():
        joined = body if isinstance(body, bytes) else b"".join(body)
        head = client.get_object_attributes(Bucket=s3_bucket_url.bucket, Key=key, ObjectAttributes=["Checksum"])
        expected = base64.b64encode(crc32c.crc32c(joined).to_bytes(4, "big")).decode()
        assert head["Checksum"]["ChecksumCRC32C"] == expected, key
        assert client.get_object(Bucket=s3_bucket_url.bucket, Key=key)["Body"].read() == joined


def _signed_headers(headers: dict[str, str]) -> list[str]:
    return headers["authorization"].split("SignedHeaders=")[1].split(",")[0].split(";")


async def test_puts_over_plain_http_keep_their_body_hash_beside_the_crc32c(
    proxy: FaultProxy, s3_server: S3Server, s3_bucket_url: BucketURL
) -> None:
    # Over plain http a PUT's body stays bound to its signature by its SHA-256: a CRC32C can be forged by whoever
    # rewrites the traffic. The checksum header is signed beside it, and S3 checks the body against it. Multipart
    # parts (checksummed by botocore) and DeleteObjects are signed with their body's SHA-256 too.
    store = _store(s3_bucket_url, proxy.endpoint, multipart_threshold=6 * 1024 * 1024, part_size=5 * 1024 * 1024)
    large = bytes(range(256)) * 4096
    multipart = bytes(range(251)) * (28 * 1024)  # about 6.9 MiB: a 5 MiB part and a smaller one
    try:
        await store.put("signing/small", b"a few bytes")
        await store.put("signing/large", large)
        puts = [h for r, h in zip(proxy.requests, proxy.headers, strict=True) if r.startswith("PUT")]
        assert [h["x-amz-content-sha256"] for h in puts] == [
            hashlib.sha256(b"a few bytes").hexdigest(),
            hashlib.sha256(large).hexdigest(),
        ]
        for headers in puts:
            assert {CHECKSUM_HEADER, "x-amz-content-sha256"} <= set(_signed_headers(headers))
        assert await store.get("signing/small") == b"a few bytes"
        assert await store.get("signing/large") == large

        proxy.requests.clear()
        proxy.headers.clear()
        await store.put("signing/multipart", multipart, if_none_match=True)
        await store.delete(["signing/small"])
        parts = [h for r, h in zip(proxy.requests, proxy.headers, strict=True) if "partNumber=" in r]
        assert [h["x-amz-content-sha256"] for h in parts] == [
            hashlib.sha256(multipart[:5242880]).hexdigest(),
            hashlib.sha256(multipart[5242880:]).hexdigest(),
        ]
        delete = next(h for r, h in zip(proxy.requests, proxy.headers, strict=True) if r.startswith("POST /"))
        assert len(delete["x-amz-content-sha256"]) == 64  # the hex SHA-256 of the request's XML
        assert await store.get("signing/multipart") == multipart
    finally:
        await store.close()
    # Another botocore client in the same process still hashes its PUT bodies, checksum or not.
    proxy.headers.clear()
    other = boto3.client(
        "s3",
        endpoint_url=proxy.endpoint,
        region_name=s3_bucket_url.region,
        aws_access_key_id=s3_bucket_url.access_key,
        aws_secret_access_key=s3_bucket_url.secret_key,
    )
    checksum = _crc32c(b"other")
    # In a thread: the proxy answers on this test's event loop.
    await asyncio.to_thread(
        other.put_object, Bucket=s3_bucket_url.bucket, Key="signing/other", Body=b"other", ChecksumCRC32C=checksum
    )
    assert proxy.headers[-1]["x-amz-content-sha256"] == hashlib.sha256(b"other").hexdigest()


def test_puts_over_https_are_signed_with_their_crc32c_instead_of_a_body_hash(s3_bucket_url: BucketURL) -> None:
    # What the store's hook does to a PutObject carrying Fjord's CRC32C, through botocore's own S3 signer: over https
    # (TLS guards the body) the body is not hashed, as botocore does for bodies it checksums itself; over http, or
    # without the checksum, it is.
    client = boto3.client(
        "s3",
        endpoint_url="https://127.0.0.1:9",  # never connected: the request is only signed
        region_name=s3_bucket_url.region,
        aws_access_key_id=s3_bucket_url.access_key,
        aws_secret_access_key=s3_bucket_url.secret_key,
    )
    sign_checksummed_puts_unsigned(client)
    signer = client._request_signer

    def content_hash(url: str, body: bytes, checksum: bool) -> str:
        headers = {CHECKSUM_HEADER: _crc32c(body)} if checksum else {}
        request = AWSRequest(method="PUT", url=url, data=body, headers=headers)
        request.context["client_config"] = client.meta.config  # as a call's request context carries it
        signer.sign("PutObject", request)
        return str(request.headers["X-Amz-Content-SHA256"])

    body = b"records"
    assert content_hash("https://127.0.0.1:9/bucket/key", body, checksum=True) == "UNSIGNED-PAYLOAD"
    assert content_hash("http://127.0.0.1:9/bucket/key", body, checksum=True) == hashlib.sha256(body).hexdigest()
    assert content_hash("https://127.0.0.1:9/bucket/key", body, checksum=False) == hashlib.sha256(body).hexdigest()


def _crc32c(body: bytes) -> str:
    return base64.b64encode(crc32c.crc32c(body).to_bytes(4, "big")).decode()


async def test_a_put_body_altered_in_transit_is_refused_and_never_stored(
    proxy: FaultProxy, s3_server: S3Server, s3_bucket_url: BucketURL
) -> None:
    store = _store(s3_bucket_url, proxy.endpoint, max_retries=3)
    body = bytes(range(256)) * 1024
    try:
        proxy.inject("flip", 1, method="PUT")
        with pytest.raises(ObjectStoreError) as info:
            await store.put("signing/tampered", body)
        message = str(info.value)
        assert f"s3://{s3_bucket_url.bucket}/signing/tampered: put failed" in message and "BadDigest" in message
        assert len([r for r in proxy.requests if r.startswith("PUT")]) == 1  # a refused body is not resent
        listed = s3_server.client().list_objects_v2(Bucket=s3_bucket_url.bucket, Prefix="signing/")
        assert listed.get("Contents", []) == []
        # The same object goes through once nothing alters it.
        await store.put("signing/tampered", body)
        assert await store.get("signing/tampered") == body
    finally:
        await store.close()
