"""``fjord server start`` as a user runs it: clean signals, one-line configuration errors."""

from __future__ import annotations

import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer

from testkit.node_process import REPO, BrokerProcess, default_overrides, server_command
from tests.node.cli_exit import assert_one_line_error, run_to_exit
from tests.reading import read_to_end
from tests.topics import create_topic


def test_sigterm_and_sigint_stop_cleanly(broker_factory: Callable[..., BrokerProcess], tmp_path: Path) -> None:
    node = broker_factory(config=REPO / "config" / "server.properties")  # make run's file, with test overrides
    assert node.stop() == 0
    assert "shutting down" in node.log_text() and f"node {node.node_id} stopped" in node.log_text()

    again = broker_factory(data_dir=node.data_dir)
    again.proc.send_signal(signal.SIGINT)
    assert again.proc.wait(timeout=30) == 0
    assert f"node {again.node_id} stopped" in again.log_text()


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"node.id": "zero"}, "node.id"),
        ({"listeners": "PLAINTEXT//nowhere"}, "listeners"),
        ({"s3.data.buckets": "0@ftp://bucket"}, "s3.data.buckets"),
        ({"num.partitions": "-3"}, "num.partitions"),
        ({"zookeeper.connect": "localhost:2181"}, "zookeeper.connect: Fjord runs KRaft only"),  # a refused Kafka key
        ({"broker.id": "one"}, "broker.id: 'one' is not a node id"),  # Kafka's other name for node.id
    ],
)
def test_bad_config_is_one_line_and_exit_1(overrides: dict[str, str], fragment: str, tmp_path: Path) -> None:
    settings = default_overrides(tmp_path)
    settings.update(overrides)
    assert_one_line_error(run_to_exit(server_command(None, settings)), fragment)


def test_missing_config_file_and_bad_override_syntax(tmp_path: Path) -> None:
    assert_one_line_error(run_to_exit(server_command(tmp_path / "absent.properties", {})), "absent.properties")
    result = run_to_exit([sys.executable, "-m", "node.cli", "server", "start", "--override", "novalue"])
    assert_one_line_error(result, "novalue")


def test_port_in_use_is_one_line_and_exit_1(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        settings = default_overrides(tmp_path)
        settings["listeners"] = f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:0"
        assert_one_line_error(run_to_exit(server_command(None, settings)), str(port))


def test_metrics_port_in_use_is_one_line_naming_the_key(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        settings = default_overrides(tmp_path)
        settings.update({"metrics.port": str(port), "metrics.host": "127.0.0.1"})
        assert_one_line_error(run_to_exit(server_command(None, settings)), f"metrics.port: cannot serve the "
                              f"metrics on 127.0.0.1:{port}")


def test_an_object_directory_that_cannot_be_made_names_s3_data_buckets(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    settings = default_overrides(tmp_path)
    settings["s3.data.buckets"] = f"0@file://{tmp_path / 'a-file' / 'objects'}"
    assert_one_line_error(run_to_exit(server_command(None, settings)), "s3.data.buckets: cannot use the directory",
                          str(tmp_path / "a-file" / "objects"))


@pytest.mark.parametrize("key", ["log.dirs", "s3.wal.path", "s3.data.buckets"])
def test_a_file_where_a_directory_should_be_is_named_as_not_a_directory(tmp_path: Path, key: str) -> None:
    """mkdir reports a file in the way as "File exists", which sends an operator looking for the wrong thing."""
    in_the_way = tmp_path / "a-file"
    in_the_way.write_text("")
    settings = default_overrides(tmp_path)
    settings[key] = str(in_the_way) if key == "log.dirs" else f"0@file://{in_the_way}"
    assert_one_line_error(run_to_exit(server_command(None, settings)), str(in_the_way), "Not a directory")


def test_data_directory_of_another_node_is_refused(broker_factory: Callable[..., BrokerProcess]) -> None:
    node = broker_factory()
    assert node.stop() == 0
    settings = default_overrides(node.data_dir)
    settings.update({"node.id": "7", "controller.quorum.voters": "7@127.0.0.1:0"})
    assert_one_line_error(run_to_exit(server_command(None, settings)), "node.id")


def test_a_second_node_on_a_running_nodes_data_directory_is_refused(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    """A restart that races the old process (or two nodes given one log.dirs) must stop before it touches the
    metadata log the running node is writing; the running node keeps serving and still stops cleanly."""
    running = broker_factory()
    settings = default_overrides(running.data_dir)  # same directories, new ports
    assert_one_line_error(run_to_exit(server_command(None, settings)), "in use by another Fjord process")
    assert running.proc.poll() is None, running.log_text()
    assert running.stop() == 0, running.log_text()
    restarted = broker_factory(data_dir=running.data_dir)  # the lock died with the first process
    assert restarted.stop() == 0, restarted.log_text()


def test_a_node_restarted_on_an_object_directory_without_its_objects_is_refused(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    """The node's objects are where it first kept them; a restart whose ``s3.data.buckets`` names another directory
    (a relative path read from another working directory, as the default is) stops with one line naming both,
    where it retried every partition's open forever before and wrote new objects to the wrong place. Once the
    directory is moved there, the node starts on it and serves what it held."""
    node = broker_factory()
    objects = node.data_dir / "objects"
    topic = "kept-in-objects"
    create_topic(node.bootstrap, topic)
    producer = Producer({"bootstrap.servers": node.bootstrap})
    producer.produce(topic, b"in an object")
    assert producer.flush(30) == 0
    assert node.stop() == 0  # a clean stop uploads the WAL: the record is in an object
    elsewhere = node.data_dir / "elsewhere"
    settings = default_overrides(node.data_dir)
    settings["s3.data.buckets"] = f"0@file://{elsewhere}"
    assert_one_line_error(run_to_exit(server_command(None, settings)), f"s3.data.buckets: file://{elsewhere} is "
                          f"{elsewhere}, which holds none of this cluster's objects; this node kept them in {objects}")
    assert not elsewhere.exists()

    objects.rename(elsewhere)
    moved = broker_factory(overrides={"s3.data.buckets": f"0@file://{elsewhere}"}, data_dir=node.data_dir)
    assert read_to_end(moved.bootstrap, topic, 1) == [(0, b"in an object")]
