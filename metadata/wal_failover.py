"""What brokers and the controller share about S3 WAL failovers: where a broker announces its WAL, and which
failover fences an incarnation for good.

The controller assigns a dead broker's WAL to a live one (``controller.decisions.wal_failover``); the brokers
announce their WALs and halt an incarnation whose WAL was taken over (``broker.wal_ownership``). Both read these two
facts.
"""

from __future__ import annotations

from metadata.image import MetadataImage, WALFailoverImage

_LOCATION_PREFIX = "_fjord/wal-location/"


def wal_location_key(node_id: int) -> str:
    """The KV key where broker ``node_id`` announces its S3 WAL's bucket (as ``BucketURL.describe()``)."""
    return f"{_LOCATION_PREFIX}{node_id}"


def zombie_failover(image: MetadataImage, node_id: int, node_epoch: int) -> WALFailoverImage | None:
    """The failover that took (or may have taken) incarnation ``node_epoch``'s WAL, if any: such an incarnation (a
    paused broker resumed) must not be unfenced, since its WAL is fenced for good; it has to restart and register
    again. A failover never assigned to any broker (attempt 0) touched nothing: that incarnation may come back."""
    failover = image.wal_failovers.get(node_id)
    if failover is None or failover.node_epoch != node_epoch or failover.attempt == 0:
        return None
    return failover
