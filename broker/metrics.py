"""Prometheus metrics a Kafka operator looks for on a broker: traffic per topic, partitions and leaders, log offsets
per partition, consumer-group lag.

Traffic is counted on the produce and fetch paths, so :class:`TopicTraffic` keeps one cached label child per topic
and direction (``labels()`` is the slow part) and costs a dict lookup and an increment per partition. Everything
else is state the broker already holds; :class:`BrokerStateCollector` reads it at scrape time instead of updating
gauges on every append or commit; it runs on the metrics server's thread, so it copies what it iterates through
``storage.metrics.loop_state_snapshot``. Per-broker totals are sums over the per-topic series (``sum by (node)``), as in
Kafka's ``BrokerTopicMetrics`` without a topic tag.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from broker.groups.coordinator import GroupCoordinator
from broker.groups.offsets import OffsetAndMetadata, TopicPartition
from broker.groups.share.group import ShareGroup
from broker.partition.manager import PartitionManager
from broker.wal_handover import WALHandover
from storage.metrics import loop_state_snapshot


class TopicTraffic:
    """Bytes and records in (produced) and out (fetched) per topic, labelled with this broker's node id; and bytes
    per partition, unexported, which the broker reports to the active controller for the auto-balancer."""

    def __init__(self, registry: CollectorRegistry | None, node_id: Callable[[], int]) -> None:
        """``node_id`` is read when a topic is first counted (a dispatcher exists before its node is complete)."""
        self._node_id = node_id
        self.bytes_in = Counter(
            "fjord_topic_bytes_in", "Record bytes appended by Produce requests", ["node", "topic"], registry=registry
        )
        self.messages_in = Counter(
            "fjord_topic_messages_in", "Records appended by Produce requests", ["node", "topic"], registry=registry
        )
        self.bytes_out = Counter(
            "fjord_topic_bytes_out", "Record bytes returned by Fetch responses", ["node", "topic"], registry=registry
        )
        self.messages_out = Counter(
            "fjord_topic_messages_out",
            "Records (offsets) returned by Fetch responses",
            ["node", "topic"],
            registry=registry,
        )
        self._in: dict[str, tuple[Any, Any]] = {}
        self._out: dict[str, tuple[Any, Any]] = {}
        # (topic, partition) -> [bytes in, bytes out] since start: the load reports' source (metadata.broker_load)
        self._partition_bytes: dict[tuple[str, int], list[int]] = {}

    @classmethod
    def disabled(cls) -> TopicTraffic:
        """Counts into no registry (a request context built outside a node)."""
        return cls(None, lambda: -1)

    def partition_bytes(self) -> dict[tuple[str, int], tuple[int, int]]:
        """A copy of the cumulative (bytes in, bytes out) per partition this broker counted."""
        return {key: (counts[0], counts[1]) for key, counts in self._partition_bytes.items()}

    def forget(self, topic: str, partition: int) -> None:
        """Drops a partition this broker no longer has open (leadership moved, topic deleted), so topic churn does
        not grow the counters and a deleted topic is not exported forever; with the topic's last partition go its
        exported series. A partition opened here again counts from zero, which the load reports take as a reset."""
        self._partition_bytes.pop((topic, partition), None)
        if any(key[0] == topic for key in self._partition_bytes):
            return
        node = str(self._node_id())
        if self._in.pop(topic, None) is not None:
            self.bytes_in.remove(node, topic)
            self.messages_in.remove(node, topic)
        if self._out.pop(topic, None) is not None:
            self.bytes_out.remove(node, topic)
            self.messages_out.remove(node, topic)

    def _count_partition(self, topic: str, partition: int, direction: int, size: int) -> None:
        counts = self._partition_bytes.get((topic, partition))
        if counts is None:
            counts = self._partition_bytes[(topic, partition)] = [0, 0]
        counts[direction] += size

    def produced(self, topic: str, partition: int, size: int, records: int) -> None:
        self._count_partition(topic, partition, 0, size)
        children = self._in.get(topic)
        if children is None:
            children = self._in[topic] = (
                self.bytes_in.labels(node=str(self._node_id()), topic=topic),
                self.messages_in.labels(node=str(self._node_id()), topic=topic),
            )
        children[0].inc(size)
        children[1].inc(records)

    def fetched(self, topic: str, partition: int, size: int, records: int) -> None:
        """Counts one partition's fetched batches: ``size`` bytes spanning ``records`` offsets (the read counted
        them from the batch headers it walked)."""
        if not size:
            return
        self._count_partition(topic, partition, 1, size)
        children = self._out.get(topic)
        if children is None:
            children = self._out[topic] = (
                self.bytes_out.labels(node=str(self._node_id()), topic=topic),
                self.messages_out.labels(node=str(self._node_id()), topic=topic),
            )
        children[0].inc(size)
        children[1].inc(records)


class BrokerStateCollector(Collector):
    """Partition and leader counts, log offsets per partition and consumer-group lag, read at scrape time.

    Every partition this broker has open, it leads (a partition has one replica, its leader), so the leader count
    and the partition count are equal here; both are exported under Kafka's names for dashboards built on them.
    Lag is reported for the groups this broker coordinates, on the partitions it leads: the high watermark minus
    the committed offset (never below 0)."""

    def __init__(
        self,
        node_id: int,
        partitions: Callable[[], PartitionManager | None],
        groups: Callable[[], GroupCoordinator | None],
    ) -> None:
        self._node = str(node_id)
        self._partitions = partitions
        self._groups = groups

    def collect(self) -> Iterator[Metric]:
        manager = self._partitions()
        if manager is None:  # not started yet, or a controller-only node: no broker to report on
            return
        logs = loop_state_snapshot(manager.open_partitions)
        node = self._node
        count = GaugeMetricFamily("fjord_broker_partitions", "Partitions open on this broker", labels=["node"])
        count.add_metric([node], len(logs))
        leaders = GaugeMetricFamily("fjord_broker_leaders", "Partitions this broker leads", labels=["node"])
        leaders.add_metric([node], len(logs))
        yield count
        yield leaders
        labels = ["node", "topic", "partition"]
        start = GaugeMetricFamily("fjord_log_start_offset", "First offset of the partition's log", labels=labels)
        end = GaugeMetricFamily("fjord_log_end_offset", "Offset after the partition's last record", labels=labels)
        hw = GaugeMetricFamily("fjord_log_high_watermark", "Offset up to which consumers may read", labels=labels)
        size = GaugeMetricFamily("fjord_log_size_bytes", "Bytes the partition's log holds", labels=labels)
        watermarks: dict[tuple[str, int], int] = {}
        for log in logs:
            values = [node, log.topic, str(log.partition)]
            start.add_metric(values, log.log_start_offset)
            end.add_metric(values, log.log_end_offset)
            hw.add_metric(values, log.high_watermark)
            size.add_metric(values, log.size_bytes)
            watermarks[(log.topic, log.partition)] = log.high_watermark
        yield start
        yield end
        yield hw
        yield size
        lag = GaugeMetricFamily(
            "fjord_consumer_group_lag",
            "Records between a group's committed offset and the high watermark",
            labels=["group", "topic", "partition"],
        )
        committed = GaugeMetricFamily(
            "fjord_consumer_group_committed_offset",
            "A group's committed offset",
            labels=["group", "topic", "partition"],
        )
        coordinator = self._groups()
        if coordinator is not None:
            for group_id, offsets in loop_state_snapshot(lambda: _committed_offsets(coordinator)):
                for (topic, partition), value in offsets:
                    values = [group_id, topic, str(partition)]
                    committed.add_metric(values, value.offset)
                    high_watermark = watermarks.get((topic, partition))
                    if high_watermark is not None:
                        lag.add_metric(values, max(0, high_watermark - value.offset))
        yield lag
        yield committed


class WALHandoverCollector(Collector):
    """Hand-overs of a broker whose S3 WAL could not write (``broker.wal_handover``): zeros on a broker that never
    hands over (a file WAL, ``s3.wal.handover.ms`` -1), so the dashboard's series exist on every broker; nothing on
    a node without a broker."""

    def __init__(self, has_broker: Callable[[], bool], handover: Callable[[], WALHandover | None]) -> None:
        self._has_broker = has_broker
        self._handover = handover

    def collect(self) -> Iterator[Metric]:
        if not self._has_broker():
            return
        handover = self._handover()
        yield CounterMetricFamily(
            "fjord_wal_handovers",
            "Times this broker asked to be fenced because its WAL could not write for s3.wal.handover.ms, counted "
            "across its restarts in place after a hand-over (not across an outside restart)",
            value=handover.handovers if handover is not None else 0,
        )
        yield GaugeMetricFamily("fjord_wal_handing_over",
                                "1 while this broker asks to be fenced (its WAL cannot write)",
                                value=int(handover is not None and handover.handing_over))


def _committed_offsets(
    coordinator: GroupCoordinator,
) -> list[tuple[str, list[tuple[TopicPartition, OffsetAndMetadata]]]]:
    """Every coordinated group's committed offsets, copied (the caller iterates them off the event loop)."""
    _error, groups = coordinator.list_groups()
    return [(group.group_id, list(group.offsets)) for group in groups if not isinstance(group, ShareGroup)]
