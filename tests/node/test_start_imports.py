"""What ``fjord server start`` imports (issue 25): a node whose configuration names no S3 bucket imports neither the
S3 client stack (aiobotocore, botocore, aiohttp) nor Spark, and no ``fjord`` process imports hypothesis (which kio
hooks into when it is installed). Each of those is a large part of a start's time. Nor does the shipped config's
node import what only another kind of node or a client's later request needs (:data:`NOT_NEEDED_MODULES`), nor,
before its client listener listens, what only the node it then starts needs (:data:`NOT_BEFORE_LISTENING`): every
import before that delays a restarting node's reconnecting clients (``node.early_listen``).

Checked on real node processes with Python's own import trace: ``PYTHONPROFILEIMPORTTIME=1`` makes the interpreter
write one ``import time:`` line per module it imports to stderr, which ``start_broker`` keeps in the node's log. The
shipped config's node is traced through its start and a produce and a consumer group's fetch (what a first client
does); the same trace of a node whose data bucket is on S3 shows the check sees the S3 stack when it is imported.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Message, Producer

from testkit.node_process import REPO, BrokerProcess, start_broker
from testkit.waiting import eventually
from tests.conftest import S3Server

SHIPPED_CONFIG = REPO / "config" / "server.properties"
#: Top-level packages a node that does not use them must not import.
NOT_NEEDED = ("aiobotocore", "botocore", "aiohttp", "boto3", "pyspark", "hypothesis")
S3_STACK = ("aiobotocore", "botocore", "aiohttp")
#: Modules the shipped config's node imports only when it needs them, and what needs each: the Raft quorum, its
#: core and the quorum client (a node on Raft: node/controller_handle.py), the S3-mode WAL and its object names
#: (an s3:// or mem:// s3.wal.path), RE2 (a client's regular expression: broker/name_patterns.py) and the classic
#: consumer protocol's schemas (a consumer group with classic members: broker/groups/consumer/consumer_protocol.py).
NOT_NEEDED_MODULES = (
    "controller.quorum", "raft.core", "raft.driver", "metadata.remote.client", "controller.metadata_replica",
    "storage.wal.s3", "storage.wal.s3_format", "re2",
    "kio.schema.consumer_protocol_subscription", "kio.schema.consumer_protocol_assignment",
)
#: What ``fjord server start`` imports only once its client listeners listen (node/commands/server.py): the
#: node's stacks, kio and the metrics library, and of the wire layer the listener with its connections, codec and
#: metrics (a listener's sockets are bound by ``wire.listening_sockets``). Each row is a module or a package.
NOT_BEFORE_LISTENING = (
    "node.process", "broker", "controller", "metadata", "raft", "storage.engine", "storage.metadata",
    "wire.listener", "wire.connection", "wire.codec", "wire.schema", "wire.api_versions", "wire.metrics", "kio",
    "prometheus_client",
)
_LISTENING_LINE = re.compile(r"^\S+ \S+ INFO +node\.early_listen: listener \S+ listening on ", re.MULTILINE)
_IMPORT_LINE = re.compile(r"^import time:\s+\d+ \|\s+\d+ \| *(\S+)\s*$", re.MULTILINE)


def _traced_start(data_dir: Path, monkeypatch: pytest.MonkeyPatch, overrides: dict[str, str] | None = None
                  ) -> BrokerProcess:
    monkeypatch.setenv("PYTHONPROFILEIMPORTTIME", "1")
    return start_broker(data_dir, overrides, config=SHIPPED_CONFIG)


def _imported_modules(broker: BrokerProcess) -> set[str]:
    """The modules the node imported, from its import trace (read after it stopped: complete)."""
    modules = set(_IMPORT_LINE.findall(broker.log_text()))
    assert {"broker.broker", "storage.engine"} <= modules, "no import trace in the node's log"
    return modules


def _imported_before_listening(broker: BrokerProcess) -> set[str]:
    """The modules the node imported before its first client listener listened: the trace's lines before that
    listener's log line (the interpreter writes each import's line to stderr as the import ends, and the node logs
    each line to stderr as it happens)."""
    log = broker.log_text()
    listening = _LISTENING_LINE.search(log)
    assert listening is not None, "the node never logged its client listener listening"
    modules = set(_IMPORT_LINE.findall(log, 0, listening.start()))
    assert {"node.early_listen", "settings.server"} <= modules, "no import trace before the listener listened"
    return modules


def _imported_packages(broker: BrokerProcess) -> set[str]:
    """The top-level packages the node imported. A package counts by its own line: the trace also has a line for an
    import that failed (kio's ``import hypothesis.strategies`` when hypothesis cannot be imported), but a package
    really imported loads its top level first."""
    return {module for module in _imported_modules(broker) if "." not in module}


def _produce_and_consume(bootstrap: str) -> None:
    topic, group = f"start-imports-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic, b"first")  # auto-created, as the shipped config allows
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])

        def received() -> Message | None:
            message = consumer.poll(0.2)
            return message if message is not None and message.error() is None else None

        message = eventually(received, timeout=30, what="the record produced to come back to the group")
        assert message.value() == b"first"
    finally:
        consumer.close()


def test_shipped_config_node_serves_without_importing_what_it_does_not_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker = _traced_start(tmp_path / "node", monkeypatch)
    try:
        _produce_and_consume(broker.bootstrap)
    finally:
        assert broker.stop() == 0, broker.log_text()[-3000:]
    assert sorted(_imported_packages(broker) & set(NOT_NEEDED)) == []
    assert sorted(_imported_modules(broker) & set(NOT_NEEDED_MODULES)) == []
    early = _imported_before_listening(broker)
    assert sorted(m for m in early if any(m == p or m.startswith(f"{p}.") for p in NOT_BEFORE_LISTENING)) == []


def test_node_with_an_s3_bucket_imports_the_s3_client(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, s3_server: S3Server
) -> None:
    """The same trace of a node whose data and WAL are on S3 sees what such a node needs: the S3 client stack and
    the S3 WAL (its bucket probed before the broker registers: ``broker.wal_ownership``)."""
    bucket = s3_server.bucket_url_text(s3_server.create_bucket())
    broker = _traced_start(tmp_path / "node", monkeypatch, {"s3.data.buckets": bucket, "s3.wal.path": bucket})
    assert broker.stop() == 0, broker.log_text()[-3000:]
    imported = _imported_packages(broker)
    assert set(S3_STACK) <= imported
    assert "hypothesis" not in imported
    assert {"storage.wal.s3", "storage.wal.s3_format"} <= _imported_modules(broker)
