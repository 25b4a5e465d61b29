"""``minOffsetsPerTrigger`` with ``maxTriggerDelay`` decided as Spark's Kafka source decides it (``delayBatch``)."""

from __future__ import annotations

from spark_connector.trigger_delay import TriggerDelay

A0, A1 = ("a", 0), ("a", 1)


def test_a_trigger_waits_for_enough_records_or_the_delay() -> None:
    delay = TriggerDelay(min_records=100, max_delay_ms=60_000)
    start = {A0: 10, A1: 20}
    assert not delay.holds(start, {A0: 11, A1: 20}, now_ms=1_000_000)  # the first trigger never waits
    assert delay.holds(start, {A0: 60, A1: 69}, now_ms=1_000_500)  # 99 new records
    assert not delay.holds(start, {A0: 60, A1: 70}, now_ms=1_001_000)  # 100: this batch runs, the clock restarts
    assert delay.holds(start, {A0: 11, A1: 20}, now_ms=1_060_999)
    assert not delay.holds(start, {A0: 11, A1: 20}, now_ms=1_061_000)  # a minute since the last batch


def test_a_partition_not_in_the_start_counts_from_zero() -> None:
    delay = TriggerDelay(min_records=5, max_delay_ms=60_000, last_trigger_ms=1_000)
    assert delay.holds({A0: 3}, {A0: 4, A1: 3}, now_ms=2_000)
    assert not delay.holds({A0: 3}, {A0: 4, A1: 4}, now_ms=2_000)
