"""The metadata shell offline: a node's metadata directory and a snapshot file read through ``fjord metadata
shell``, the commands' behaviour (paths, cd/pwd, tree, errors) and the exit status of a bad command."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from controller.controller import Controller
from controller.shell import MetadataShell, ShellError, build_tree
from controller.shell_sources import MetadataSourceError, from_directory, from_snapshot
from metadata.cluster_records import PartitionRecord, TopicRecord
from metadata.controller_api import NewTopic
from metadata.log import LOG_DIR_NAME
from node.local_cluster import REPO_ROOT
from settings.endpoint import Endpoint
from settings.server import ServerConfig
from storage.metadata.api import NodeIdentity

EP = (Endpoint("PLAINTEXT", "127.0.0.1", 9092),)


@pytest.fixture
async def metadata_dir(tmp_path: Path) -> AsyncIterator[Path]:
    """A combined node's metadata log holding two brokers, two topics, a stream, an object and a KV entry."""
    config = ServerConfig.load(None, [f"log.dirs={tmp_path / 'node'}", "num.partitions=2"])
    controller = await Controller.start(config)
    client = controller
    epoch = await client.register_broker(0, EP, None)
    await client.register_broker(1, (Endpoint("PLAINTEXT", "127.0.0.1", 9094),), "rack-b")
    await client.create_topics([NewTopic("orders", 3), NewTopic("audit", 1)], validate_only=False)
    streams = controller.stream_metadata
    node = NodeIdentity(0, epoch)
    stream_id = await streams.create_stream(node, (("topic", "orders"),))
    await streams.open_stream(node, stream_id, 0)
    await streams.put_kv("_fjord_test/orders/0", stream_id.to_bytes(8, "big"))
    await controller.take_snapshot()
    await client.create_topics([NewTopic("late", 1)], validate_only=False)
    yield config.metadata_dir
    await controller.close()


def _shell(source: Path, *commands: str, flag: str = "--metadata-dir") -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "node.cli", "metadata", "shell", flag, str(source)]
    for command in commands:
        argv += ["-c", command]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=REPO_ROOT, check=False)


async def test_shell_reads_a_metadata_directory_offline(metadata_dir: Path) -> None:
    result = _shell(metadata_dir, "ls /topics", "cat /brokers/1", "ls /kv")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["NAME", "ID", "PARTITIONS", "LEADERS"]
    assert [(row.split()[0], row.split()[2]) for row in lines[1:4]] == [("audit", "1"), ("late", "1"), ("orders", "3")]
    assert "rack      : rack-b" in result.stdout
    assert "PLAINTEXT://127.0.0.1:9094" in result.stdout
    assert "_fjord_test/orders/0" in result.stdout


async def test_shell_reads_a_snapshot_file(metadata_dir: Path) -> None:
    (snapshot,) = sorted((metadata_dir / LOG_DIR_NAME).glob("snapshot-*.snapshot"))
    result = _shell(snapshot, "ls /topics", "ls /streams", flag="--snapshot")
    assert result.returncode == 0, result.stderr
    topics = [line.split()[0] for line in result.stdout.split("ID  EPOCH")[0].splitlines()[1:]]
    assert topics == ["audit", "orders"], "the snapshot holds the state before the later topic"
    assert "topic=orders" in result.stdout


def test_a_bad_command_fails_with_one_line(metadata_dir: Path) -> None:
    result = _shell(metadata_dir, "cat /topics", "ls /brokers")
    assert result.returncode == 1
    assert result.stderr.strip() == "error: cat: /topics: is a directory"
    assert result.stdout.splitlines()[0].split()[:3] == ["ID", "EPOCH", "STATE"]
    missing = _shell(metadata_dir / "nowhere", "ls")
    assert missing.returncode == 1 and "no such directory" in missing.stderr and "Traceback" not in missing.stderr
    for flag in ("--metadata-dir", "--snapshot"):  # a path the system refuses to look at: one line naming it
        refused = _shell(metadata_dir / ("d" * 300), "ls", flag=flag)
        assert refused.returncode == 1 and "Traceback" not in refused.stderr, refused.stderr
        assert refused.stderr == f"fjord: {flag} {metadata_dir / ('d' * 300)}: File name too long\n"


def test_a_bad_command_config_is_one_line(metadata_dir: Path, tmp_path: Path) -> None:
    unknown = tmp_path / "client.properties"
    unknown.write_text("security.protocol=SASL_SSL\nsasl.password=hunter2\n")
    for flag, source, config, expected in (
        ("--controllers", "127.0.0.1:9", tmp_path / "missing.properties", "missing.properties"),
        ("--bootstrap", "127.0.0.1:9", unknown, "sasl.password: not a setting"),
        ("--metadata-dir", str(metadata_dir), unknown, "only a running cluster"),
    ):
        argv = [sys.executable, "-m", "node.cli", "metadata", "shell", flag, source, "--command-config", str(config),
                "-c", "ls /brokers"]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=REPO_ROOT, check=False)
        assert result.returncode == 1 and result.stdout == "", result
        assert result.stderr.count("\n") == 1 and expected in result.stderr, result.stderr
        assert "hunter2" not in result.stderr


def test_shell_commands_and_errors(tmp_path: Path) -> None:
    shell = MetadataShell(build_tree([]))
    assert shell.run("ls") == "balancer/\nbrokers/\nfailovers/\nkv/\nnodes/\nobjects/\nproducerIds\nstreams/\ntopics/"
    assert shell.run("cd /streams") == ""
    assert shell.run("pwd") == "/streams"
    assert shell.run("cd ..") == "" and shell.run("pwd") == "/"
    assert shell.run("ls /topics") == "(empty)"
    assert shell.run("tree").splitlines()[:2] == ["/", "├── balancer/"]
    for bad in ("cat /topics", "cd /nowhere", "ls /topics/x", "frobnicate", "cat"):
        with pytest.raises(ShellError):
            shell.run(bad)
    shell.run("exit")
    assert shell.finished
    with pytest.raises(MetadataSourceError):
        from_directory(tmp_path)
    with pytest.raises(MetadataSourceError):
        from_snapshot(tmp_path / "missing.snapshot")
    (tmp_path / "junk.snapshot").write_bytes(b"not a snapshot")
    with pytest.raises(MetadataSourceError, match=r"junk\.snapshot"):
        from_snapshot(tmp_path / "junk.snapshot")


def test_a_partition_being_reassigned_shows_the_replicas_it_leaves() -> None:
    topic_id = "0b7a5a6e-3b0c-4c59-9d5e-1f2a3b4c5d6e"
    shell = MetadataShell(build_tree([
        TopicRecord("moving", topic_id),
        PartitionRecord(topic_id, 0, replicas=(1,), isr=(1,), leader=-1, leader_epoch=3, removing_replicas=(0,)),
        PartitionRecord(topic_id, 1, replicas=(0,), isr=(0,), leader=0, leader_epoch=0),
    ]))
    rows = [line.split() for line in shell.run("cat /topics/moving/partitions").splitlines()]
    assert rows == [
        ["PARTITION", "LEADER", "LEADER", "EPOCH", "REPLICAS", "ISR", "REMOVING"],
        ["0", "-1", "3", "1", "1", "0"],
        ["1", "0", "0", "0", "0", "-"],
    ]
    assert "removing replicas : 0" in shell.run("cat /topics/moving/0")
