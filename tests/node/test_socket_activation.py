"""Client listener sockets passed by a service manager (systemd's socket activation, ``node.socket_activation``): a
node serves on them, a client connecting while no node runs is queued and answered by the next node instead of
refused, and a socket that fits no listener stops the start with one line naming it."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from node.socket_activation import take_inherited
from storage.config import ConfigError
from testkit.node_process import REPO, WireClient, api_versions_request, default_overrides, server_command, start_broker
from testkit.service_manager import socket_activated
from wire import codec, schema


@pytest.fixture
def held_socket() -> Iterator[socket.socket]:
    """A listening socket the test holds as a service manager would, across the node's restarts."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    yield sock
    sock.close()


def _answered_then_served(client: WireClient, correlation_id: int, port: int) -> None:
    """The ApiVersions request ``client`` sent before a node ran is answered, and the node serves on ``port``."""
    got, response = client.receive(18, 3)
    assert got == correlation_id and response.error_code == 0
    metadata = client.request(schema.build(codec.request_class(3, 12), topics=None))
    assert [(b.host, b.port) for b in metadata.brokers] == [("127.0.0.1", port)]


def test_a_client_connecting_while_no_node_runs_is_answered_by_the_next_one(
    tmp_path: Path, held_socket: socket.socket
) -> None:
    port = held_socket.getsockname()[1]
    overrides = {"listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:0"}
    # No node yet: the kernel completes the handshake on the held socket and keeps the request.
    with WireClient(port, timeout=30.0) as early:
        correlation_id = early.send(api_versions_request(3))
        broker = start_broker(tmp_path, overrides, passed_sockets=[held_socket])
        try:
            _answered_then_served(early, correlation_id, port)
            assert f"listening on 127.0.0.1:{port} (passed by the service manager)" in broker.log_text()
            broker.kill()  # kill -9: the socket stays with its holder

            with WireClient(port, timeout=30.0) as during:  # accepted, not refused, while no node runs
                correlation_id = during.send(api_versions_request(3))
                again = start_broker(tmp_path, overrides, passed_sockets=[held_socket])
                try:
                    _answered_then_served(during, correlation_id, port)
                finally:
                    assert again.stop() == 0
        finally:
            broker.kill()


def test_a_passed_socket_that_fits_no_listener_stops_the_start(tmp_path: Path, held_socket: socket.socket) -> None:
    settings = default_overrides(tmp_path)  # every listener on port 0: the held socket's port is none of theirs
    command, fds = socket_activated(server_command(None, settings), [held_socket])
    done = subprocess.run(command, check=False, cwd=REPO, pass_fds=fds, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    port = held_socket.getsockname()[1]
    assert done.stderr.strip().splitlines() == [
        f"fjord: configuration error: socket activation: descriptor 3 (127.0.0.1:{port}) fits no client listener; "
        "the client listeners: PLAINTEXT (port 0)"
    ]
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as not_listening:
        command, fds = socket_activated(server_command(None, settings), [not_listening])
        done = subprocess.run(command, check=False, cwd=REPO, pass_fds=fds, capture_output=True, text=True,
                              timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "fjord: configuration error: LISTEN_FDS: descriptor 3 is not a listening TCP socket"
    ]


def test_the_variables_are_read_once_and_only_by_the_process_they_name() -> None:
    environ = {"LISTEN_PID": str(os.getpid() + 1), "LISTEN_FDS": "1", "LISTEN_FDNAMES": "PLAINTEXT", "HOME": "/x"}
    assert take_inherited(environ) == []  # another process's: nothing taken, and the variables are gone
    assert environ == {"HOME": "/x"}
    with pytest.raises(ConfigError, match="LISTEN_FDNAMES names 2 sockets, LISTEN_FDS passes 1"):
        take_inherited({"LISTEN_PID": str(os.getpid()), "LISTEN_FDS": "1", "LISTEN_FDNAMES": "a:b"})
    with pytest.raises(ConfigError, match="not numbers"):
        take_inherited({"LISTEN_PID": "me", "LISTEN_FDS": "1"})
