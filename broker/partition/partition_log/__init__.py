"""A Kafka partition led by this broker, on s3stream streams (DESIGN.md §4, §6-7).

:class:`PartitionLog` (``log.py``) is what the rest of the broker uses: it owns one open partition's state and
composes the modules beside it, each holding one idea (the modules that change the state take it as their first
argument, so none of them needs another's internals):

- ``log.py``: ``PartitionLog``, the partition's public face: opening it, and routing each call to the module below
  that answers it;
- ``state.py``: ``PartitionState``, the streams and everything kept in memory about them (log start, sizes,
  producer state, indexes, leader epochs, checkpoint progress), shared by the modules below under one lock;
- ``opening.py``: finding and opening the partition's streams (KV entry -> meta stream -> LOG -> log, time and
  cleaned streams), with the leader epoch so an older leader can no longer make data visible;
- ``lifecycle.py``: adopting what recovery rebuilt (and persisting it, the clean-shutdown flag down), the clean
  close that lets the next open skip recovery, and deletion;
- ``recovery.py``: restoring state on open from the meta stream, replaying the log tail after an unclean shutdown
  (the ``PARTITION`` clean-shutdown flag decides) to rebuild producer state (open transactions included), the time
  index, the aborted transactions and the size;
- ``append.py``: the produce path's validation and offset assignment (pure);
- ``produce.py``: the produce path's stateful half: producer-state checks (duplicates, fencing), the append under
  the lock, the time-index entries;
- ``txn_markers.py``: transaction markers (KIP-98): writing the coordinator's COMMIT/ABORT, applying them to
  producer state, the aborted-transaction index and txn stream they feed, and the cleaner's removal of entries;
- ``checkpoints.py``: the recovery point: when a checkpoint is due, persisting producer snapshots, the leader-epoch
  checkpoint and the ``PARTITION`` record;
- ``log_start.py``: trims and the log start: DeleteRecords and retention moving it, and every stream and index
  trimmed with it;
- ``cleaner_switch.py``: the log cleaner's switch-over: a round's output stream from its creation (doomed first)
  to replacing the cleaned prefix, or its abandonment;
- ``reads.py``: the read path: Fetch reads and ListOffsets' lookups by timestamp;
- ``stored_log.py``: which stream holds a Kafka offset (with compaction, the cleaned stream holds the prefix
  ``[log start, cleaner offset)`` and the log stream the rest) and walks over the stored batches;
- ``time_stream.py``: loading (lazily, on the first lookup by timestamp) and trimming the time stream;
- ``txn_stream.py``: loading and trimming the txn stream (the aborted-transaction index, created on the first
  abort);
- ``share_stream.py``: creating the share stream (the share groups' state, broker/share/, created when a share group
  first touches the partition; opened and closed with the others);
- ``cleaned_stream.py``: the LOG entry's bookkeeping of the log cleaner's streams (``cleaned``, ``co``, ``cb``,
  ``th``, ``doomed``), what the switch to a round's output writes (pure).
"""

from broker.partition.partition_log.append import AppendResult
from broker.partition.partition_log.log import PartitionLog
from broker.partition.partition_log.reads import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_PENDING_UPLOAD_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    OffsetAndTimestamp,
    ReadResult,
)

__all__ = [
    "EARLIEST_LOCAL_TIMESTAMP",
    "EARLIEST_PENDING_UPLOAD_TIMESTAMP",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIERED_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "AppendResult",
    "OffsetAndTimestamp",
    "PartitionLog",
    "ReadResult",
]
