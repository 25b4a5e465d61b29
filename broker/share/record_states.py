"""The states of a record in a share partition and the acknowledgement types a consumer sends (KIP-932).

The numbers are Kafka's: ``RecordState`` values are what the share state's batches persist (Kafka's
``RecordState.id``, also the ``DeliveryState`` of ``ShareSnapshotValue``), and ``AcknowledgeType`` values are what
ShareFetch and ShareAcknowledge carry in ``AcknowledgeTypes``. Kept apart from the state machine so the wire
handlers, the durable records and the metrics all name them from one place.
"""

from __future__ import annotations

from enum import IntEnum


class RecordState(IntEnum):
    """AVAILABLE may be acquired; ACQUIRED is locked by one member; ACKNOWLEDGED and ARCHIVED are terminal."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AcknowledgeType(IntEnum):
    """GAP: no record at that offset (compaction, a control record); ACCEPT: processed; RELEASE: give it to
    someone else (counts as a delivery); REJECT: never deliver it again; RENEW (KIP-1222, ShareFetch and
    ShareAcknowledge v2): keep it, with a fresh lock."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


#: Where each acknowledgement type leaves an acquired record (RELEASE may still become ARCHIVED at the delivery
#: limit, which the state machine decides).
ACK_TARGET: dict[int, RecordState] = {
    AcknowledgeType.GAP: RecordState.ARCHIVED,
    AcknowledgeType.ACCEPT: RecordState.ACKNOWLEDGED,
    AcknowledgeType.RELEASE: RecordState.AVAILABLE,
    AcknowledgeType.REJECT: RecordState.ARCHIVED,
    AcknowledgeType.RENEW: RecordState.ACQUIRED,
}

TERMINAL = frozenset((RecordState.ACKNOWLEDGED, RecordState.ARCHIVED))
