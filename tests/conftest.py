"""Fixtures shared by every test package: a real S3-compatible HTTP server (moto) on 127.0.0.1, and three controller
voters in this process (``voters``, see tests/quorum_fixtures.py).

``s3_server`` is started once per session, in-process (moto's threaded server binds an ephemeral port), and
stopped at the end. Each test that needs S3 takes a fresh, uniquely named bucket from ``s3_bucket_url`` so tests
never see each other's objects.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto.server import ThreadedMotoServer

from controller.quorum import QuorumController
from storage.config import BucketURL, parse_bucket_url
from tests.quorum_fixtures import quorum_configs, running_voters

S3_ACCESS_KEY = "testing"
S3_SECRET_KEY = "testing"
S3_REGION = "us-east-1"


@dataclass(frozen=True)
class S3Server:
    """A running S3-compatible server: its endpoint and helpers to make buckets on it."""

    endpoint: str

    def client(self) -> Any:
        """A synchronous boto3 client for test setup and for checking what the server really holds."""
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=S3_REGION,
            aws_access_key_id=S3_ACCESS_KEY,
            aws_secret_access_key=S3_SECRET_KEY,
        )

    def create_bucket(self, prefix: str = "fjord") -> str:
        """Creates a new bucket with a unique name and returns the name."""
        name = f"{prefix}-{uuid.uuid4().hex[:16]}"
        self.client().create_bucket(Bucket=name)
        return name

    def bucket_url(self, bucket: str) -> BucketURL:
        """The ``s3.data.buckets``-style URL of ``bucket`` on this server, credentials included."""
        return parse_bucket_url(self.bucket_url_text(bucket))

    def bucket_url_text(self, bucket: str) -> str:
        return (
            f"0@s3://{bucket}?region={S3_REGION}&endpoint={self.endpoint}&pathStyle=true"
            f"&accessKey={S3_ACCESS_KEY}&secretKey={S3_SECRET_KEY}"
        )


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    with pytest.MonkeyPatch.context() as env:
        # Clients built by code under test without explicit credentials find these (never real ones).
        env.setenv("AWS_ACCESS_KEY_ID", S3_ACCESS_KEY)
        env.setenv("AWS_SECRET_ACCESS_KEY", S3_SECRET_KEY)
        env.setenv("AWS_DEFAULT_REGION", S3_REGION)
        env.delenv("AWS_PROFILE", raising=False)
        env.delenv("AWS_SESSION_TOKEN", raising=False)
        # One INFO line per request would bury every failing test's own log output.
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        try:
            host, port = server.get_host_and_port()
            yield S3Server(endpoint=f"http://{host}:{port}")
        finally:
            server.stop()


@pytest.fixture
def s3_bucket_url(s3_server: S3Server) -> BucketURL:
    """A fresh, empty bucket on the session's S3 server."""
    return s3_server.bucket_url(s3_server.create_bucket())


@pytest.fixture
async def voters(tmp_path: Path) -> AsyncIterator[list[QuorumController]]:
    """Three controller voters in this process; a test may drop voters it stopped itself from the list."""
    async with running_voters(quorum_configs(tmp_path)) as started:
        yield started
