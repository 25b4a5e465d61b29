"""Node process fixtures (imported by tests/broker/conftest.py and tests/node/conftest.py): a real ``fjord server
start`` process on 127.0.0.1, and a raw Kafka wire client.

``broker`` (function scope) starts one combined node in a subprocess with every directory under the test's
``tmp_path`` and every port chosen by the OS, waits until it answers ApiVersions, yields a :class:`BrokerProcess`,
and stops it with SIGTERM afterwards (asserting a clean exit 0). ``broker_factory`` starts as many as a test needs,
with extra ``--override`` settings, and can restart a node on the same data directory::

    def test_something(broker):
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})

    def test_restart(broker_factory):
        first = broker_factory(overrides={"num.partitions": "3"})
        first.stop()
        second = broker_factory(data_dir=first.data_dir)

``wire_client(port)`` (the ``wire`` fixture) opens a :class:`WireClient`: send kio request entities, read
responses by correlation id, or write raw bytes, for protocol-level tests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from testkit.node_process import BrokerProcess, WireClient, start_broker


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[Callable[..., BrokerProcess]]:
    """``factory(overrides=None, data_dir=None, config=None) -> BrokerProcess``; every broker started is stopped
    (SIGTERM) at teardown. The default data directory is ``tmp_path / "node"``."""
    started: list[BrokerProcess] = []

    def factory(
        overrides: Mapping[str, str] | None = None, data_dir: Path | None = None, config: Path | None = None
    ) -> BrokerProcess:
        process = start_broker(data_dir or tmp_path / "node", overrides, config=config)
        started.append(process)
        return process

    yield factory
    for process in started:
        process.stop()


@pytest.fixture
def broker(broker_factory: Callable[..., BrokerProcess]) -> Iterator[BrokerProcess]:
    """One running combined node; at teardown it must exit 0 on SIGTERM."""
    process = broker_factory()
    yield process
    assert process.stop() == 0, process.log_text()


@pytest.fixture
def wire() -> Iterator[Callable[[int], WireClient]]:
    """``wire(port) -> WireClient``; connections are closed at teardown."""
    clients: list[WireClient] = []

    def connect(port: int) -> WireClient:
        client = WireClient(port)
        clients.append(client)
        return client

    yield connect
    for client in clients:
        client.close()


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One node for every test of a module that does not need a fresh one (saves a start per test); tests must
    use their own topic names. It must still exit 0 on SIGTERM at the end of the module."""
    process = start_broker(tmp_path_factory.mktemp("shared-broker"))
    try:
        yield process
    finally:
        assert process.stop() == 0, process.log_text()
