"""S3 (or any S3-compatible server) through aiobotocore.

One client (one connection pool) per store, created on first use in the running event loop. Every HTTP request
holds a slot of a semaphore of ``s3_max_concurrency``, so a burst of reads cannot open unbounded connections or
starve writes of the pool. botocore's own retries are switched off: this module retries with exponential backoff
and full jitter (at most ``retry_max_delay`` apart, so a request resumes soon after S3 answers again), because it
must also retry failures botocore does not see (a body cut off mid-read) and must count what it retries.

An operator acts on episodes, not attempts: the first failure after a success logs one WARNING naming the bucket,
the operation and the error code, the rest of the episode's failures are counted in ``stats.errors`` by (operation,
code) and logged at DEBUG, and the first success after them logs one INFO with the episode's length.

Request accounting in ``stats`` follows S3's billing classes: PutObject, CreateMultipartUpload, UploadPart,
CompleteMultipartUpload and AbortMultipartUpload count as ``puts``; GetObject and HeadObject as ``gets``;
DeleteObjects as ``deletes``; ListObjectsV2 pages as ``lists``. Retried attempts count again: they are billed.
Over https a PUT's body is not hashed again with SHA-256 for its signature, as botocore does for the bodies it
checksums itself; over plain http it is (:mod:`.s3_signing`).
"""

from __future__ import annotations

import asyncio
import base64
import builtins
import contextlib
import functools
import hashlib
import logging
import random
import re
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import aiohttp
import crc32c
from aiobotocore.config import AioConfig
from aiobotocore.session import AioSession, get_session
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionError,
    HTTPClientError,
)

from storage.config import BucketURL, StorageConfig
from storage.errors import ObjectExistsError, ObjectNotFoundError, ObjectStoreError
from storage.objectstore import s3_errors
from storage.objectstore.base import (
    MULTIPART_THRESHOLD,
    ObjectData,
    ObjectInfo,
    ObjectStore,
    StoreStats,
    data_size,
    innermost,
    join_data,
)
from storage.objectstore.s3_signing import sign_checksummed_puts_unsigned
from storage.offload import offload

logger = logging.getLogger(__name__)

@functools.cache
def _shared_session() -> AioSession:
    """The process's one botocore session. A session loads S3's service model on its first client: about a second
    of CPU (more on a loaded machine), which a broker would otherwise pay again for every store it opens, a
    failover's WAL bucket among them, while a dead broker's partitions wait. Its clients stay apart (each its own
    config, credentials, connection pool and event handlers)."""
    return get_session()

T = TypeVar("T")

MIN_PART_SIZE = 5 * 1024 * 1024
"""S3 rejects non-final multipart parts smaller than this (EntityTooSmall)."""

MULTIPART_PARTS_IN_FLIGHT = 4
"""Parts of one multipart upload sent concurrently."""

DELETE_BATCH = 1000
"""DeleteObjects accepts at most this many keys per request."""

_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+)")


class S3ObjectStore:
    """An S3 bucket. ``endpoint`` selects an S3-compatible server (MinIO, moto); ``path_style`` addresses the
    bucket in the URL path instead of the host name, which such servers usually need."""

    def __init__(
        self,
        bucket: str,
        *,
        region: str = "us-east-1",
        endpoint: str | None = None,
        path_style: bool = False,
        access_key: str | None = None,
        secret_key: str | None = None,
        max_concurrency: int = 32,
        max_retries: int = 8,
        part_size: int = 16 * 1024 * 1024,
        multipart_threshold: int = MULTIPART_THRESHOLD,
        retry_base_delay: float = 0.05,
        retry_max_delay: float = 1.0,
        connect_timeout: float = 10.0,
        read_timeout: float = 60.0,
        list_page_size: int = 1000,
        delete_batch: int = DELETE_BATCH,
        seed: int | None = None,
    ) -> None:
        if not bucket:
            raise ValueError("S3 bucket name must not be empty")
        if max_concurrency <= 0:
            raise ValueError(f"s3.max.concurrency must be positive, got {max_concurrency}")
        if not 0 < delete_batch <= DELETE_BATCH:
            raise ValueError(f"delete batch must be within 1..{DELETE_BATCH}, got {delete_batch}")
        if not 0 < list_page_size <= 1000:
            raise ValueError(f"list page size must be within 1..1000, got {list_page_size}")
        if max_retries < 0:
            raise ValueError(f"s3.max.retries must not be negative, got {max_retries}")
        self._bucket = bucket
        self._region = region
        self._endpoint = endpoint
        self._access_key = access_key
        self._secret_key = secret_key
        self._max_retries = max_retries
        self._list_page_size = list_page_size
        self._delete_batch = delete_batch
        self._part_size = max(part_size, MIN_PART_SIZE)
        self._multipart_threshold = multipart_threshold
        self._retry_base = retry_base_delay
        self._retry_cap = retry_max_delay
        self._random = random.Random(seed)
        self._semaphore = asyncio.Semaphore(max_concurrency)
        self._config = AioConfig(
            region_name=region,
            s3={"addressing_style": "path" if path_style else "auto"},
            retries={"total_max_attempts": 1},
            max_pool_connections=max_concurrency,
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
        )
        self._session = _shared_session()
        self._client: Any = None
        self._client_lock = asyncio.Lock()
        self._exit_stack = contextlib.AsyncExitStack()
        self._closed = False
        self.stats = StoreStats()
        self.retries = 0
        """Attempts repeated after a retryable failure (for tests and metrics)."""
        self._failing_since: float | None = None  # monotonic start of the current episode of failed requests
        self._episode_failures = 0

    @classmethod
    def from_url(cls, url: BucketURL, config: StorageConfig) -> S3ObjectStore:
        return cls(
            url.bucket,
            region=url.region,
            endpoint=url.endpoint,
            path_style=url.path_style,
            access_key=url.access_key,
            secret_key=url.secret_key,
            max_concurrency=config.s3_max_concurrency,
            max_retries=config.s3_max_retries,
            part_size=config.object_part_size,
        )

    @property
    def name(self) -> str:
        return f"s3://{self._bucket}" + (f" at {self._endpoint}" if self._endpoint else "")

    @property
    def bucket(self) -> str:
        return self._bucket

    def _where(self, key: str) -> str:
        return f"s3://{self._bucket}/{key}"

    async def _get_client(self) -> Any:
        if self._client is not None:
            return self._client
        async with self._client_lock:
            if self._closed:
                raise ObjectStoreError(f"{self.name}: the store is closed")
            if self._client is None:
                try:
                    self._client = await self._exit_stack.enter_async_context(
                        self._session.create_client(
                            "s3",
                            region_name=self._region,
                            endpoint_url=self._endpoint,
                            aws_access_key_id=self._access_key,
                            aws_secret_access_key=self._secret_key,
                            config=self._config,
                        )
                    )
                    sign_checksummed_puts_unsigned(self._client)
                except (BotoCoreError, ValueError) as exc:
                    # A malformed endpoint or region: name the store, not a botocore internal.
                    raise ObjectStoreError(f"{self.name}: cannot create the S3 client: {exc}") from exc
            return self._client

    async def _request(self, what: str, key: str, attempt: Callable[[Any], Awaitable[T]]) -> T:
        """Runs ``attempt`` (one HTTP request, body included) with retries; ``what`` names it in errors."""
        client = await self._get_client()
        failures = 0
        while True:
            try:
                async with self._semaphore:
                    result = await attempt(client)
            except ClientError as exc:
                if not s3_errors.retryable_client_error(exc):
                    raise
                error: BaseException = exc
            except (HTTPClientError, ConnectionError, aiohttp.ClientError, TimeoutError, OSError) as exc:
                error = exc
            else:
                if self._failing_since is not None:
                    self._episode_over()
                return result
            failures += 1
            code = s3_errors.error_code(error)
            operation = s3_errors.operation(what)
            self.stats.errors[operation, code] = self.stats.errors.get((operation, code), 0) + 1
            if self._failing_since is None:
                self._failing_since = time.monotonic()
                self._episode_failures = 0
                # One line per episode: the rest of its failures are counted (metrics) and logged at DEBUG.
                logger.warning(
                    "S3 bucket %s: %s of %s failed with %s (%s); retrying with backoff until S3 answers",
                    self._bucket,
                    operation,
                    key,
                    code,
                    s3_errors.describe(error),
                )
            self._episode_failures += 1
            if failures > self._max_retries:
                raise ObjectStoreError(
                    f"{self._where(key)}: {what} failed after {failures} attempts: {s3_errors.describe(error)}"
                ) from error
            delay = self._random.uniform(0, min(self._retry_cap, self._retry_base * (2 ** (failures - 1))))
            self.retries += 1
            self.stats.retries += 1
            logger.debug(
                "%s: %s failed (%s); retry %d/%d in %.3fs",
                self._where(key),
                what,
                s3_errors.describe(error),
                failures,
                self._max_retries,
                delay,
            )
            await asyncio.sleep(delay)

    def _episode_over(self) -> None:
        assert self._failing_since is not None
        seconds = time.monotonic() - self._failing_since
        logger.info(
            "S3 bucket %s answers again after %.1fs of failures (%d failed attempts)",
            self._bucket,
            seconds,
            self._episode_failures,
        )
        self._failing_since = None

    def _wrap(self, what: str, key: str, exc: ClientError | BotoCoreError) -> ObjectStoreError:
        if isinstance(exc, ClientError) and s3_errors.code(exc) in s3_errors.NOT_FOUND_CODES:
            return ObjectNotFoundError(key, self.name)
        return ObjectStoreError(f"{self._where(key)}: {what} failed: {s3_errors.describe(exc)}")

    # --- writes -------------------------------------------------------------------------------------------------

    async def put(self, key: str, data: ObjectData, *, if_none_match: bool = False) -> None:
        if not isinstance(data, bytes | bytearray):
            # The request body (and its MD5) needs the object in one buffer: a large one's parts are joined off the
            # event loop (``storage.offload``).
            data = await offload(data_size(data), join_data, data)
        if len(data) > self._multipart_threshold:
            await self._put_multipart(key, data, if_none_match)
            return
        checksum = await _checksum(data)
        attempts = 0

        async def attempt(client: Any) -> None:
            nonlocal attempts
            attempts += 1
            self.stats.puts += 1
            extra = {"IfNoneMatch": "*"} if if_none_match else {}
            await client.put_object(
                Bucket=self._bucket, Key=key, Body=data, ChecksumAlgorithm="CRC32C", ChecksumCRC32C=checksum, **extra
            )

        try:
            await self._request("put", key, attempt)
        except ClientError as exc:
            if s3_errors.status(exc) == 412 and if_none_match:
                # A retried conditional put may find the object its own lost-response attempt wrote.
                if attempts > 1 and await self._holds(key, data):
                    logger.info("%s: conditional put landed on an earlier attempt", self._where(key))
                    self.stats.bytes_put += len(data)
                    return
                raise ObjectExistsError(key, self.name) from None
            raise self._wrap("put", key, exc) from exc
        except BotoCoreError as exc:
            raise self._wrap("put", key, exc) from exc
        self.stats.bytes_put += len(data)

    async def _holds(self, key: str, data: bytes) -> bool:
        """Whether ``key`` holds exactly ``data`` (single-part ETags are the content's MD5)."""
        try:
            head = await self._head(key)
        except ObjectNotFoundError:
            return False
        etag = str(head.get("ETag", "")).strip('"')
        return etag == hashlib.md5(data, usedforsecurity=False).hexdigest()

    async def _put_multipart(self, key: str, data: bytes, if_none_match: bool) -> None:
        where = self._where(key)

        async def create(client: Any) -> str:
            self.stats.puts += 1
            response = await client.create_multipart_upload(Bucket=self._bucket, Key=key)
            return str(response["UploadId"])

        try:
            upload_id = await self._request("create multipart upload", key, create)
        except (ClientError, BotoCoreError) as exc:
            raise self._wrap("create multipart upload", key, exc) from exc
        view = memoryview(data)
        offsets = range(0, len(data), self._part_size)
        logger.debug("%s: multipart upload %s of %d bytes in %d parts", where, upload_id, len(data), len(offsets))

        # Each part in flight is a copy of its slice of ``data``: bound them so a large object costs at most
        # MULTIPART_PARTS_IN_FLIGHT parts of extra memory, however many parts it has.
        in_flight = asyncio.Semaphore(MULTIPART_PARTS_IN_FLIGHT)

        async def upload(number: int, start: int) -> dict[str, Any]:
            async with in_flight:
                body = bytes(view[start : start + self._part_size])

                async def attempt(client: Any) -> dict[str, Any]:
                    self.stats.puts += 1
                    response = await client.upload_part(
                        Bucket=self._bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=body
                    )
                    return {"ETag": response["ETag"], "PartNumber": number}

                return await self._request(f"upload part {number}", key, attempt)

        async def complete(client: Any) -> None:
            self.stats.puts += 1
            extra = {"IfNoneMatch": "*"} if if_none_match else {}
            await client.complete_multipart_upload(
                Bucket=self._bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": parts}, **extra
            )

        try:
            parts = await _all_or_nothing([upload(n, s) for n, s in enumerate(offsets, 1)])
            await self._request("complete multipart upload", key, complete)
        except BaseException as exc:
            await self._abort(key, upload_id)
            if isinstance(exc, ClientError) and s3_errors.status(exc) == 412 and if_none_match:
                raise ObjectExistsError(key, self.name) from None
            if isinstance(exc, ClientError | BotoCoreError):
                raise self._wrap("multipart upload", key, exc) from exc
            raise
        self.stats.bytes_put += len(data)

    async def _abort(self, key: str, upload_id: str) -> None:
        async def attempt(client: Any) -> None:
            self.stats.puts += 1
            await client.abort_multipart_upload(Bucket=self._bucket, Key=key, UploadId=upload_id)

        try:
            await asyncio.shield(self._request("abort multipart upload", key, attempt))
        except (ClientError, BotoCoreError, ObjectStoreError, asyncio.CancelledError) as exc:
            # The bucket's lifecycle rule for incomplete uploads is the backstop; say what was left behind.
            logger.warning("%s: could not abort multipart upload %s: %s", self._where(key), upload_id, exc)

    def copies_from(self, source: ObjectStore) -> bool:
        """S3 copies between the buckets of one endpoint and account (CopyObject); not from another endpoint."""
        origin = innermost(source)
        return isinstance(origin, S3ObjectStore) and origin._account == self._account

    @property
    def _account(self) -> tuple[str | None, str, str | None]:
        return self._endpoint, self._region, self._access_key

    async def copy(self, source: ObjectStore, source_key: str, key: str) -> None:
        """One CopyObject: S3 copies the bytes itself (objects up to 5 GiB, which WAL and data objects are)."""
        origin = innermost(source)
        if not isinstance(origin, S3ObjectStore) or not self.copies_from(origin):
            raise ObjectStoreError(f"{self.name}: cannot copy {source_key} from {source.name} inside S3")

        async def attempt(client: Any) -> None:
            self.stats.copies += 1
            copied = {"Bucket": origin.bucket, "Key": source_key}
            await client.copy_object(Bucket=self._bucket, Key=key, CopySource=copied)

        try:
            await self._request("copy", key, attempt)
        except ClientError as exc:
            if s3_errors.code(exc) in s3_errors.NOT_FOUND_CODES:
                raise ObjectNotFoundError(source_key, origin.name) from exc
            raise self._wrap(f"copy from {origin._where(source_key)}", key, exc) from exc
        except BotoCoreError as exc:
            raise self._wrap(f"copy from {origin._where(source_key)}", key, exc) from exc

    async def delete(self, keys: Sequence[str]) -> None:
        unique = list(dict.fromkeys(keys))
        size = self._delete_batch
        chunks = [unique[i : i + size] for i in range(0, len(unique), size)]
        await _all_or_nothing([self._delete_chunk(chunk) for chunk in chunks])

    async def _delete_chunk(self, keys: builtins.list[str]) -> None:
        async def attempt(client: Any) -> builtins.list[Mapping[str, Any]]:
            self.stats.deletes += 1
            response = await client.delete_objects(
                Bucket=self._bucket, Delete={"Objects": [{"Key": k} for k in keys], "Quiet": True}
            )
            return list(response.get("Errors", []))

        try:
            errors = await self._request("delete", keys[0], attempt)
        except (ClientError, BotoCoreError) as exc:
            raise self._wrap(f"delete of {len(keys)} keys starting with", keys[0], exc) from exc
        failed = [e for e in errors if e.get("Code") not in s3_errors.NOT_FOUND_CODES]
        if failed:
            sample = ", ".join(f"{e.get('Key')} ({e.get('Code')}: {e.get('Message')})" for e in failed[:5])
            raise ObjectStoreError(f"{self.name}: could not delete {len(failed)} of {len(keys)} keys: {sample}")

    # --- reads --------------------------------------------------------------------------------------------------

    async def get(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        if start < 0 or (end is not None and end < start):
            raise ValueError(f"{self._where(key)}: invalid byte range [{start}, {end})")
        if end is not None and end == start:
            return b""
        byte_range = None
        if start > 0 or end is not None:
            byte_range = f"bytes={start}-" + ("" if end is None else str(end - 1))

        async def attempt(client: Any) -> bytes:
            self.stats.gets += 1
            extra = {"Range": byte_range} if byte_range else {}
            response = await client.get_object(Bucket=self._bucket, Key=key, **extra)
            async with response["Body"] as body:
                return bytes(await body.read())

        try:
            data = await self._request("get", key, attempt)
        except ClientError as exc:
            if s3_errors.status(exc) == 416:
                return b""  # the range starts at or past the end, as slicing past the end does
            raise self._wrap("get", key, exc) from exc
        except BotoCoreError as exc:
            raise self._wrap("get", key, exc) from exc
        self.stats.bytes_got += len(data)
        return data

    async def get_tail(self, key: str, length: int) -> tuple[bytes, int]:
        if length < 0:
            raise ValueError(f"{self._where(key)}: negative tail length {length}")
        if length == 0:
            return b"", await self.size(key)

        async def attempt(client: Any) -> tuple[bytes, str | None]:
            self.stats.gets += 1
            response = await client.get_object(Bucket=self._bucket, Key=key, Range=f"bytes=-{length}")
            async with response["Body"] as body:
                return bytes(await body.read()), response.get("ContentRange")

        try:
            data, content_range = await self._request("get tail", key, attempt)
        except ClientError as exc:
            if s3_errors.status(exc) == 416:
                return b"", await self.size(key)  # an empty object has no suffix to return
            raise self._wrap("get tail", key, exc) from exc
        except BotoCoreError as exc:
            raise self._wrap("get tail", key, exc) from exc
        self.stats.bytes_got += len(data)
        match = _CONTENT_RANGE.fullmatch(content_range or "")
        if match is not None:
            return data, int(match.group(3))
        if len(data) < length:
            return data, len(data)  # a 200 with the whole object: it is smaller than the suffix asked for
        return data, await self.size(key)

    async def _head(self, key: str) -> Mapping[str, Any]:
        async def attempt(client: Any) -> Mapping[str, Any]:
            self.stats.gets += 1
            response: Mapping[str, Any] = await client.head_object(Bucket=self._bucket, Key=key)
            return response

        try:
            return await self._request("head", key, attempt)
        except (ClientError, BotoCoreError) as exc:
            raise self._wrap("head", key, exc) from exc

    async def size(self, key: str) -> int:
        return int((await self._head(key))["ContentLength"])

    async def list(self, prefix: str) -> builtins.list[ObjectInfo]:
        out: builtins.list[ObjectInfo] = []
        token: str | None = None
        while True:
            page = await self._list_page(prefix, token)
            out.extend(ObjectInfo(str(item["Key"]), int(item["Size"])) for item in page.get("Contents", []))
            token = page.get("NextContinuationToken") if page.get("IsTruncated") else None
            if not token:
                break
        out.sort(key=lambda info: info.key)
        return out

    async def _list_page(self, prefix: str, token: str | None) -> Mapping[str, Any]:
        async def attempt(client: Any) -> Mapping[str, Any]:
            self.stats.lists += 1
            extra = {"ContinuationToken": token} if token else {}
            response: Mapping[str, Any] = await client.list_objects_v2(
                Bucket=self._bucket, Prefix=prefix, MaxKeys=self._list_page_size, **extra
            )
            return response

        try:
            return await self._request("list", prefix, attempt)
        except (ClientError, BotoCoreError) as exc:
            raise ObjectStoreError(f"{self.name}: list of prefix {prefix!r} failed: {s3_errors.describe(exc)}") from exc

    async def close(self) -> None:
        async with self._client_lock:
            self._closed = True
            self._client = None
            await self._exit_stack.aclose()


async def _all_or_nothing(requests: Sequence[Awaitable[T]]) -> builtins.list[T]:
    """Runs the requests concurrently; on the first failure cancels the others (so a failed multipart upload
    is not aborted while its sibling parts are still being sent) and raises that failure."""
    tasks = [asyncio.ensure_future(r) for r in requests]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


async def _checksum(data: bytes | bytearray) -> str:
    """The object's CRC32C, base64 as S3 wants it. botocore's default checksum is a CRC32 computed on the event
    loop at a few ms per MiB, and verified again on every full GET of the object; CRC32C in hardware is about
    ten times faster, and a large object's is computed off the loop (``storage.offload``). S3 still rejects a body
    that does not match."""
    crc = await offload(len(data), crc32c.crc32c, data)
    return base64.b64encode(crc.to_bytes(4, "big")).decode()


if TYPE_CHECKING:  # mypy proves the class is a complete ObjectStore

    def _conforms(store: S3ObjectStore) -> ObjectStore:
        return store
