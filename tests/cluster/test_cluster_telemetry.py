"""KIP-714 client telemetry on a cluster: a client-metrics subscription set through one broker reaches every broker
through the metadata log, and a client instance keeps its subscription id when it pushes to another broker (Kafka
computes it from the subscriptions and the instance id alone)."""

from __future__ import annotations

from collections.abc import Callable

from kio.schema.errors import ErrorCode

from node.local_cluster import LocalCluster
from testkit.node_process import WireClient
from testkit.waiting import eventually
from tests.telemetry_wire import CLIENT_METRICS, get_subscriptions, list_resources, otlp_gauges, push, subscribe


def test_a_subscription_reaches_every_broker_and_its_id_holds_across_them(
    cluster_factory: Callable[..., LocalCluster],
) -> None:
    cluster = cluster_factory(controllers=1, brokers=2)
    first, second = (WireClient(node.spec.port) for node in cluster.brokers)
    with first, second:
        assert subscribe(first, "cluster-sub", {"metrics": "app.", "interval.ms": "60000",
                                                "match": "client_id=cluster-app"}) == (ErrorCode.none, None)
        answer = eventually(lambda: get_subscriptions(second, client_id="cluster-app"),
                            until=lambda a: tuple(a.requested_metrics) == ("app.",), timeout=15,
                            what="the subscription to reach the second broker")
        instance, subscription = answer.client_instance_id, answer.subscription_id
        # The first broker never saw this instance: it computes the same subscription id and takes the push.
        assert push(first, instance, subscription, otlp_gauges({"app.depth": 1.0}),
                    client_id="cluster-app") == ErrorCode.none
        assert subscribe(second, "cluster-sub", {"metrics": None, "interval.ms": None, "match": None})[0] == 0
        eventually(lambda: {r.resource_name for r in list_resources(first, types=(CLIENT_METRICS,)).config_resources},
                   until=lambda names: "cluster-sub" not in names, timeout=15,
                   what="the deleted subscription to leave the first broker")
