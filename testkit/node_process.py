"""A raw Kafka wire client and a node subprocess runner (``fjord server start``): behind the shared broker fixtures
(``tests/broker/broker_fixtures.py``) and ``bench/broker.py``. Tests import the classes from here for type hints and
direct use."""


from __future__ import annotations

import os
import re
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kio.serial.errors import OutOfBoundValue

from testkit.service_manager import socket_activated
from testkit.waiting import eventually
from wire import codec, schema

REPO = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0
_SERVING = re.compile(r"node (\d+) serving (.*)$", re.MULTILINE)
_ENDPOINT = re.compile(r"(\w+)://([^,\s:]+):(\d+)")
_BOUND = re.compile(r"listener (\w+) bound to [^\s:]+:(\d+)")


class WireClient:
    """A blocking Kafka-protocol connection for tests; every read is bounded by ``timeout``."""

    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 10.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.settimeout(timeout)
        self._correlation = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, request: Any, correlation_id: int | None = None, client_id: str | None = "fjord-tests") -> int:
        if correlation_id is None:
            self._correlation += 1
            correlation_id = self._correlation
        self.sock.sendall(codec.encode_request(request, correlation_id, client_id))
        return correlation_id

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_frame(self) -> bytes:
        """One response frame without its length prefix; raises ConnectionError when the broker closed."""
        (size,) = struct.unpack(">i", self._read_exactly(4))
        return self._read_exactly(size)

    def receive(self, api_key: int, api_version: int) -> tuple[int, Any]:
        """(correlation id, body); the body is None when it holds a timestamp of -1, Kafka's "none" (a refused
        CreateDelegationToken's, say), which kio's reader refuses while Kafka's clients take it."""
        frame = self.read_frame()
        try:
            return codec.decode_response(api_key, api_version, frame)
        except OutOfBoundValue:
            return struct.unpack_from(">i", frame)[0], None

    def request(self, request: Any) -> Any:
        """Send and wait for the matching response."""
        correlation_id = self.send(request)
        got, body = self.receive(type(request).__api_key__, type(request).__version__)
        assert got == correlation_id
        return body

    def is_closed_by_peer(self, timeout: float = 5.0) -> bool:
        """True when the broker closed the connection (EOF or reset) within ``timeout``."""
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False

    def _read_exactly(self, n: int) -> bytes:
        chunks = bytearray()
        while len(chunks) < n:
            chunk = self.sock.recv(n - len(chunks))
            if not chunk:
                raise ConnectionError(f"broker closed the connection after {len(chunks)} of {n} bytes")
            chunks.extend(chunk)
        return bytes(chunks)


def api_versions_request(version: int = 3) -> Any:
    fields: dict[str, object] = {}
    if version >= 3:
        fields = {"client_software_name": "fjord-tests", "client_software_version": "1.0"}
    return schema.build(codec.request_class(18, version), **fields)


@dataclass
class BrokerProcess:
    """A running ``fjord server start`` subprocess."""

    proc: subprocess.Popen[bytes]
    data_dir: Path
    log_path: Path
    node_id: int = 0
    port: int = 0
    endpoints: dict[str, tuple[str, int]] = field(default_factory=dict)
    #: The port each client listener bound (a listener configured with port 0 reports the one it got); it differs
    #: from ``endpoints`` when ``advertised.listeners`` points clients elsewhere (at a proxy, say).
    listener_ports: dict[str, int] = field(default_factory=dict)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def log_text(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM and wait; returns the exit status (kills the process if it does not exit in time)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired as exc:
                self.proc.kill()
                self.proc.wait(timeout=10)
                raise AssertionError(
                    f"broker did not stop within {timeout}s after SIGTERM:\n{self.log_text()}"
                ) from exc
        return int(self.proc.returncode)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


def server_command(config: Path | None, overrides: Mapping[str, str], args: Sequence[str] = ()) -> list[str]:
    """``args``: further options of ``fjord server start`` (``--add-scram ...``)."""
    cmd = [sys.executable, "-m", "node.cli", "server", "start"]
    if config is not None:
        cmd += ["--config", str(config)]
    for key, value in overrides.items():
        cmd += ["--override", f"{key}={value}"]
    return [*cmd, *args]


def default_overrides(data_dir: Path) -> dict[str, str]:
    """A combined node with every port chosen by the OS and every directory under ``data_dir``."""
    return {
        "process.roles": "broker,controller",
        "node.id": "0",
        "controller.quorum.voters": "0@127.0.0.1:0",
        "listeners": "PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
        "advertised.listeners": "",
        "controller.listener.names": "CONTROLLER",
        "log.dirs": str(data_dir / "kraft"),
        "s3.data.buckets": f"0@file://{data_dir / 'objects'}",
        "s3.wal.path": f"0@file://{data_dir / 'wal'}",
        "s3.wal.upload.threshold": "16MiB",
        "s3.wal.cache.size": "64MiB",
        "s3.block.cache.size": "32MiB",
    }


def start_broker(
    data_dir: Path,
    overrides: Mapping[str, str] | None = None,
    *,
    config: Path | None = None,
    timeout: float = START_TIMEOUT_S,
    args: Sequence[str] = (),
    passed_sockets: Sequence[socket.socket] = (),
) -> BrokerProcess:
    """Starts a node and returns once it answers ApiVersions on its client listener. ``passed_sockets``: listening
    sockets handed to it as a service manager hands them (``testkit.service_manager``)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    settings = default_overrides(data_dir)
    settings.update(overrides or {})
    log_path = data_dir / f"broker-{time.monotonic_ns()}.log"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    command = server_command(config, settings, args)
    fds: tuple[int, ...] = ()
    if passed_sockets:
        command, fds = socket_activated(command, passed_sockets)
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=env, pass_fds=fds)
    broker = BrokerProcess(proc, data_dir, log_path, node_id=int(settings.get("node.id", "0")))
    deadline = time.monotonic() + timeout

    def serving() -> re.Match[str] | None:
        if proc.poll() is not None:
            raise AssertionError(f"broker exited with {proc.returncode} while starting:\n{broker.log_text()}")
        return _SERVING.search(broker.log_text())

    def answers_api_versions(port: int) -> bool:
        with WireClient(port, timeout=2.0) as client:
            return bool(client.request(api_versions_request(3)).error_code == 0)

    try:
        match = eventually(serving, timeout=timeout, what=lambda: f"the broker to start:\n{broker.log_text()}")
        broker.endpoints = {m[0]: (m[1], int(m[2])) for m in _ENDPOINT.findall(match.group(2))}
        broker.port = next(iter(broker.endpoints.values()))[1]
        broker.listener_ports = {name: int(port) for name, port in _BOUND.findall(broker.log_text())}
        # Asked on the port the first listener bound: its advertised one may be a proxy's that is not up yet.
        port = broker.listener_ports.get(next(iter(broker.endpoints)), broker.port)
        eventually(lambda: answers_api_versions(port), timeout=max(deadline - time.monotonic(), 0.1),
                   retry_on=(OSError,), what=lambda: f"the broker to answer ApiVersions:\n{broker.log_text()}")
    except AssertionError:
        broker.kill()
        raise
    return broker


