"""``fjord storage format --add-scram --feature`` (Kafka's ``kafka-storage format`` options) on a real node process:
its first start creates the user and finalizes the level, a real client authenticates with that user, and what the
format left is then gone from the node's directory, so a user deleted later stays deleted across restarts."""

from __future__ import annotations

import logging
import stat
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ScramMechanism, UserScramCredentialDeletion

from controller.controller import Controller
from metadata.controller_api import FeatureUpdate
from node.cli import main
from node.first_start import apply_first_start, first_start
from settings.bootstrap_file import Bootstrap, read_bootstrap, write_bootstrap
from settings.kafka_uuid import new_kafka_uuid
from settings.scram_option import parse_add_scram
from settings.server import ServerConfig
from storage.config import ConfigError
from testkit.node_process import WireClient, api_versions_request, default_overrides, start_broker
from wire.sasl.scram import SCRAM_SHA_256, credential_from_salted

PASSWORD = "first-user-secret-never-logged"
SASL = {
    "listeners": "PLAINTEXT://127.0.0.1:0,SASL://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
    "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL:SASL_PLAINTEXT",
    "sasl.enabled.mechanisms": "SCRAM-SHA-256",
}


def _sasl_admin(bootstrap: str, password: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
                        "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "alice", "sasl.password": password})


def _authenticates(bootstrap: str) -> bool:
    try:
        _sasl_admin(bootstrap, PASSWORD).list_topics(timeout=10)
    except KafkaException:
        return False
    return True


def _transaction_version(port: int) -> Any:
    with WireClient(port) as client:
        response = client.request(api_versions_request(3))
    return {f.name: f.max_version_level for f in response.finalized_features}.get("transaction.version")


def test_a_formatted_nodes_first_start_creates_the_user_and_finalizes_the_level_once(tmp_path: Path) -> None:
    settings = {**default_overrides(tmp_path), **SASL}
    config = tmp_path / "server.properties"
    config.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
    assert main(["storage", "format", "-t", new_kafka_uuid(), "-c", str(config),
                 "--feature", "transaction.version=1",
                 "--add-scram", f"SCRAM-SHA-256=[name=alice,password={PASSWORD}]"]) == 0
    metadata_dir = tmp_path / "kraft"
    formatted = metadata_dir / "bootstrap.properties"
    assert stat.S_IMODE(formatted.stat().st_mode) == 0o600 and PASSWORD not in formatted.read_text()

    node = start_broker(tmp_path, SASL)
    try:
        sasl = "{}:{}".format(*node.endpoints["SASL"])
        assert _authenticates(sasl), node.log_text()
        assert _transaction_version(node.port) == 1  # not the default 2: transactions without KIP-890 part 2
        bootstrap = read_bootstrap(metadata_dir)
        assert bootstrap is not None and bootstrap.scram == () and bootstrap.features == ()
        assert "add.scram" not in formatted.read_text()
        # alice is deleted with Kafka's admin API; the node's next start must not create her again.
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{node.port}"})
        [future] = admin.alter_user_scram_credentials(
            [UserScramCredentialDeletion("alice", ScramMechanism.SCRAM_SHA_256)]).values()
        future.result(timeout=30)
    finally:
        assert node.stop() == 0, node.log_text()
    assert PASSWORD not in node.log_text()

    node = start_broker(tmp_path, SASL)
    try:
        assert not _authenticates("{}:{}".format(*node.endpoints["SASL"]))
        assert _transaction_version(node.port) == 1
    finally:
        assert node.stop() == 0, node.log_text()


def test_the_command_line_wins_and_a_controller_only_node_refuses_the_formats_users(tmp_path: Path) -> None:
    cluster_id = new_kafka_uuid()
    from_file = parse_add_scram(f"SCRAM-SHA-256=[name=alice,password={PASSWORD}]")
    write_bootstrap(tmp_path / "kraft", Bootstrap(cluster_id, (), (from_file,), ("transaction.version=1",)))
    combined = ServerConfig.load(None, [f"{k}={v}" for k, v in default_overrides(tmp_path).items()])
    given = parse_add_scram("SCRAM-SHA-256=[name=alice,password=another]")
    options = first_start(combined, [given], [FeatureUpdate("transaction.version", 0)])
    assert options.scram == (given,) and options.features == (FeatureUpdate("transaction.version", 0),)
    assert first_start(combined, [], []).features == (FeatureUpdate("transaction.version", 1),)
    controller = ServerConfig.load(None, [*(f"{k}={v}" for k, v in default_overrides(tmp_path).items()),
                                          "process.roles=controller", "listeners=CONTROLLER://127.0.0.1:0"])
    with pytest.raises(ConfigError, match=r"bootstrap\.properties: its SCRAM users .* controller only\)$"):
        first_start(controller, [], [])


async def test_the_formats_users_are_a_new_clusters_only(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A broker added to a running cluster by the provisioning script that formatted the first one does not bring
    back a user deleted since (Kafka applies a format's records to an empty metadata log only); the command line's
    users are still created, and the file is emptied either way."""
    config = ServerConfig.load(None, [f"log.dirs={tmp_path / 'kraft'}"])
    mallory = parse_add_scram(f"SCRAM-SHA-256=[name=mallory,password={PASSWORD}]")
    bob = parse_add_scram("SCRAM-SHA-256=[name=bob,password=bob-secret]")
    controller = await Controller.start(config)
    try:
        write_bootstrap(config.metadata_dir, Bootstrap(controller.image.cluster_id, (), (mallory,)))
        await controller.register_broker(1, [], None)
        with caplog.at_level(logging.WARNING, logger="node.first_start"):
            await apply_first_start(config, controller, first_start(config, [bob], []))
        assert controller.image.scram_credential("mallory", 1) is None
        assert controller.image.scram_credential("bob", 1) is not None
        assert "SCRAM users mallory not created: the cluster has brokers already (1)" in caplog.text
        bootstrap = read_bootstrap(config.metadata_dir)
        assert bootstrap is not None and bootstrap.scram == ()
    finally:
        await controller.close()


async def test_a_users_last_credential_given_is_created_as_kafkas_replay_keeps_the_last(tmp_path: Path) -> None:
    config = ServerConfig.load(None, [f"log.dirs={tmp_path / 'kraft'}"])
    first, last = (parse_add_scram(f"SCRAM-SHA-256=[name=alice,password={p}]") for p in ("first", "last"))
    controller = await Controller.start(config)
    try:
        write_bootstrap(config.metadata_dir, Bootstrap(controller.image.cluster_id, (), (first, last)))
        await apply_first_start(config, controller, first_start(config, [], []))  # a new cluster: no broker yet
        credential = controller.image.scram_credential("alice", 1)
        assert credential == credential_from_salted(SCRAM_SHA_256, last.salted_password, last.salt, 4096)
    finally:
        await controller.close()


def test_a_release_version_finalizes_that_releases_levels_with_the_given_features_over_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--release-version 3.6``: metadata.version 3.6-IV2 and Kafka's features of that release at their default
    (0: off), a ``--feature`` over them; a release this one does not serve is one line and exit 1."""
    config = tmp_path / "server.properties"
    config.write_text("".join(f"{key}={value}\n" for key, value in default_overrides(tmp_path).items()))
    for args, message in ((("-r", "4.1-IV1"), "unknown release '4.1-IV1'"),
                          (("-r", "3.5-IV2"), "metadata.version 3.5-IV2 is not served"),
                          (("-r", "3.6", "-f", "metadata.version=14"), "give one of them")):
        assert main(["storage", "format", "-t", new_kafka_uuid(), "-c", str(config), *args]) == 1
        assert message in capsys.readouterr().err
    assert not (tmp_path / "kraft").exists()
    assert main(["storage", "format", "-t", new_kafka_uuid(), "-c", str(config), "--release-version", "3.6",
                 "--feature", "group.version=1"]) == 0
    node = start_broker(tmp_path)
    try:
        with WireClient(node.port) as client:
            response = client.request(api_versions_request(3))
        assert {f.name: f.max_version_level for f in response.finalized_features} == {
            "metadata.version": 14, "group.version": 1}
    finally:
        assert node.stop() == 0, node.log_text()
