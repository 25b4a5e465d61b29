"""A Kafka partition led by this broker, on s3stream streams (DESIGN.md §4, §6-7).

:class:`PartitionLog` (``log.py``) owns one open partition's state and is what the rest of the broker uses; the
modules beside it each hold one idea it coordinates:

- ``opening.py``: finding and opening the partition's streams (KV entry -> meta stream -> LOG -> log, time and
  cleaned streams), with the leader epoch so an older leader can no longer make data visible;
- ``recovery.py``: restoring state on open from the meta stream, replaying the log tail after an unclean shutdown
  (the ``PARTITION`` clean-shutdown flag decides) to rebuild producer state (open transactions included), the time
  index, the aborted transactions and the size;
- ``append.py``: the produce path's validation and offset assignment (pure);
- ``reads.py``: the read path: Fetch reads and ListOffsets' lookups by timestamp;
- ``stored_log.py``: which stream holds a Kafka offset (with compaction, the cleaned stream holds the prefix
  ``[log start, cleaner offset)`` and the log stream the rest) and walks over the stored batches;
- ``time_stream.py``: loading and trimming the time stream;
- ``txn_stream.py``: loading and trimming the txn stream (the aborted-transaction index, created on the first
  abort);
- ``cleaned_stream.py``: the LOG entry's bookkeeping of the log cleaner's streams (``cleaned``, ``co``, ``cb``,
  ``th``, ``doomed``), the switch to a round's output included.
"""

from broker.partition.partition_log.append import AppendResult
from broker.partition.partition_log.log import PartitionLog
from broker.partition.partition_log.reads import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    OffsetAndTimestamp,
    ReadResult,
)

__all__ = [
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "AppendResult",
    "OffsetAndTimestamp",
    "PartitionLog",
    "ReadResult",
]
