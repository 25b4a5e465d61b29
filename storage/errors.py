"""Every error the storage engine raises, in one hierarchy, so callers can map them to protocol errors."""

from __future__ import annotations


class StorageError(Exception):
    """Base class of all storage-engine errors."""


class ObjectStoreError(StorageError):
    """An object-store request failed after its retries."""


class ObjectNotFoundError(ObjectStoreError):
    """The key does not exist in the bucket."""

    def __init__(self, key: str, where: str | None = None) -> None:
        super().__init__(f"object {key!r} not found" + (f" in {where}" if where else ""))
        self.key = key


class ObjectExistsError(ObjectStoreError):
    """A conditional put (``if_none_match``) found the key already present."""

    def __init__(self, key: str, where: str | None = None) -> None:
        super().__init__(f"object {key!r} already exists" + (f" in {where}" if where else ""))
        self.key = key


class CorruptObjectError(StorageError):
    """An object (or WAL record) does not decode; the message names the object and what is wrong."""


class WALError(StorageError):
    """The write-ahead log cannot accept or recover records."""


class WALUnavailableError(WALError):
    """The WAL's storage has been unwritable for longer than its bound: the append was refused before it took an
    offset, so the client may retry it (Kafka's retriable KAFKA_STORAGE_ERROR)."""


class WALFencedError(WALError):
    """Another writer with a newer node epoch owns this WAL; this writer must stop."""


class StreamError(StorageError):
    """A stream operation was rejected."""


class StreamNotFoundError(StreamError):
    def __init__(self, stream_id: int) -> None:
        super().__init__(f"stream {stream_id} not found")
        self.stream_id = stream_id


class StreamFencedError(StreamError):
    """The caller's stream epoch (or node epoch) is older than the owner's: a newer owner exists."""


class StreamNotClosedError(StreamError):
    """The stream must be CLOSED for this operation (e.g. opening it with a higher epoch)."""


class StreamNotOpenedError(StreamError):
    """The stream must be OPENED by the caller for this operation (append, commit, trim)."""


class NodeEpochExpiredError(StreamError):
    """The caller's node epoch is older than the one registered for its node id."""


class OffsetNotMatchedError(StreamError):
    """A commit does not start exactly at the stream's committed end offset."""


class OffsetOutOfRangeError(StreamError):
    """A fetch asked for offsets outside [start offset, end offset)."""


class ObjectNotPreparedError(StorageError):
    """A commit referenced an object id that was never prepared, or whose deadline passed."""


class CompactedObjectsNotFoundError(StorageError):
    """A compaction commit referenced source objects that no longer exist."""


class CompactionError(StorageError):
    """A compaction round found object metadata it cannot safely rewrite (overlapping ranges, an index that does
    not match the metadata); it leaves the objects as they are."""
