"""KIP-584 features as Kafka 4.2 has them: ApiVersions' supported and finalized features (what Java's
Admin.describeFeatures reads), UpdateFeatures (what ``kafka-features.sh upgrade/downgrade`` sends) with Kafka's
validation, and the finalized levels kept across a restart (they are metadata records)."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from testkit.node_process import (
    REPO,
    BrokerProcess,
    WireClient,
    api_versions_request,
    default_overrides,
    server_command,
    start_broker,
)
from tests.broker.cg_wire import await_coordinator, heartbeat
from wire import codec, schema

UPDATE_FEATURES = 57
UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3
ALL_FAILED = "The update failed for all features since the following feature had an error: "


def features(client: WireClient, version: int = 4) -> tuple[dict[str, tuple[int, int]], dict[str, int], int]:
    response = client.request(api_versions_request(version))
    assert response.error_code == ErrorCode.none
    supported = {f.name: (f.min_version, f.max_version) for f in response.supported_features}
    finalized = {f.name: f.max_version_level for f in response.finalized_features}
    assert all(f.min_version_level == f.max_version_level for f in response.finalized_features)
    return supported, finalized, response.finalized_features_epoch


def update(client: WireClient, *items: tuple[str, int, int], version: int = 2, validate_only: bool = False) -> Any:
    cls = codec.request_class(UPDATE_FEATURES, version)
    if version == 0:
        updates = tuple(schema.build_nested(cls, "feature_updates", feature=f, max_version_level=level,
                                            allow_downgrade=kind != UPGRADE) for f, level, kind in items)
        return client.request(schema.build(cls, feature_updates=updates))
    updates = tuple(schema.build_nested(cls, "feature_updates", feature=f, max_version_level=level,
                                        upgrade_type=kind) for f, level, kind in items)
    return client.request(schema.build(cls, feature_updates=updates, validate_only=validate_only))


def test_a_new_cluster_finalizes_transactions_v2_the_consumer_protocol_and_share_groups(
    broker: BrokerProcess, wire: Callable[[int], WireClient]
) -> None:
    supported, finalized, _ = features(wire(broker.port))
    assert supported == {"metadata.version": (7, 14), "transaction.version": (0, 2), "group.version": (0, 1),
                         "share.version": (0, 1), "kraft.version": (0, 1)}
    # A local metadata log's voters cannot change: kraft.version 0, which Kafka leaves out of the finalized list.
    assert finalized == {"metadata.version": 14, "transaction.version": 2, "group.version": 1, "share.version": 1}
    # Before v4 a range starting at 0 is left out (KAFKA-17492); the finalized levels are the same.
    supported_v3, finalized_v3, _ = features(wire(broker.port), 3)
    assert supported_v3 == {"metadata.version": (7, 14)}
    assert finalized_v3 == finalized


def test_downgrade_and_upgrade_transaction_version_survive_a_restart(
    broker_factory: Callable[..., BrokerProcess], wire: Callable[[int], WireClient]
) -> None:
    first = broker_factory()
    client = wire(first.port)
    _, _, epoch_before = features(client)
    checked = update(client, ("transaction.version", 1, SAFE_DOWNGRADE), validate_only=True)
    assert checked.error_code == ErrorCode.none
    assert features(client)[1]["transaction.version"] == 2  # validate_only changes nothing
    done = update(client, ("transaction.version", 1, SAFE_DOWNGRADE))
    assert (done.error_code, done.error_message) == (ErrorCode.none, None)
    _, finalized, epoch_after = features(client)
    assert finalized == {"metadata.version": 14, "transaction.version": 1, "group.version": 1, "share.version": 1}
    assert epoch_after > epoch_before
    # group.version 0 removes the feature from the finalized list, as in Kafka.
    assert update(client, ("group.version", 0, UNSAFE_DOWNGRADE)).error_code == ErrorCode.none
    client.close()
    assert first.stop() == 0, first.log_text()

    second = broker_factory(data_dir=first.data_dir)
    client = wire(second.port)
    assert features(client)[1] == {"metadata.version": 14, "transaction.version": 1, "share.version": 1}
    # With group.version 0 the KIP-848 protocol is off, as in Kafka 4: a consumer cannot join with it.
    await_coordinator(client, "features-group")
    refused = heartbeat(client, "features-group", str(uuid.uuid4()), 0, topics=(), owned={})
    assert refused.error_code == ErrorCode.unsupported_version
    assert "group.version" in (refused.error_message or "")
    assert update(client, ("transaction.version", 2, UPGRADE), ("group.version", 1, UPGRADE)).error_code == 0
    assert features(client)[1] == {"metadata.version": 14, "transaction.version": 2, "group.version": 1,
                                   "share.version": 1}
    joined = heartbeat(client, "features-group", str(uuid.uuid4()), 0, topics=(), owned={})
    assert (joined.error_code, joined.member_epoch) == (ErrorCode.none, 1)


def test_share_version_is_turned_off_and_on_with_update_features_and_kept_across_a_restart(
    broker_factory: Callable[..., BrokerProcess], wire: Callable[[int], WireClient]
) -> None:
    first = broker_factory()
    client = wire(first.port)
    assert features(client)[1]["share.version"] == 1
    refused = update(client, ("share.version", 0, UPGRADE))
    assert refused.error_code == ErrorCode.invalid_update_version
    assert "without setting the upgrade type" in refused.error_message
    assert update(client, ("share.version", 0, SAFE_DOWNGRADE)).error_code == ErrorCode.none
    assert "share.version" not in features(client)[1]  # level 0 leaves the finalized list, as in Kafka
    client.close()
    assert first.stop() == 0, first.log_text()

    second = broker_factory(data_dir=first.data_dir)
    client = wire(second.port)
    assert "share.version" not in features(client)[1]
    assert update(client, ("share.version", 1, UPGRADE)).error_code == ErrorCode.none
    assert features(client)[1]["share.version"] == 1


def test_invalid_updates_are_refused_with_kafkas_errors_and_change_nothing(
    shared_broker: BrokerProcess, wire: Callable[[int], WireClient]
) -> None:
    client = wire(shared_broker.port)
    before = features(client)[1]
    cases: list[tuple[tuple[str, int, int], str | None]] = [
        (("transaction.version", 1, UPGRADE), "without setting the upgrade type"),
        (("transaction.version", 3, UPGRADE), "only supports versions 0-2"),
        (("group.version", 2, UPGRADE), "only supports versions 0-1"),
        (("streams.version", 1, UPGRADE), "does not support the given feature"),
        (("share.version", 2, UPGRADE), "only supports versions 0-1"),
        (("transaction.version", -1, SAFE_DOWNGRADE), "cannot be less than 0"),
        (("metadata.version", 13, SAFE_DOWNGRADE), "might delete metadata information"),
        (("metadata.version", 13, UNSAFE_DOWNGRADE), "Unsafe metadata downgrade is not supported"),
        (("metadata.version", 15, UPGRADE), "only supports versions 7-14"),
        (("transaction.version", 1, 7), "does not support the given upgrade type"),
        (("group.version", 2, SAFE_DOWNGRADE), "only supports versions 0-1"),
        (("group.version", 1, SAFE_DOWNGRADE), None),
        # kraft.version is the quorum's: this node's (a local log) is 0, which it may name again, and no more.
        (("kraft.version", 1, UPGRADE), "keeps its metadata in a local log"),
        (("kraft.version", 2, UPGRADE), "only supports versions 0-1"),
        (("kraft.version", 0, UPGRADE), None),
    ]
    for item, reason in cases:
        answer = update(client, item)
        if reason is None:  # the current level, asked as a downgrade: valid, and changes nothing
            assert answer.error_code == ErrorCode.none
            continue
        assert answer.error_code == ErrorCode.invalid_update_version, item
        assert answer.error_message.startswith(
            f"{ALL_FAILED}Invalid update version {item[1]} for feature {item[0]}. "), answer.error_message
        assert reason in answer.error_message, answer.error_message
    # One valid update beside an invalid one: nothing is finalized, and the request fails as a whole.
    mixed = update(client, ("transaction.version", 1, SAFE_DOWNGRADE), ("group.version", 2, SAFE_DOWNGRADE))
    assert mixed.error_code == ErrorCode.invalid_update_version
    assert mixed.error_message.startswith(f"{ALL_FAILED}Invalid update version 2 for feature group.version.")
    assert features(client)[1] == before
    # v0-1 too: one top-level error and no feature answering for itself (v0's allow_downgrade is a safe downgrade).
    v1 = update(client, ("transaction.version", 1, UPGRADE), ("group.version", 1, UPGRADE), version=1)
    assert (v1.error_code, list(v1.results)) == (ErrorCode.invalid_update_version, [])
    assert v1.error_message.startswith(f"{ALL_FAILED}Invalid update version 1 for feature transaction.version.")
    assert features(client)[1] == before
    v0 = update(client, ("metadata.version", 12, SAFE_DOWNGRADE), version=0)
    assert (v0.error_code, list(v0.results)) == (ErrorCode.invalid_update_version, [])
    assert "might delete metadata information" in v0.error_message
    # A success at v0-1 has a row per feature, each NONE with Kafka's message for it.
    done = update(client, ("group.version", 1, UPGRADE), ("share.version", 1, UPGRADE), version=1)
    assert (done.error_code, done.error_message) == (ErrorCode.none, None)
    assert [(r.feature, r.error_code, r.error_message) for r in done.results] == [
        ("group.version", ErrorCode.none, "NONE"), ("share.version", ErrorCode.none, "NONE")]


def test_initial_levels_given_at_the_first_start_as_kafka_storage_format_feature(
    tmp_path: Path, wire: Callable[[int], WireClient]
) -> None:
    data = tmp_path / "node"
    first = start_broker(data, args=("--feature", "transaction.version=1", "--feature", "group.version=0",
                                     "--feature", "share.version=0"))
    try:
        assert features(wire(first.port))[1] == {"metadata.version": 14, "transaction.version": 1}
    finally:
        assert first.stop() == 0, first.log_text()
    # Once finalized, the option changes nothing (as a second kafka-storage format would refuse to).
    second = start_broker(data, args=("--feature", "transaction.version=2"))
    try:
        assert features(wire(second.port))[1] == {"metadata.version": 14, "transaction.version": 1}
    finally:
        assert second.stop() == 0, second.log_text()


def test_an_unknown_feature_or_level_is_a_configuration_error(tmp_path: Path) -> None:
    for option, reason in (("streams.version=1", "NAME among"), ("transaction.version=3", "not supported"),
                           ("kraft.version=1", "Cannot set kraft.version to 1 unless")):
        command = server_command(None, default_overrides(tmp_path / "bad"), ("--feature", option))
        done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 1
        assert "configuration error: --feature" in done.stderr and reason in done.stderr, done.stderr
