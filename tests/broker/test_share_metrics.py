"""Share-group counters (``broker.share.metrics``): what the share partitions count is what ``/metrics`` shows, per
node, group and topic, and a group id a client chose cannot shape the endpoint: label values lose control
characters and are cut, and the number of series stays bounded while totals stay right."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from broker.share.metrics import EVENTS, OTHER_GROUP, ShareMetrics, ShareMetricsCollector
from broker.telemetry.exported import MAX_LABEL
from tests.broker.test_metrics_dashboard import dashboard_queries, metric_names


def scraped(metrics: ShareMetrics) -> dict[str, dict[tuple[str, str, str], float]]:
    """{sample name: {(node, group, topic): value}} as a Prometheus scrape of a registry holding ``metrics``."""
    registry = CollectorRegistry()
    registry.register(ShareMetricsCollector(lambda: metrics))
    found: dict[str, dict[tuple[str, str, str], float]] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            if sample.name.endswith("_total"):
                labels = sample.labels
                found.setdefault(sample.name, {})[(labels["node"], labels["group"], labels["topic"])] = sample.value
    return found


def test_each_event_is_counted_per_group_and_topic() -> None:
    metrics = ShareMetrics(node_id=3)
    metrics.acquired("g1", "orders", 10)
    metrics.acquired("g1", "orders", 5)
    metrics.acquired("g2", "orders", 1)
    metrics.acknowledged("g1", "orders", 12)
    metrics.released("g1", "orders", 2)
    metrics.rejected("g1", "payments", 1)
    metrics.archived("g1", "payments", 4)
    metrics.lock_timed_out("g1", "orders", 3)
    metrics.redelivered("g1", "orders", 2)
    metrics.acknowledged("g1", "orders", 0)  # nothing happened: no change, no series
    served = scraped(metrics)
    # a (group, topic) pair once counted is exported for every event (0 where nothing happened)
    assert served["fjord_share_acquired_records_total"] == {("3", "g1", "orders"): 15, ("3", "g2", "orders"): 1,
                                                            ("3", "g1", "payments"): 0}
    assert served["fjord_share_acknowledged_records_total"] == {("3", "g1", "orders"): 12,
                                                                ("3", "g2", "orders"): 0,
                                                                ("3", "g1", "payments"): 0}
    assert served["fjord_share_released_records_total"][("3", "g1", "orders")] == 2
    assert served["fjord_share_rejected_records_total"][("3", "g1", "payments")] == 1
    assert served["fjord_share_archived_records_total"][("3", "g1", "payments")] == 4
    assert served["fjord_share_lock_timeouts_total"][("3", "g1", "orders")] == 3
    assert served["fjord_share_redeliveries_total"][("3", "g1", "orders")] == 2
    assert metrics.count("g1", "orders", "fjord_share_acquired_records") == 15


def test_a_hostile_group_id_cannot_shape_the_endpoint() -> None:
    metrics = ShareMetrics(node_id=0)
    metrics.acquired('evil"}\nfjord_fake 1\x1b[31m' + "x" * 1000, "orders", 1)
    text = generate_latest(_registry(metrics)).decode()
    assert "fjord_fake 1" not in text.splitlines()  # no injected line
    [(_node, group, _topic)] = scraped(metrics)["fjord_share_acquired_records_total"]
    assert len(group) == MAX_LABEL and "\n" not in group and "\x1b" not in group


def test_series_are_bounded_and_totals_stay_right() -> None:
    metrics = ShareMetrics(node_id=0, max_series=3)
    for i in range(10):
        metrics.acquired(f"group-{i}", "orders", 1)
    acquired = scraped(metrics)["fjord_share_acquired_records_total"]
    assert len(acquired) == 4  # three groups of their own, the rest folded into one series
    assert acquired[("0", OTHER_GROUP, "orders")] == 7
    assert sum(acquired.values()) == 10
    metrics.acquired("group-1", "orders", 1)  # a pair already exported keeps its own series
    assert scraped(metrics)["fjord_share_acquired_records_total"][("0", "group-1", "orders")] == 2


def test_a_deleted_group_loses_its_series() -> None:
    metrics = ShareMetrics(node_id=0)
    metrics.acquired("gone", "orders", 1)
    metrics.acquired("kept", "orders", 1)
    metrics.forget_group("gone")
    assert set(scraped(metrics)["fjord_share_acquired_records_total"]) == {("0", "kept", "orders")}


def test_nothing_is_reported_before_the_broker_exists() -> None:
    registry = CollectorRegistry()
    registry.register(ShareMetricsCollector(lambda: None))
    assert "fjord_share" not in generate_latest(registry).decode()


def test_the_dashboard_share_row_queries_only_served_families() -> None:
    queried = {name for expr in dashboard_queries() for name in metric_names(expr) if name.startswith("fjord_share_")}
    assert queried == {f"{name}_total" for name, _help in EVENTS}


def _registry(metrics: ShareMetrics) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(metrics)
    return registry
