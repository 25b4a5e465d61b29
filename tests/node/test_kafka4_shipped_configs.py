"""Kafka 4's shipped ``config/server.properties``, and its ``controller.properties`` with ``broker.properties``, start
Fjord as they are: only the ports (the OS's free ones, on 127.0.0.1) and the log directories are changed, as a test
must, and each node starts in the test's own directory (the objects go to ``data/objects`` under it, the WAL to the
node's log directory, neither named by the files). Those files name no voter, only
``controller.quorum.bootstrap.servers`` (KIP-853's dynamic quorum, which Kafka formats with ``kafka-storage format
--standalone``): the controller naming only itself is the quorum's one voter, and the broker-only node asks its
bootstrap server for the voters as it starts, before or after the controller."""

from __future__ import annotations

import subprocess
from pathlib import Path

from confluent_kafka import Consumer, Producer

from testkit.node_process import server_command
from testkit.waiting import eventually
from wire.ports import free_ports

_COMMON = """\
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600
num.partitions=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
log.retention.hours=168
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
"""

#: Kafka 4's config/server.properties (a combined node), its keys and values as Kafka ships them.
KAFKA4_SERVER_PROPERTIES = """\
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=localhost:9093
listeners=PLAINTEXT://:9092,CONTROLLER://:9093
inter.broker.listener.name=PLAINTEXT
advertised.listeners=PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093
controller.listener.names=CONTROLLER
log.dirs=/tmp/kraft-combined-logs
num.recovery.threads.per.data.dir=1
""" + _COMMON

#: Kafka 4's config/controller.properties.
KAFKA4_CONTROLLER_PROPERTIES = """\
process.roles=controller
node.id=1
controller.quorum.bootstrap.servers=localhost:9093
listeners=CONTROLLER://:9093
advertised.listeners=CONTROLLER://localhost:9093
controller.listener.names=CONTROLLER
log.dirs=/tmp/kraft-controller-logs
num.recovery.threads.per.data.dir=1
""" + _COMMON

#: Kafka 4's config/broker.properties.
KAFKA4_BROKER_PROPERTIES = """\
process.roles=broker
node.id=2
controller.quorum.bootstrap.servers=localhost:9093
listeners=PLAINTEXT://localhost:9092
inter.broker.listener.name=PLAINTEXT
advertised.listeners=PLAINTEXT://localhost:9092
controller.listener.names=CONTROLLER
log.dirs=/tmp/kraft-broker-logs
num.recovery.threads.per.data.dir=2
""" + _COMMON


def _as_test_runs_it(text: str, root: Path, client_port: int, controller_port: int) -> str:
    """The file with the test's own ports (listeners on 127.0.0.1) and directories; nothing else changed."""
    text = text.replace("://:", "://127.0.0.1:").replace("PLAINTEXT://localhost:9092", "PLAINTEXT://127.0.0.1:9092")
    text = text.replace(":9092", f":{client_port}").replace(":9093", f":{controller_port}")
    return text.replace("/tmp/", f"{root}/")


class _Node:
    def __init__(self, root: Path, name: str, text: str) -> None:
        self.config = root / f"{name}.properties"
        self.config.write_text(text)
        self.log_path = root / f"{name}.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(server_command(self.config, {}), cwd=root, stdout=log,
                                         stderr=subprocess.STDOUT)

    def log_text(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
                raise AssertionError(f"{self.config.name} did not stop on SIGTERM:\n{self.log_text()}") from None
        return int(self.proc.returncode)


def _round_trip(port: int, logs: str | None = None) -> None:
    """A record produced and read back by a KIP-848 consumer group, through librdkafka."""
    bootstrap = f"127.0.0.1:{port}"
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce("kafka4-quickstart-events", b"hello from Kafka 4's config")
    assert producer.flush(30) == 0, logs
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "quickstart", "group.protocol": "consumer",
                         "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe(["kafka4-quickstart-events"])

        def read() -> bytes | None:
            message = consumer.poll(0.5)
            return message.value() if message is not None and message.error() is None else None

        got = eventually(read, timeout=30, interval=0.01, what="the record read back")
        assert got == b"hello from Kafka 4's config"
    finally:
        consumer.close()


def test_kafkas_shipped_combined_server_properties_start_a_standalone_node(tmp_path: Path) -> None:
    client_port, controller_port = free_ports(2)
    node = _Node(tmp_path, "server", _as_test_runs_it(KAFKA4_SERVER_PROPERTIES, tmp_path, client_port,
                                                      controller_port))
    try:
        eventually(lambda: "serving" in node.log_text() or node.proc.poll() is not None, timeout=60,
                   what=lambda: f"the node to serve:\n{node.log_text()}")
        assert node.proc.poll() is None, node.log_text()
        _round_trip(client_port, node.log_text())
        # share.coordinator.state.topic.*: accepted, with the reason they change nothing in Fjord.
        assert "isn't a known config" not in node.log_text()
        assert "share.coordinator.state.topic.min.isr has no effect in Fjord" in node.log_text()
        # Kafka's files name no s3.* key: the WAL is the node's, under its log directory, as Kafka's data would be;
        # the objects, which every node of a cluster shares, are under the directory the node started in.
        logs = tmp_path / "kraft-combined-logs"
        assert f"WAL file://{logs / 'wal'}, objects in file://data/objects" in node.log_text()
        assert (logs / "wal" / "trim.checkpoint").is_file() and (tmp_path / "data" / "objects").is_dir()
    finally:
        assert node.stop() == 0, node.log_text()


def test_kafkas_shipped_broker_properties_find_the_controller_of_controller_properties(tmp_path: Path) -> None:
    """The broker starts first, as nothing orders them: it asks its bootstrap server until the controller answers."""
    client_port, controller_port = free_ports(2)
    broker = _Node(tmp_path, "broker", _as_test_runs_it(KAFKA4_BROKER_PROPERTIES, tmp_path, client_port,
                                                        controller_port))
    controller = None
    try:
        controller = _Node(tmp_path, "controller", _as_test_runs_it(KAFKA4_CONTROLLER_PROPERTIES, tmp_path,
                                                                    client_port, controller_port))

        def logs() -> str:
            return f"broker:\n{broker.log_text()}\ncontroller:\n{controller.log_text() if controller else ''}"

        eventually(lambda: "node 2 serving" in broker.log_text() or broker.proc.poll() is not None, timeout=60,
                   what=lambda: f"the broker to serve:\n{logs()}")
        assert broker.proc.poll() is None, logs()
        assert f"voters 1@localhost:{controller_port}" in broker.log_text(), logs()
        _round_trip(client_port, logs())
    finally:
        broker_status = broker.stop()
        controller_status = controller.stop() if controller is not None else 0
    assert (broker_status, controller_status) == (0, 0)


def _in_quorum(text: str, node_id: int, controller_ports: list[int]) -> str:
    """The file as Kafka's guide for three controllers has it: the node's own id, every controller in the bootstrap
    servers (given after ``_as_test_runs_it``, which replaces ports by their text)."""
    servers = ",".join(f"localhost:{port}" for port in controller_ports)
    lines = [f"node.id={node_id}" if line.startswith("node.id=") else
             f"controller.quorum.bootstrap.servers={servers}" if line.startswith("controller.quorum.bootstrap") else
             line for line in text.splitlines()]
    return "\n".join(lines) + "\n"


def test_three_controllers_formatted_with_initial_controllers_serve_a_broker(tmp_path: Path) -> None:
    """Kafka's way to found a quorum of several controllers from files that name only bootstrap servers:
    ``kafka-storage random-uuid``, then ``kafka-storage format -t ID --initial-controllers ...`` on every controller
    and ``format -t ID`` on the broker. ``fjord storage`` takes the same steps."""
    client_port, *controller_ports = free_ports(4)
    made = subprocess.run([*_fjord(), "storage", "random-uuid"], capture_output=True, text=True, check=True)
    cluster_id = made.stdout.strip()
    initial = ",".join(f"{i}@localhost:{port}" for i, port in enumerate(controller_ports, start=1))
    files: dict[str, str] = {}
    for node_id, port in enumerate(controller_ports, start=1):
        text = KAFKA4_CONTROLLER_PROPERTIES.replace("kraft-controller-logs", f"controller-{node_id}")
        files[f"controller-{node_id}"] = _in_quorum(_as_test_runs_it(text, tmp_path, client_port, port), node_id,
                                                    controller_ports)
    files["broker"] = _in_quorum(_as_test_runs_it(KAFKA4_BROKER_PROPERTIES, tmp_path, client_port, 0), 4,
                                 controller_ports)
    for name, text in files.items():
        (tmp_path / f"{name}.properties").write_text(text)
        flags = ["--initial-controllers", initial] if name.startswith("controller") else []
        done = subprocess.run([*_fjord(), "storage", "format", "-t", cluster_id, "-c",
                               str(tmp_path / f"{name}.properties"), *flags], capture_output=True, text=True,
                              check=False)
        assert done.returncode == 0 and done.stdout.startswith("Formatting"), done.stderr
    nodes = [_Node(tmp_path, name, text) for name, text in files.items()]
    try:
        def logs() -> str:
            return "\n".join(f"{node.config.name}:\n{node.log_text()}" for node in nodes)

        broker = nodes[-1]
        eventually(lambda: "node 4 serving" in broker.log_text() or broker.proc.poll() is not None, timeout=90,
                   what=lambda: f"the broker to serve:\n{logs()}")
        assert broker.proc.poll() is None, logs()
        assert f"of cluster {cluster_id} started: voters 1@localhost:" in nodes[0].log_text(), logs()
        _round_trip(client_port, logs())
    finally:
        statuses = [node.stop() for node in reversed(nodes)]
    assert statuses == [0, 0, 0, 0]


def _fjord() -> list[str]:
    return server_command(None, {})[:3]  # the interpreter and ``-m node.cli``
