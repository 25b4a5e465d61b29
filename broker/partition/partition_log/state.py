"""What one open partition holds, in one object the partition's pieces share (Kafka's UnifiedLog fields).

``PartitionLog`` (:mod:`.log`) owns a :class:`PartitionState` and is the only way the rest of the broker reaches
it; the modules that change it (:mod:`.lifecycle`, :mod:`.produce`, :mod:`.txn_markers`, :mod:`.checkpoints`,
:mod:`.log_start`, :mod:`.cleaner_switch`) take it as their first argument. Keeping the state in a plain object of
its own, rather than spread over those modules, is what lets each of them hold one idea while all of them still
see (and, under ``lock``, change) the same streams, indexes and counters, exactly as when they were methods of one
class.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from broker.partition.indexes import LeaderEpochCache, TimeIndex
from broker.partition.log_config import LogConfig
from broker.partition.meta_stream import KEY_LOG, MetaStream
from broker.partition.partition_log.cleaned_stream import doomed_ids
from broker.partition.partition_log.stored_log import StoredLog
from broker.partition.producer_state import ProducerStateManager
from broker.partition.txn_index import TxnIndex
from storage.metadata.api import StreamMetadata
from storage.stream_api import Stream, StreamClient
from wire.errors import KafkaError

#: How often an idle partition looks for producers to expire (Kafka's producer.id.expiration.check.interval.ms).
EXPIRY_CHECK_INTERVAL_S = 600.0


def _next_expiry_check() -> float:
    return time.monotonic() + EXPIRY_CHECK_INTERVAL_S


@dataclass(slots=True)
class CheckpointProgress:
    """The recovery point (DESIGN §4) and what happened since it was persisted; :mod:`.checkpoints` moves it.

    ``recovery_point`` is the log end as of the last checkpoint (PARTITION ``r``, the producer snapshot's offset)
    and ``time_checkpoint`` the time stream's end then (``ti``): only durable data is ever named there."""

    recovery_point: int = 0
    time_checkpoint: int = 0
    #: Bytes appended since the last checkpoint, and when it was taken: the two bounds that make one due.
    bytes_since: int = 0
    last_at: float = field(default_factory=time.monotonic)
    #: When the periodic check next looks for producers idle past producer.id.expiration.ms.
    next_expiry_check: float = field(default_factory=_next_expiry_check)
    #: The checkpoint running in the background (one at a time per partition), None when idle.
    task: asyncio.Task[None] | None = None


class PartitionState:
    """One open partition's streams and everything kept in memory about them.

    Attributes are public to the modules of this package, not beyond: everything else goes through
    ``PartitionLog``. What changes the log (appends, markers, log-start moves, a cleaner's switch, checkpoints)
    does it under ``lock``."""

    def __init__(
        self,
        *,
        topic: str,
        partition: int,
        topic_id: uuid.UUID,
        leader_epoch: int,
        config: LogConfig,
        meta: MetaStream,
        log: Stream,
        time_stream: Stream,
        streams: StreamClient,
        kv: StreamMetadata,
        kv_key: str,
        log_info: dict[str, Any] | None = None,
        cleaned: Stream | None = None,
        txn_stream: Stream | None = None,
        share_stream: Stream | None = None,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.topic_id = topic_id
        self.leader_epoch = leader_epoch
        self.config = config
        self.where = f"{topic}-{partition}"
        self.meta = meta
        self.log = log
        self.time = time_stream
        self.streams = streams
        self.kv = kv
        self.kv_key = kv_key
        self.lock = asyncio.Lock()
        self.closed = False
        self.producers = ProducerStateManager(self.where)
        self.epochs = LeaderEpochCache()
        self.log_start_offset = log.start_offset
        self.max_timestamp = -1
        self.max_timestamp_offset = -1
        #: Bytes of the stored batches not wholly below the log start (what retention.bytes limits).
        self.size_bytes = 0
        self.checkpoint = CheckpointProgress()
        self.time_index = TimeIndex()
        #: Bytes appended since the last time-index entry (one entry per index.interval.bytes at most).
        self.bytes_since_index = 0
        #: The stream offset below which the time stream's entries are not in ``time_index`` yet (an open reads
        #: only the newest, :mod:`.time_stream`); None once they are. The lock makes one lookup read them.
        self.time_unloaded_end: int | None = None
        self.time_load_lock = asyncio.Lock()
        self.txn_index = TxnIndex()
        #: The txn stream, None until the partition's first abort creates it (:mod:`.txn_markers`).
        self.txn = txn_stream
        self.txn_create_lock = asyncio.Lock()
        #: The share stream, None until a share group first touches the partition (:mod:`.share_stream`).
        self.share = share_stream
        self.share_create_lock = asyncio.Lock()
        # Compaction (DESIGN §10): [log start, cleaner offset) lives in the cleaned stream, the rest in the log
        # stream; ``log_info`` is the LOG meta entry both are named in.
        self.log_info: dict[str, Any] = dict(log_info or {})
        self.stored = StoredLog(log, cleaned, int(self.log_info.get("co", 0)) if cleaned is not None else 0)
        #: Bytes of the compacted prefix (the cleaned stream's batches not below the log start).
        self.cleaned_bytes = 0
        #: The stream a cleaner round is writing, until its switch or its abandonment (:mod:`.cleaner_switch`).
        self.cleaning: Stream | None = None
        #: The earliest delete horizon of a batch kept in the cleaned stream (LOG ``th``): from then on a round is
        #: due even without new writes, so tombstones and markers vanish on their own as Kafka's do.
        horizon = self.log_info.get("th") if cleaned is not None else None
        self.tombstone_horizon_ms: int | None = int(horizon) if horizon is not None else None

    @property
    def log_end_offset(self) -> int:
        return self.log.next_offset

    @property
    def high_watermark(self) -> int:
        """Single replica: everything durable in the WAL is committed."""
        return self.log.confirm_offset

    @property
    def cleaner_offset(self) -> int:
        """Where the compacted prefix (the cleaned stream) ends and the log stream takes over; 0 without one."""
        return self.stored.cleaner_offset

    def check_open(self) -> None:
        """Refuses work on a partition this broker no longer leads (closed, or being deleted)."""
        if self.closed:
            raise KafkaError(ErrorCode.not_leader_or_follower, f"{self.where} is no longer led by this broker")

    def doomed(self) -> list[int]:
        """The streams LOG names as left behind by cleaner rounds (to delete)."""
        return doomed_ids(self.log_info)

    async def put_log_info(self, **changes: object) -> None:
        """Changes entries of the LOG meta record and persists it (the txn stream's creation, cleaner streams)."""
        self.log_info = dict(self.log_info, **changes)
        await self.meta.put({KEY_LOG: json.dumps(self.log_info).encode()})
