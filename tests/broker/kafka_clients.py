"""Helpers shared by the produce/fetch/offsets tests: a module-scoped broker process and topic helpers.

One broker per test module (started with ``node_process.start_broker``, like the shared fixtures) keeps the
suite fast; tests use unique topic names so they do not see each other's data.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from testkit.node_process import BrokerProcess, WireClient, start_broker
from wire import codec, schema


def module_broker(data_dir: Path, overrides: dict[str, str] | None = None) -> Iterator[BrokerProcess]:
    """Starts a broker for a whole test module and stops it (SIGTERM, exit 0) afterwards."""
    process = start_broker(data_dir, overrides)
    try:
        yield process
    finally:
        code = process.stop()
    assert code == 0, process.log_text()


def topic_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def produce_request(topic: str, partition: int, records: bytes, *, acks: int = -1, version: int = 9) -> Any:
    request_cls = codec.request_class(0, version)
    topic_cls = schema.field_entity(request_cls, "topic_data")
    part_cls = schema.field_entity(topic_cls, "partition_data")
    data = schema.build(
        topic_cls, name=topic, partition_data=(schema.build(part_cls, index=partition, records=records),)
    )
    return schema.build(request_cls, transactional_id=None, acks=acks, timeout=10_000, topic_data=(data,))


def fetch_request(
    topic: str | None,
    partition: int,
    offset: int,
    *,
    version: int = 12,
    max_wait_ms: int = 0,
    min_bytes: int = 1,
    session_id: int = 0,
    session_epoch: int = -1,
    partition_max_bytes: int = 1 << 20,
) -> Any:
    """A consumer Fetch for one partition (``topic=None``: no partitions, e.g. an empty incremental fetch)."""
    request_cls = codec.request_class(1, version)
    topic_cls = schema.field_entity(request_cls, "topics")
    part_cls = schema.field_entity(topic_cls, "partitions")
    topics: tuple[Any, ...] = ()
    if topic is not None:
        part = schema.build(
            part_cls,
            partition=partition,
            fetch_offset=offset,
            partition_max_bytes=partition_max_bytes,
            current_leader_epoch=-1,
            last_fetched_epoch=-1,
            log_start_offset=-1,
        )
        topics = (schema.build(topic_cls, topic=topic, partitions=(part,)),)
    return schema.build(
        request_cls,
        replica_id=-1,
        max_wait=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=50 << 20,
        isolation_level=0,
        session_id=session_id,
        session_epoch=session_epoch,
        topics=topics,
        forgotten_topics_data=(),
        rack_id="",
    )


def list_offsets_request(topic: str, partition: int, timestamp: int, *, version: int = 8) -> Any:
    request_cls = codec.request_class(2, version)
    topic_cls = schema.field_entity(request_cls, "topics")
    part_cls = schema.field_entity(topic_cls, "partitions")
    part = schema.build(part_cls, partition_index=partition, current_leader_epoch=-1, timestamp=timestamp)
    return schema.build(
        request_cls, replica_id=-1, isolation_level=0, topics=(schema.build(topic_cls, name=topic, partitions=(part,)),)
    )


def init_producer_id(client: WireClient) -> tuple[int, int]:
    request = schema.build(
        codec.request_class(22, 4), transactional_id=None, transaction_timeout=60_000, producer_id=-1, producer_epoch=-1
    )
    response = client.request(request)
    assert response.error_code == ErrorCode.none
    return int(response.producer_id), int(response.producer_epoch)


class ResponseDroppingProxy:
    """A TCP proxy on 127.0.0.1 that forwards Kafka frames both ways but, for every ``every``-th Produce
    request, drops the broker's response and cuts the connection: the client cannot know whether the append
    happened and must retry it, which is exactly the situation idempotence exists for."""

    def __init__(self, every: int) -> None:
        self.every = every
        self.dropped = 0
        self._produce_count = 0
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port = self._listener.getsockname()[1]
        self._target: tuple[str, int] | None = None
        self._stop = threading.Event()
        self._sockets: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def start(self, target_port: int) -> None:
        self._target = ("127.0.0.1", target_port)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.ident is not None:  # started
            self._thread.join(timeout=5)
        self._listener.close()
        for sock in list(self._sockets):
            sock.close()

    def _accept(self) -> None:
        assert self._target is not None
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                server = socket.create_connection(self._target, timeout=10)
            except OSError:  # the broker is not listening yet
                client.close()
                continue
            self._sockets += [client, server]
            pending: list[int] = []  # api keys of requests awaiting a response, in order
            threading.Thread(target=self._requests, args=(client, server, pending), daemon=True).start()
            threading.Thread(target=self._responses, args=(server, client, pending), daemon=True).start()

    @staticmethod
    def _read_frame(sock: socket.socket) -> bytes | None:
        data = b""
        while len(data) < 4:
            chunk = sock.recv(4 - len(data))
            if not chunk:
                return None
            data += chunk
        size = int.from_bytes(data, "big")
        body = bytearray()
        while len(body) < size:
            chunk = sock.recv(min(size - len(body), 1 << 20))
            if not chunk:
                return None
            body += chunk
        return data + bytes(body)

    def _requests(self, client: socket.socket, server: socket.socket, pending: list[int]) -> None:
        try:
            while (frame := self._read_frame(client)) is not None:
                pending.append(int.from_bytes(frame[4:6], "big", signed=True))
                server.sendall(frame)
        except OSError:
            pass
        finally:
            _cut(server)

    def _responses(self, server: socket.socket, client: socket.socket, pending: list[int]) -> None:
        try:
            while (frame := self._read_frame(server)) is not None:
                api_key = pending.pop(0) if pending else -1
                if api_key == 0:
                    with self._lock:
                        self._produce_count += 1
                        drop = self._produce_count % self.every == 0
                        if drop:
                            self.dropped += 1
                    if drop:
                        break
                client.sendall(frame)
        except OSError:
            pass
        finally:
            _cut(client)
            _cut(server)


def _cut(sock: socket.socket) -> None:
    """Closes a connection so that the peer sees it at once, even while another thread is blocked reading it
    (close() alone would wait for that read)."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


JS_DIR = Path(__file__).resolve().parents[1] / "js"


def run_kafkajs(script: str, *args: str, timeout: float = 90) -> Any:
    """Runs a kafkajs script with node (``tests/js``, installed by scripts/install-system-deps.sh or here with npm)
    and returns the JSON its last stdout line prints; the test fails with node's stderr if the script fails."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed (scripts/install-system-deps.sh installs it): kafkajs cannot run")
    if not (JS_DIR / "node_modules" / "kafkajs").exists():
        subprocess.run(["npm", "install", "--no-audit", "--no-fund"], cwd=JS_DIR, check=True, timeout=300)
    result = subprocess.run(
        [node, "-e", script, *args], cwd=JS_DIR, text=True, capture_output=True, check=False, timeout=timeout
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def entity(api_key: int, version: int, *path: str) -> type[Any]:
    """The request entity class of ``api_key`` v``version``, or a nested one along ``path``."""
    cls = codec.request_class(api_key, version)
    for name in path:
        cls = schema.field_entity(cls, name)
    return cls


def call(client: WireClient, api_key: int, version: int, **fields: object) -> Any:
    """One request of ``api_key`` v``version`` built from ``fields``, and its response."""
    return client.request(schema.build(entity(api_key, version), **fields))
