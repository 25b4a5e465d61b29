"""``fjord features`` (Kafka's kafka-features.sh) run as a subprocess against a real single node: Kafka's describe
lines (``metadata.version`` by its release name), upgrades, downgrades and disables that change what clients then
read in ApiVersions, ``--dry-run`` changing nothing, the controller's refusals printed as Kafka's tool prints them,
and bad input answered with one ``fjord:`` line and exit 1. The dynamic quorum's side (``--bootstrap-controller`` to
the quorum's leader, ``kraft.version`` 1) is in tests/node/test_controller_voter_changes.py."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from testkit.node_process import BrokerProcess, WireClient, start_broker
from tests.broker.test_features import features
from tests.node.cli_exit import assert_one_line_error, run_to_exit


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = start_broker(tmp_path_factory.mktemp("features-cli"))
    yield process
    assert process.stop() == 0, process.log_text()


def fjord(*args: str) -> subprocess.CompletedProcess[str]:
    return run_to_exit([sys.executable, "-m", "node.cli", "features", *args])


def finalized(node: BrokerProcess) -> dict[str, int]:
    with WireClient(node.port) as client:
        return features(client)[1]


def describe(node: BrokerProcess) -> dict[str, list[str]]:
    done = fjord("--bootstrap-server", node.bootstrap, "describe")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    rows = {}
    for line in done.stdout.splitlines():
        fields = dict(item.split(": ", 1) for item in line.split("\t"))
        rows[fields["Feature"]] = [fields["SupportedMinVersion"], fields["SupportedMaxVersion"],
                                   fields["FinalizedVersionLevel"], fields["Epoch"]]
    return rows


def test_describe_prints_kafkas_lines_for_every_supported_feature(node: BrokerProcess) -> None:
    rows = describe(node)
    epoch = rows["metadata.version"][3]
    assert int(epoch) >= 0
    assert rows == {
        "group.version": ["0", "1", str(finalized(node).get("group.version", 0)), epoch],
        "kraft.version": ["0", "1", "0", epoch],  # a local metadata log: voters that cannot change
        "metadata.version": ["3.3-IV3", "3.6-IV2", "3.6-IV2", epoch],
        "share.version": ["0", "1", str(finalized(node).get("share.version", 0)), epoch],
        "transaction.version": ["0", "2", str(finalized(node).get("transaction.version", 0)), epoch],
    }
    by_node = fjord("--bootstrap-server", node.bootstrap, "describe", "--node-id", "0")
    assert by_node.returncode == 0 and by_node.stdout.splitlines()[2].startswith("Feature: metadata.version\t")
    assert_one_line_error(fjord("--bootstrap-server", node.bootstrap, "describe", "--node-id", "7"),
                          "--node-id 7: no such live broker")


def test_upgrades_downgrades_and_disables_change_what_clients_read(node: BrokerProcess) -> None:
    server = ("--bootstrap-server", node.bootstrap)
    dry = fjord(*server, "downgrade", "--feature", "transaction.version=1", "--feature", "group.version=0",
                "--dry-run")
    assert (dry.returncode, dry.stdout.splitlines()) == (0, [
        "group.version can be downgraded to 0.", "transaction.version can be downgraded to 1."]), dry.stderr
    assert (finalized(node)["transaction.version"], finalized(node)["group.version"]) == (2, 1)

    done = fjord(*server, "downgrade", "--feature", "transaction.version=1")
    assert (done.returncode, done.stdout.strip()) == (0, "transaction.version was downgraded to 1."), done.stderr
    assert finalized(node)["transaction.version"] == 1
    assert describe(node)["transaction.version"][2] == "1"
    disabled = fjord(*server, "disable", "--feature", "share.version")
    assert (disabled.returncode, disabled.stdout.strip()) == (0, "share.version was disabled."), disabled.stderr
    assert "share.version" not in finalized(node)
    upgraded = fjord(*server, "upgrade", "--feature", "transaction.version=2", "--feature", "share.version=1")
    assert upgraded.returncode == 0, upgraded.stderr
    assert upgraded.stdout.splitlines() == ["share.version was upgraded to 1.",
                                            "transaction.version was upgraded to 2."]
    assert (finalized(node)["transaction.version"], finalized(node)["share.version"]) == (2, 1)
    # A release names metadata.version; 3.6 is its latest level, the one in force, so nothing changes.
    release = fjord(*server, "upgrade", "--release-version", "3.6")
    assert (release.returncode, release.stdout.strip()) == (0, "metadata.version was upgraded to 14."), release.stderr


def test_refusals_print_the_controllers_reason_and_exit_1_with_nothing_changed(node: BrokerProcess) -> None:
    server = ("--bootstrap-server", node.bootstrap)
    before = finalized(node)
    refused = fjord(*server, "downgrade", "--metadata", "3.5-IV2", "--feature", "group.version=0")
    assert refused.returncode == 1
    lines = refused.stdout.splitlines()
    assert lines[0] == " `metadata` flag is deprecated and may be removed in a future release."
    assert lines[1].startswith("Could not downgrade group.version to 0. The update failed for all features")
    assert lines[2].startswith("Could not downgrade metadata.version to 11. ") and "might delete metadata" in lines[2]
    assert_one_line_error(refused, "2 out of 2 operation(s) failed.")
    kraft = fjord(*server, "upgrade", "--feature", "kraft.version=1", "--dry-run")
    assert kraft.stdout.startswith("Can not upgrade kraft.version to 1. ") and "local log" in kraft.stdout
    assert_one_line_error(kraft, "1 out of 1 operation(s) failed.")
    assert finalized(node) == before
    # The node's CONTROLLER listener only reads (its broker authorizes its writes): a clear line, not a hang.
    controller = f"127.0.0.1:{node.listener_ports['CONTROLLER']}"
    assert_one_line_error(fjord("--bootstrap-controller", controller, "upgrade", "--feature", "share.version=1"),
                          "does not serve UpdateFeatures", "--bootstrap-server")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("upgrade",), "You must specify at least one feature to upgrade"),
        (("upgrade", "--feature", "group.version"), "equals sign not found"),
        (("upgrade", "--feature", "group.version=x"), "unable to parse x as a short"),
        (("upgrade", "--feature", "group.version=1", "--feature", "group.version=0"), "specified more than once"),
        (("upgrade", "--release-version", "3.6", "--feature", "group.version=1"), "Can not specify `release-version`"),
        (("downgrade", "--release-version", "4.9-IV0"), "--release-version: unknown release '4.9-IV0'"),
    ],
)
def test_bad_options_are_one_line_and_exit_1(node: BrokerProcess, args: tuple[str, ...], message: str) -> None:
    assert_one_line_error(fjord("--bootstrap-server", node.bootstrap, *args), message)


def test_an_unreachable_server_is_one_line_naming_it() -> None:
    assert_one_line_error(fjord("--bootstrap-server", "127.0.0.1:1", "describe"), "no server answered", "127.0.0.1:1")
