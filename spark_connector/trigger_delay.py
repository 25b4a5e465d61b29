"""``minOffsetsPerTrigger`` with ``maxTriggerDelay``: a micro-batch is held back until that many new records have
come or that long has passed since the last batch ran, as Spark's Kafka source holds it (``delayBatch`` of its
``KafkaMicroBatchStream``), so that a stream fed a trickle runs fewer, larger batches.

Sans-I/O: the stream reader gives the offsets and the time, and returns its start offsets (no new batch) while
:meth:`TriggerDelay.holds` says so. The time of the last batch lives in the driver's reader only, as in Spark: a
restarted query runs its first trigger at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

TopicPartition = tuple[str, int]


@dataclass
class TriggerDelay:
    min_records: int
    max_delay_ms: int
    last_trigger_ms: float = 0.0  # as Spark: the first trigger is never held

    def holds(self, start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int], now_ms: float) -> bool:
        """True to skip this trigger: fewer than ``min_records`` records after ``start`` (a new partition counts
        from 0, as Spark counts it) and less than ``max_delay_ms`` since the last batch. A trigger not held is
        remembered as the last batch."""
        if now_ms - self.last_trigger_ms >= self.max_delay_ms:
            self.last_trigger_ms = now_ms
            return False
        new_records = sum(end - start.get(tp, 0) for tp, end in latest.items())
        if new_records < self.min_records:
            return True
        self.last_trigger_ms = now_ms
        return False
