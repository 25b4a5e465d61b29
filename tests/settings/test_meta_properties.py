"""meta.properties: formatted on first start, checked on every later one, as Kafka does."""

from __future__ import annotations

import base64
import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from controller.controller import Controller
from settings.meta_properties import (
    MetaProperties,
    ensure_meta_properties,
    ensure_quorum_meta_properties,
    new_cluster_id,
    read_meta_properties,
    write_meta_properties,
)
from settings.quorum_voters import QuorumVoter
from settings.server import ServerConfig
from storage.config import ConfigError, read_properties


def test_first_start_formats_the_directory(tmp_path: Path) -> None:
    meta = ensure_meta_properties(tmp_path / "kraft", 5)
    props = read_properties(tmp_path / "kraft" / "meta.properties")
    assert props["version"] == "1" and props["node.id"] == "5" and props["cluster.id"] == meta.cluster_id
    assert len(meta.cluster_id) == 22
    assert len(base64.urlsafe_b64decode(meta.cluster_id + "==")) == 16
    assert not list((tmp_path / "kraft").glob("*.tmp"))


def test_later_starts_keep_the_cluster_id(tmp_path: Path) -> None:
    first = ensure_meta_properties(tmp_path, 1)
    second = ensure_meta_properties(tmp_path, 1)
    assert second == first


def test_cluster_ids_are_random() -> None:
    assert len({new_cluster_id() for _ in range(50)}) == 50


def test_another_node_id_is_a_one_line_error(tmp_path: Path) -> None:
    ensure_meta_properties(tmp_path, 1)
    with pytest.raises(ConfigError) as info:
        ensure_meta_properties(tmp_path, 2)
    message = str(info.value)
    assert "node.id=1" in message and "node.id=2" in message and str(tmp_path) in message
    assert "\n" not in message


def test_another_cluster_is_refused(tmp_path: Path) -> None:
    ensure_meta_properties(tmp_path, 1)
    with pytest.raises(ConfigError, match="belongs to cluster"):
        ensure_meta_properties(tmp_path, 1, new_cluster_id())


def test_voters_written_otherwise_say_where_the_cluster_id_comes_from(tmp_path: Path) -> None:
    """A quorum node without cluster.id derives its id from controller.quorum.voters as written: restarted with
    localhost for 127.0.0.1 it gets another id, and the refusal says why and how to keep the directory's."""

    def config(voters: str, *extra: str) -> ServerConfig:
        return ServerConfig.load(None, ["process.roles=controller", "listeners=CONTROLLER://127.0.0.1:0",
                                        f"controller.quorum.voters={voters}", f"log.dirs={tmp_path}", *extra])

    first = ensure_quorum_meta_properties(config("0@127.0.0.1:29941"))
    assert ensure_quorum_meta_properties(config("0@127.0.0.1:29941")) == first  # the same text: the same id
    with pytest.raises(ConfigError) as info:
        ensure_quorum_meta_properties(config("0@localhost:29941"))
    message = str(info.value)
    assert f"belongs to cluster {first.cluster_id}, not " in message, message
    assert "derived from controller.quorum.voters as written (0@localhost:29941)" in message, message
    assert f"or keep this cluster with cluster.id={first.cluster_id}" in message, message
    assert "\n" not in message
    kept = ensure_quorum_meta_properties(config("0@localhost:29941", f"cluster.id={first.cluster_id}"))
    assert kept == first  # what the message suggests starts the node on its directory


def test_a_node_rolled_to_bootstrap_servers_keeps_its_directorys_cluster(tmp_path: Path) -> None:
    """After kafka-features upgrade --feature kraft.version=1, Kafka's steps replace controller.quorum.voters by
    controller.quorum.bootstrap.servers in every file. A broker then learns the voters from those servers, which may
    have changed since its first start (a controller added or removed): its directory's cluster id stands, not one
    derived from the voters it learned."""
    static = ServerConfig.load(None, ["process.roles=broker", "node.id=5", "listeners=PLAINTEXT://127.0.0.1:0",
                                      "controller.listener.names=CONTROLLER", f"log.dirs={tmp_path}",
                                      "controller.quorum.voters=0@127.0.0.1:29941,1@127.0.0.1:29942"])
    first = ensure_quorum_meta_properties(static)
    rolled = ServerConfig.load(None, ["process.roles=broker", "node.id=5", "listeners=PLAINTEXT://127.0.0.1:0",
                                      "controller.listener.names=CONTROLLER", f"log.dirs={tmp_path}",
                                      "controller.quorum.bootstrap.servers=127.0.0.1:29941"])
    learned = dataclasses.replace(rolled, voters=(QuorumVoter(0, "127.0.0.1", 29941),))  # one controller removed
    assert ensure_quorum_meta_properties(learned) == first


def test_given_cluster_id_is_used_when_formatting(tmp_path: Path) -> None:
    cluster_id = new_cluster_id()
    assert ensure_meta_properties(tmp_path, 0, cluster_id).cluster_id == cluster_id


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("version=0\nbroker.id=1\ncluster.id=AAbC23EEE2iAAdd3R89L7q\n", "unsupported version 0"),
        ("version=1\ncluster.id=AAbC23EEE2iAAdd3R89L7q\n", "node.id is missing"),
        ("version=1\nnode.id=1\ncluster.id=short\n", "cluster.id"),
    ],
)
def test_bad_files_are_named(tmp_path: Path, content: str, message: str) -> None:
    (tmp_path / "meta.properties").write_text(content)
    with pytest.raises(ConfigError, match=message) as info:
        read_meta_properties(tmp_path)
    assert "meta.properties" in str(info.value)


def test_write_then_read(tmp_path: Path) -> None:
    meta = MetaProperties(7, new_cluster_id(), directory_id=new_cluster_id())
    write_meta_properties(tmp_path, meta)
    assert read_meta_properties(tmp_path) == meta


def test_a_directory_without_a_directory_id_is_given_one_and_keeps_it(tmp_path: Path) -> None:
    """An earlier Fjord wrote no directory.id (Kafka 3.7 added it to older directories the same way)."""
    cluster_id = new_cluster_id()
    write_meta_properties(tmp_path, MetaProperties(3, cluster_id))
    given = ensure_meta_properties(tmp_path, 3, cluster_id)
    assert given.directory_id is not None and (given.node_id, given.cluster_id) == (3, cluster_id)
    assert read_meta_properties(tmp_path) == given == ensure_meta_properties(tmp_path, 3)
    (tmp_path / "meta.properties").write_text(f"node.id=3\nversion=1\ncluster.id={cluster_id}\ndirectory.id=x\n")
    with pytest.raises(ConfigError, match=r"directory\.id 'x' is not a 22-character"):
        read_meta_properties(tmp_path)


async def test_controller_start_uses_and_checks_meta_properties(tmp_path: Path) -> None:
    config = ServerConfig.load(None, [f"log.dirs={tmp_path}"])
    controller = await Controller.start(config)
    cluster_id = controller.image.cluster_id
    await controller.close()
    formatted = read_meta_properties(tmp_path)
    assert formatted is not None and (formatted.node_id, formatted.cluster_id) == (0, cluster_id)
    assert formatted.directory_id is not None

    again = await Controller.start(config)
    assert again.image.cluster_id == cluster_id
    await again.close()

    other = ServerConfig.load(None, [f"log.dirs={tmp_path}", "node.id=4", "controller.quorum.voters=4@127.0.0.1:9093"])
    with pytest.raises(ConfigError, match=r"node\.id=0"):
        await Controller.start(other)


def test_a_real_process_formats_then_refuses_a_different_node(tmp_path: Path) -> None:
    """The check happens in a fresh interpreter, as on a real restart."""
    script = (
        "import sys\n"
        "from settings.meta_properties import ensure_meta_properties\n"
        "from storage.config import ConfigError\n"
        "try:\n"
        "    print(ensure_meta_properties(sys.argv[1], int(sys.argv[2])).cluster_id)\n"
        "except ConfigError as exc:\n"
        "    print(exc, file=sys.stderr); sys.exit(2)\n"
    )
    first = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path), "1"], capture_output=True, text=True, timeout=30, check=True
    )
    assert len(first.stdout.strip()) == 22
    second = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path), "2"], check=False, capture_output=True, text=True, timeout=30
    )
    assert second.returncode == 2
    assert len(second.stderr.strip().splitlines()) == 1
