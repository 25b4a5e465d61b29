"""A dynamic quorum gains and loses controllers while a broker serves (KIP-853), as Kafka 4's guide does it:
``kafka-storage format --no-initial-controllers`` on the new controller, start it, ``kafka-metadata-quorum
add-controller``; later ``remove-controller`` for the old one. Real processes started from Kafka 4's shipped
``controller.properties`` and ``broker.properties`` (only ports and directories changed); ``fjord storage`` and
``fjord metadata-quorum`` take Kafka's tools' steps."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer
from kio.schema.errors import ErrorCode

from testkit.node_process import WireClient, server_command
from testkit.waiting import eventually
from tests.broker.test_features import SAFE_DOWNGRADE, UPGRADE, features, update
from tests.node.test_kafka4_shipped_configs import (
    KAFKA4_BROKER_PROPERTIES,
    KAFKA4_CONTROLLER_PROPERTIES,
    _as_test_runs_it,
    _Node,
)
from wire import codec, schema
from wire.ports import free_ports


def _fjord(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*server_command(None, {})[:3], *args], capture_output=True, text=True, check=False,
                          timeout=120)


def _controller_file(root: Path, node_id: int, port: int, bootstrap: str) -> Path:
    text = _as_test_runs_it(KAFKA4_CONTROLLER_PROPERTIES.replace("kraft-controller-logs", f"controller-{node_id}"),
                            root, 0, port)
    text = text.replace("node.id=1", f"node.id={node_id}")
    text = text.replace(f"controller.quorum.bootstrap.servers=localhost:{port}",
                        f"controller.quorum.bootstrap.servers={bootstrap}")
    path = root / f"controller-{node_id}.properties"
    path.write_text(text)
    return path


def _fields(text: str) -> dict[str, str]:
    return dict(line.split(None, 1) for line in text.splitlines() if " " in line.strip())


def _produce_and_read(port: int, topic: str, value: bytes, logs: str) -> None:
    """A record produced to a new topic (auto-created: a write of the active controller) and read back."""
    bootstrap = f"127.0.0.1:{port}"
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic, value)
    assert producer.flush(60) == 0, logs
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])

        def read() -> bytes | None:
            message = consumer.poll(0.5)
            return message.value() if message is not None and message.error() is None else None

        assert eventually(read, timeout=60, interval=0.01, what="the record read back") == value, logs
    finally:
        consumer.close()


def test_a_controller_is_added_to_a_running_quorum_and_the_first_one_removed_while_a_broker_serves(
    tmp_path: Path,
) -> None:
    client_port, port1, port2 = free_ports(3)
    cluster_id = _fjord("storage", "random-uuid").stdout.strip()
    both = f"localhost:{port1},localhost:{port2}"
    first = _controller_file(tmp_path, 1, port1, f"localhost:{port1}")
    second = _controller_file(tmp_path, 3, port2, both)
    broker_text = _as_test_runs_it(KAFKA4_BROKER_PROPERTIES, tmp_path, client_port, port1)
    broker_text = broker_text.replace(f"controller.quorum.bootstrap.servers=localhost:{port1}",
                                      f"controller.quorum.bootstrap.servers={both}")
    # Kafka's format takes kraft.version 1 with --standalone (and refuses 0 there): the quorum's level, not written.
    refused = _fjord("storage", "format", "-t", cluster_id, "-c", str(first), "--standalone", "-f", "kraft.version=0")
    assert refused.returncode == 1 and "Cannot set kraft.version to 0" in refused.stderr, refused.stderr
    formatted = _fjord("storage", "format", "-t", cluster_id, "-c", str(first), "--standalone",
                       "--feature", "kraft.version=1")
    assert formatted.returncode == 0, formatted.stderr
    joining = _fjord("storage", "format", "-t", cluster_id, "-c", str(second), "--no-initial-controllers")
    assert joining.returncode == 0 and "until fjord metadata-quorum add-controller" in joining.stdout, joining.stderr
    broker_file = tmp_path / "broker-formatted.properties"
    broker_file.write_text(broker_text)
    assert _fjord("storage", "format", "-t", cluster_id, "-c", str(broker_file)).returncode == 0
    nodes: dict[str, _Node] = {}

    def logs() -> str:
        return "\n".join(f"--- {name}:\n{node.log_text()[-6000:]}" for name, node in nodes.items())

    def quorum(via: int, *args: str) -> subprocess.CompletedProcess[str]:
        return _fjord("metadata-quorum", "--bootstrap-controller", f"localhost:{via}", *args)

    try:
        nodes["controller-1"] = _Node(tmp_path, "c1", first.read_text())
        nodes["broker"] = _Node(tmp_path, "broker", broker_text)
        eventually(lambda: "node 2 serving" in nodes["broker"].log_text(), timeout=90,
                   what=lambda: f"the broker to serve:\n{logs()}")
        _produce_and_read(client_port, "before", b"one voter", logs())
        # The quorum is dynamic: broker and controller report kraft.version 1, as Kafka 4's do (kafka-features
        # describe); it is the quorum's, so it can be named again but not downgraded.
        for port in (client_port, port1):
            with WireClient(port) as wire:
                supported, finalized, _ = features(wire)
            assert (supported["kraft.version"], finalized["kraft.version"]) == ((0, 1), 1), (port, finalized)
        with WireClient(client_port) as wire:
            assert update(wire, ("kraft.version", 1, UPGRADE)).error_code == ErrorCode.none
            downgrade = update(wire, ("kraft.version", 0, SAFE_DOWNGRADE))
            assert downgrade.error_code == ErrorCode.invalid_update_version, downgrade
            assert downgrade.error_message.endswith("Can't downgrade the version of this feature."), downgrade
            assert features(wire)[1]["kraft.version"] == 1
        # fjord features (kafka-features.sh) says the same through the controllers, and asks the leader to update.
        described = _fjord("features", "--bootstrap-controller", f"localhost:{port1}", "describe")
        assert "Feature: kraft.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 1\tFinalizedVersionLevel: 1\t" \
            in described.stdout, described.stderr
        same = _fjord("features", "--bootstrap-controller", f"localhost:{port1}", "upgrade", "--feature",
                      "kraft.version=1")
        assert (same.returncode, same.stdout.strip()) == (0, "kraft.version was upgraded to 1."), same.stderr

        nodes["controller-3"] = _Node(tmp_path, "c3", second.read_text())
        eventually(lambda: "found the quorum through controller.quorum.bootstrap.servers" in
                   nodes["controller-3"].log_text(), timeout=60, what=lambda: f"controller 3 to observe:\n{logs()}")
        # Removing a voter that is not there, or one of another cluster's quorum, is refused with Kafka's code.
        missing = quorum(port1, "remove-controller", "--controller-id", "7")
        assert missing.returncode == 1 and "VOTER_NOT_FOUND" in missing.stderr, missing.stderr
        # A broker forwards a voter change to the quorum's leader, as Kafka's do (an Admin client's
        # removeRaftVoter through --bootstrap-server).
        with WireClient(client_port) as wire:
            request = schema.build(codec.request_class(81, 0), cluster_id=cluster_id, voter_id=7,
                                   voter_directory_id=uuid.UUID(int=0))
            forwarded = wire.request(request)
        assert forwarded.error_code is ErrorCode.voter_not_found, forwarded
        with WireClient(client_port) as wire:
            forwarded = wire.request(schema.build(codec.request_class(81, 0), cluster_id="another-cluster", voter_id=1,
                                                  voter_directory_id=uuid.UUID(int=0)))
        assert forwarded.error_code is ErrorCode.inconsistent_cluster_id, forwarded

        def added() -> str | None:
            done = quorum(port1, "--command-config", str(second), "add-controller")
            prefix = "Added controller 3 with directory id "
            return done.stdout.removeprefix(prefix).split()[0] if done.stdout.startswith(prefix) else None

        directory_id = eventually(added, timeout=60, interval=0.5,
                                  what=lambda: f"controller 3 to be added:\n{logs()}")
        meta = (tmp_path / "controller-3" / "meta.properties").read_text()
        assert f"directory.id={directory_id}" in meta
        status = quorum(port2, "describe", "--status")
        assert status.returncode == 0, status.stderr
        assert _fields(status.stdout)["CurrentVoters:"] == "[1, 3]", status.stdout
        again = quorum(port1, "--command-config", str(second), "add-controller")
        assert again.returncode == 1 and "DUPLICATE_VOTER" in again.stderr, again.stderr

        removed = quorum(port2, "remove-controller", "--controller-id", "1")
        assert removed.returncode == 0 and removed.stdout.strip() == "Removed controller 1", removed.stderr
        # Controller 3 alone is the quorum now: it leads, and the broker's writes reach it once 1 is gone.
        status = quorum(port2, "describe", "--replication")
        assert status.returncode == 0, status.stderr
        rows = {line.split()[0]: line.split() for line in status.stdout.splitlines()[1:]}
        assert rows["3"][1] == directory_id and rows["3"][-1] == "Leader" and "1" not in rows, status.stdout
        assert nodes.pop("controller-1").stop() == 0
        _produce_and_read(client_port, "after", b"the added voter alone", logs())

        # Its log names the voters: a restart of controller 3 leads the quorum again with nobody to ask.
        assert nodes.pop("controller-3").stop() == 0
        nodes["controller-3"] = _Node(tmp_path, "c3-restarted", second.read_text())
        eventually(lambda: _fields(quorum(port2, "describe", "--status").stdout).get("LeaderId:") == "3",
                   timeout=60, interval=0.5, what=lambda: f"controller 3 to lead after its restart:\n{logs()}")
        _produce_and_read(client_port, "restarted", b"after the restart", logs())
    finally:
        statuses = {name: node.stop() for name, node in reversed(nodes.items())}
    assert set(statuses.values()) <= {0}, (statuses, logs())
