"""SCRAM credentials in a cluster: AlterUserScramCredentials sent to one broker-only node is forwarded to the active
controller, committed as metadata records, and replicated to every broker, which then describes it from its own
metadata image (the quorum path of tests/broker/test_sasl.py's single node)."""

from __future__ import annotations

from collections.abc import Callable

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

from node.local_cluster import LocalCluster
from testkit.waiting import eventually


def test_scram_credentials_are_forwarded_and_replicated(cluster_factory: Callable[..., LocalCluster]) -> None:
    cluster = cluster_factory(controllers=1, brokers=2)
    first, second = (AdminClient({"bootstrap.servers": b.spec.address}) for b in cluster.brokers)
    upsert = UserScramCredentialUpsertion("dana", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"dana-pw")
    for future in first.alter_user_scram_credentials([upsert]).values():
        future.result(timeout=30)

    def described() -> list[tuple[ScramMechanism, int]] | None:
        try:
            result = second.describe_user_scram_credentials(["dana"])["dana"].result(timeout=10)
        except KafkaException:  # not replicated to this broker yet: RESOURCE_NOT_FOUND
            return None
        return [(info.mechanism, info.iterations) for info in result.scram_credential_infos]

    found = eventually(described, timeout=30, what="the second broker to describe dana's credential")
    assert found == [(ScramMechanism.SCRAM_SHA_256, 4096)]
    assert "dana-pw" not in cluster.logs()
