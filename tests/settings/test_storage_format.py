"""``fjord storage format`` (Kafka's ``kafka-storage format``): which flags a node takes, as Kafka's rules say, what
it writes, and that a node then starts with the voters and the cluster id it was formatted with."""

from __future__ import annotations

import re
import stat
from pathlib import Path

import pytest

from node.cli import main
from settings.bootstrap_file import read_bootstrap
from settings.kafka_uuid import is_kafka_uuid, new_kafka_uuid
from settings.meta_properties import ensure_quorum_meta_properties, read_meta_properties
from settings.quorum_voters import QuorumVoter
from settings.scram_option import parse_add_scram
from settings.server import ServerConfig
from settings.storage_format import FormatRequest, format_storage
from storage.config import ConfigError
from wire.sasl.scram import SCRAM_SHA_512

BOOTSTRAP = "controller.quorum.bootstrap.servers=localhost:9093,localhost:9094,localhost:9095"
INITIAL = f"1@localhost:9093:{new_kafka_uuid()},2@localhost:9094,3@localhost:9095"


def _controller(root: Path, node_id: int, *extra: str) -> tuple[str, ...]:
    return (f"node.id={node_id}", "process.roles=controller", f"listeners=CONTROLLER://:{9092 + node_id}",
            f"advertised.listeners=CONTROLLER://localhost:{9092 + node_id}", "controller.listener.names=CONTROLLER",
            f"log.dirs={root / f'c{node_id}'}", BOOTSTRAP, *extra)


def _broker(root: Path) -> tuple[str, ...]:
    return ("node.id=4", "process.roles=broker", "listeners=PLAINTEXT://localhost:9092",
            "controller.listener.names=CONTROLLER", f"log.dirs={root / 'b1'},{root / 'b2'}", BOOTSTRAP)


def _format(overrides: tuple[str, ...], cluster_id: str, **flags: object) -> list[str]:
    return format_storage(FormatRequest(cluster_id=cluster_id, overrides=overrides, **flags))  # type: ignore[arg-type]


def test_controllers_formatted_with_initial_controllers_start_with_those_voters_and_that_cluster_id(
    tmp_path: Path,
) -> None:
    cluster_id = new_kafka_uuid()
    for node_id in (1, 2, 3):
        [line] = _format(_controller(tmp_path, node_id), cluster_id, initial_controllers=INITIAL)
        assert line.startswith(f"Formatting dynamic metadata voter directory {tmp_path / f'c{node_id}'}")
    voters = (QuorumVoter(1, "localhost", 9093), QuorumVoter(2, "localhost", 9094), QuorumVoter(3, "localhost", 9095))
    config = ServerConfig.load(None, list(_controller(tmp_path, 2)))
    assert config.voters == voters
    assert ensure_quorum_meta_properties(config).cluster_id == cluster_id  # not derived from the voters
    bootstrap = read_bootstrap(tmp_path / "c2")
    assert bootstrap is not None and bootstrap.voters == voters


def test_standalone_makes_this_controller_the_one_voter_whatever_its_bootstrap_servers_name(tmp_path: Path) -> None:
    _format(_controller(tmp_path, 2), new_kafka_uuid(), standalone=True)
    assert ServerConfig.load(None, list(_controller(tmp_path, 2))).voters == (QuorumVoter(2, "localhost", 9094),)


def test_a_broker_is_formatted_in_every_log_dir_and_keeps_finding_its_voters(tmp_path: Path) -> None:
    cluster_id = new_kafka_uuid()
    lines = _format(_broker(tmp_path), cluster_id, no_initial_controllers=True)
    assert len(lines) == 2
    for directory in ("b1", "b2"):
        meta = read_meta_properties(tmp_path / directory)
        assert meta is not None and (meta.node_id, meta.cluster_id) == (4, cluster_id)
    config = ServerConfig.load(None, list(_broker(tmp_path)))
    assert config.voters == ()
    # Its voters come from the bootstrap servers; its cluster id is the one it was formatted with.
    formatted = ServerConfig.load(None, [*_broker(tmp_path), "controller.quorum.voters=1@localhost:9093"])
    assert ensure_quorum_meta_properties(formatted).cluster_id == cluster_id


def test_a_controller_formatted_without_initial_controllers_starts_with_no_voter_to_join_later(tmp_path: Path) -> None:
    cluster_id = new_kafka_uuid()
    [line] = _format(_controller(tmp_path, 3), cluster_id, no_initial_controllers=True)
    assert "observes the quorum until fjord metadata-quorum add-controller adds it" in line
    config = ServerConfig.load(None, list(_controller(tmp_path, 3)))
    assert (config.voters, config.joins_quorum, config.dynamic_quorum) == ((), True, True)
    assert ensure_quorum_meta_properties(config).cluster_id == cluster_id
    # An unformatted controller whose bootstrap servers name others is still refused: it could found a new cluster.
    with pytest.raises(ConfigError, match=r"controller\.quorum\.bootstrap\.servers"):
        ServerConfig.load(None, list(_controller(tmp_path, 2)))


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({}, "Because controller.quorum.voters is not set on this controller, you must specify one of the following: "
             "--standalone, --initial-controllers, or --no-initial-controllers."),
        ({"initial_controllers": "1@localhost:9093,2@localhost:9094"}, "--initial-controllers: this controller "
                                                                       "(node.id 3) is not among them"),
        ({"initial_controllers": "1@localhost:9093:bad-id"}, "--initial-controllers: '1@localhost:9093:bad-id'"),
        ({"standalone": True, "no_initial_controllers": True}, "--standalone and --no-initial-controllers: give only"),
    ],
)
def test_a_controller_with_bootstrap_servers_takes_kafkas_flags(
    tmp_path: Path, flags: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        _format(_controller(tmp_path, 3), new_kafka_uuid(), **flags)
    assert str(info.value).startswith(message) and "\n" not in str(info.value)
    assert not (tmp_path / "c3").exists(), "nothing is written when the format fails"


def test_a_static_quorum_takes_no_voter_flag_and_a_bad_cluster_id_is_refused(tmp_path: Path) -> None:
    static = (*_controller(tmp_path, 1), "controller.quorum.voters=1@localhost:9093")
    with pytest.raises(ConfigError, match=r"^--standalone: the quorum's voters are given by controller\.quorum"):
        _format(static, new_kafka_uuid(), standalone=True)
    with pytest.raises(ConfigError, match=r"^--cluster-id: 'abc' is not a 22-character base64url UUID"):
        _format(static, "abc")
    with pytest.raises(ConfigError, match=r"^--standalone: this node is not a controller"):
        _format(_broker(tmp_path), new_kafka_uuid(), standalone=True)
    [line] = _format(static, new_kafka_uuid())
    assert line.startswith(f"Formatting metadata directory {tmp_path / 'c1'} with cluster id")


def test_a_formatted_directory_is_refused_unless_ignored(tmp_path: Path) -> None:
    first, second = new_kafka_uuid(), new_kafka_uuid()
    _format(_broker(tmp_path), first)
    with pytest.raises(ConfigError, match=re.escape(f"Log directory {tmp_path / 'b1'} is already formatted")):
        _format(_broker(tmp_path), second)
    assert _format(_broker(tmp_path), first, ignore_formatted=True) == [
        "All of the log directories are already formatted."
    ]
    meta = read_meta_properties(tmp_path / "b1")
    assert meta is not None and meta.cluster_id == first


def test_the_command_prints_an_id_and_fails_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["storage", "random-uuid"]) == 0
    assert is_kafka_uuid(capsys.readouterr().out.strip())
    config = tmp_path / "controller.properties"
    config.write_text("\n".join(_controller(tmp_path, 1)) + "\n")
    assert main(["storage", "format", "-t", new_kafka_uuid(), "-c", str(config)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("fjord storage format: Because controller.quorum.voters is not set") and err.count("\n") == 1
    assert main(["storage", "format", "-t", new_kafka_uuid(), "-c", str(config), "--standalone"]) == 0
    assert capsys.readouterr().out.startswith("Formatting dynamic metadata voter directory")


def test_a_file_without_process_roles_is_the_combined_node_it_starts_as(tmp_path: Path) -> None:
    """Fjord's default process.roles is broker,controller (its embedded node), so the format reads it so too."""
    combined = (f"log.dirs={tmp_path / 'n'}", "controller.quorum.bootstrap.servers=localhost:9093",
                "listeners=PLAINTEXT://:9092,CONTROLLER://:9093", "controller.listener.names=CONTROLLER")
    [line] = _format(combined, new_kafka_uuid(), standalone=True)
    assert line.startswith("Formatting dynamic metadata voter directory")
    assert ServerConfig.load(None, list(combined)).voters == (QuorumVoter(0, "localhost", 9093),)


def test_no_initial_controllers_is_taken_wherever_it_adds_no_voter(tmp_path: Path) -> None:
    """As Kafka's: a script passing -N to every broker, or to a node of a static quorum, formats it."""
    static = (*_controller(tmp_path, 1), "controller.quorum.voters=1@localhost:9093")
    assert len(_format(static, new_kafka_uuid(), no_initial_controllers=True)) == 1
    assert len(_format(_broker(tmp_path), new_kafka_uuid(), no_initial_controllers=True)) == 2


def test_ignore_formatted_does_not_mix_two_clusters_in_one_node(tmp_path: Path) -> None:
    first = new_kafka_uuid()
    _format((*_broker(tmp_path)[:-2], f"log.dirs={tmp_path / 'b1'}", BOOTSTRAP), first)
    with pytest.raises(ConfigError, match=re.escape(f"Log directory {tmp_path / 'b1'} is formatted with cluster id")):
        _format(_broker(tmp_path), new_kafka_uuid(), ignore_formatted=True)
    assert not (tmp_path / "b2").exists()
    [line] = _format(_broker(tmp_path), first, ignore_formatted=True)
    assert line == f"Formatting data directory {tmp_path / 'b2'} with cluster id {first}"


SECRET = "format-secret-never-written"


def test_add_scram_and_feature_are_kept_salted_for_a_brokers_first_start(tmp_path: Path) -> None:
    """Kafka's ``--add-scram`` and ``--feature``: the file holds the salted password only, readable by its owner."""
    scram = (parse_add_scram(f"SCRAM-SHA-512=[name=admin,password={SECRET},iterations=8192]"),)
    [line1, line2] = _format(_broker(tmp_path), new_kafka_uuid(), scram=scram, features=("group.version=0",))
    assert line1.endswith("; its first start applies SCRAM credentials of admin and feature levels group.version=0")
    assert line2.startswith(f"Formatting data directory {tmp_path / 'b2'}")
    path = tmp_path / "b1" / "bootstrap.properties"
    assert SECRET not in path.read_text() and stat.S_IMODE(path.stat().st_mode) == 0o600
    bootstrap = read_bootstrap(tmp_path / "b1")
    assert bootstrap is not None and bootstrap.features == ("group.version=0",)
    [credential] = bootstrap.scram
    assert credential == scram[0]
    assert credential.salted_password == SCRAM_SHA_512.salted_password(SECRET, credential.salt, 8192)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"features": ("group.version=0", "group.version=1")}, "--feature: group.version is given twice"),
        ({"features": ("group.version=0",)}, "--feature: give it to a broker's or combined node's format"),
        ({"features": ("metadata.version=14", "group.version=0"), "release_version": "3.6"},
         "--release-version: give it to a broker's or combined node's format"),
        ({"scram": (parse_add_scram(f"SCRAM-SHA-256=[name=a,password={SECRET}]"),)},
         "--add-scram: give it to a broker's or combined node's format"),
    ],
)
def test_first_start_options_a_node_would_not_apply_are_refused(
    tmp_path: Path, flags: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}"):
        _format(_controller(tmp_path, 1), new_kafka_uuid(), standalone=True, **flags)
    assert not (tmp_path / "c1").exists()


def test_add_scram_for_a_formatted_metadata_directory_is_refused_even_when_ignored(tmp_path: Path) -> None:
    """-g skips formatted directories; the users would then never be created, so the format says so."""
    cluster_id = new_kafka_uuid()
    _format(_broker(tmp_path), cluster_id)
    scram = (parse_add_scram(f"SCRAM-SHA-256=[name=admin,password={SECRET}]"),)
    with pytest.raises(ConfigError, match=r"^--add-scram: the metadata directory .* is formatted already"):
        _format(_broker(tmp_path), cluster_id, ignore_formatted=True, scram=scram)


def test_this_controllers_directory_id_from_initial_controllers_is_its_metadata_directorys(tmp_path: Path) -> None:
    own = new_kafka_uuid()
    _format(_controller(tmp_path, 2), new_kafka_uuid(), initial_controllers=f"1@localhost:9093,2@localhost:9094:{own}")
    meta = read_meta_properties(tmp_path / "c2")
    assert meta is not None and meta.directory_id == own
    with pytest.raises(ConfigError, match=r"^--initial-controllers: '1@\[::1\]' is not id@host:port"):
        _format(_controller(tmp_path, 1), new_kafka_uuid(), initial_controllers="1@[::1]")


def test_a_new_id_never_starts_with_a_dash_that_the_command_line_would_read_as_an_option() -> None:
    """As Kafka's Uuid.randomUuid: one random id in 64 would, and ``-t $(fjord storage random-uuid)`` then fails."""
    ids = [new_kafka_uuid() for _ in range(2000)]
    assert all(is_kafka_uuid(i) and not i.startswith("-") for i in ids)
    assert len({i[0] for i in ids}) == 63  # every other first character still comes up


def test_a_users_credential_given_twice_is_kept_once_the_last(tmp_path: Path) -> None:
    """Kafka's format writes both and its replay keeps the last; sent together they would be refused."""
    config = tmp_path / "broker.properties"
    config.write_text("\n".join(_broker(tmp_path)) + "\n")
    assert main(["storage", "format", "-t", new_kafka_uuid(), "-c", str(config),
                 "-S", "SCRAM-SHA-256=[name=a,password=first,iterations=4096]",
                 "-S", "SCRAM-SHA-256=[name=a,password=last,iterations=8192]"]) == 0
    bootstrap = read_bootstrap(tmp_path / "b1")
    assert bootstrap is not None and [(c.name, c.iterations) for c in bootstrap.scram] == [("a", 8192)]


def test_a_standalone_combined_nodes_line_says_what_its_first_start_applies(tmp_path: Path) -> None:
    combined = (f"log.dirs={tmp_path / 'n'}", "controller.quorum.bootstrap.servers=localhost:9093",
                "listeners=PLAINTEXT://:9092,CONTROLLER://:9093", "controller.listener.names=CONTROLLER")
    scram = (parse_add_scram(f"SCRAM-SHA-256=[name=admin,password={SECRET}]"),)
    [line] = _format(combined, new_kafka_uuid(), standalone=True, scram=scram)
    assert line.startswith("Formatting dynamic metadata voter directory")
    assert line.endswith("; its first start applies SCRAM credentials of admin") and SECRET not in line


def test_kraft_version_is_taken_only_at_the_level_the_voter_flags_give_and_is_not_written(tmp_path: Path) -> None:
    """Kafka's format rule: ``--feature kraft.version=1`` with --standalone, --initial-controllers or
    --no-initial-controllers (a dynamic quorum), 0 without them. It is the quorum's level, not one to finalize."""
    static = (*_controller(tmp_path, 1), "controller.quorum.voters=1@localhost:9093")
    with pytest.raises(ConfigError, match=r"^Cannot set kraft\.version to 1 unless controller\.quorum\.voters is "):
        _format(static, new_kafka_uuid(), features=("kraft.version=1",))
    with pytest.raises(ConfigError, match=r"^Cannot set kraft\.version to 0 if controller\.quorum\.voters is empty"):
        _format(_controller(tmp_path, 2), new_kafka_uuid(), standalone=True, features=("kraft.version=0",))
    assert not (tmp_path / "c1").exists() and not (tmp_path / "c2").exists()
    # A controller takes it (a controller-only node takes no level to finalize, but this one is the quorum's).
    _format(static, new_kafka_uuid(), features=("kraft.version=0",))
    _format(_controller(tmp_path, 2), new_kafka_uuid(), standalone=True, features=("kraft.version=1",))
    for directory in ("c1", "c2"):
        bootstrap = read_bootstrap(tmp_path / directory)
        assert bootstrap is not None and bootstrap.features == (), directory
    # A broker's first start finalizes the other levels, never kraft.version.
    _format(_broker(tmp_path), new_kafka_uuid(), no_initial_controllers=True,
            features=("kraft.version=1", "group.version=0"))
    broker = read_bootstrap(tmp_path / "b1")
    assert broker is not None and broker.features == ("group.version=0",)
