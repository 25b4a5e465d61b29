"""Cluster fixtures: ``cluster_factory`` starts 3 controllers + 3 brokers (or as asked) as real processes on
127.0.0.1, with a bucket on the session's moto S3 server as object storage, and waits until it is ready.

Every cluster is stopped at teardown (SIGTERM, brokers first); a test that needs a clean stop asserts it itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from kafka.admin import KafkaAdminClient

from node.local_cluster import LocalCluster, plan_cluster, wait_ready
from tests.cluster.cluster_support import FAST

if TYPE_CHECKING:
    from tests.conftest import S3Server

READY_TIMEOUT_S = 60.0


def start_cluster(root: Path, s3_server: S3Server, *, controllers: int = 3, brokers: int = 3, wal: str = "file",
                  extra: Mapping[str, str] | None = None, combined: int = 0) -> LocalCluster:
    store = s3_server.bucket_url_text(s3_server.create_bucket("cluster"))
    cluster = LocalCluster(plan_cluster(root, controllers=controllers, brokers=brokers, object_store=store, wal=wal,
                                        extra={**FAST, **(extra or {})}, combined=combined))
    cluster.start_all()
    try:
        asyncio.run(wait_ready(cluster, READY_TIMEOUT_S))
    except BaseException:
        logs = cluster.logs()
        cluster.kill_all()
        raise AssertionError(f"the cluster did not start:\n{logs}") from None
    return cluster


@pytest.fixture
def cluster_factory(tmp_path: Path, s3_server: S3Server) -> Iterator[Callable[..., LocalCluster]]:
    started: list[LocalCluster] = []

    def factory(**kwargs: object) -> LocalCluster:
        cluster = start_cluster(tmp_path / f"cluster-{len(started)}", s3_server, **kwargs)  # type: ignore[arg-type]
        started.append(cluster)
        return cluster

    yield factory
    for cluster in started:
        cluster.stop_all(timeout=20)


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory, s3_server: S3Server) -> Iterator[LocalCluster]:
    """One cluster for the tests of a module that leave it as they found it (own topic names, no kills)."""
    cluster = start_cluster(tmp_path_factory.mktemp("shared-cluster"), s3_server)
    try:
        yield cluster
    finally:
        codes = cluster.stop_all(timeout=30)
        assert all(code == 0 for code in codes.values()), f"unclean stop {codes}:\n{cluster.logs()}"


@pytest.fixture
def admin_for() -> Iterator[Any]:
    """Makes kafka-python admin clients on any bootstrap (a broker of a cluster the test runs), closed after it."""
    made: list[KafkaAdminClient] = []

    def make(bootstrap: str) -> KafkaAdminClient:
        client = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()
