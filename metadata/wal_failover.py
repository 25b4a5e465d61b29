"""What brokers and the controller share about S3 WAL failovers: where a broker announces its WAL, and which
failover fences an incarnation for good.

The controller assigns a dead broker's WAL to a live one (``controller.decisions.wal_failover``); the brokers
announce their WALs and halt an incarnation whose WAL was taken over (``broker.wal_ownership``). Both read these two
facts.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable

from metadata.image import MetadataImage, WALFailoverImage

_LOCATION_PREFIX = "_fjord/wal-location/"


def wal_location_key(node_id: int) -> str:
    """The KV key where broker ``node_id`` announces its S3 WAL's bucket (as ``BucketURL.describe()``)."""
    return f"{_LOCATION_PREFIX}{node_id}"


async def announced_wal_locations(
    get_kv: Callable[[str], Awaitable[bytes | None]], node_ids: Iterable[int]
) -> dict[int, str]:
    """Where each of these brokers' S3 WAL lives, as it announced it (a broker with a file WAL has none)."""
    out: dict[int, str] = {}
    for node_id in node_ids:
        value = await get_kv(wal_location_key(node_id))
        if value:
            out[node_id] = value.decode("utf-8", "replace")
    return out


def zombie_failover(image: MetadataImage, node_id: int, node_epoch: int) -> WALFailoverImage | None:
    """The failover that took (or may have taken) incarnation ``node_epoch``'s WAL, if any: such an incarnation (a
    paused broker resumed) must not be unfenced, since its WAL is fenced for good; it has to restart and register
    again. A failover never assigned to any broker (attempt 0) touched nothing: that incarnation may come back."""
    failover = image.wal_failovers.get(node_id)
    if failover is None or failover.node_epoch != node_epoch or failover.attempt == 0:
        return None
    return failover


def awaiting_own_failover(image: MetadataImage, node_id: int) -> bool:
    """Whether broker ``node_id`` registered again while the failover of an earlier incarnation's WAL is still
    pending: its join waits for that failover to end (``broker.wal_ownership.wait_for_wal_failover``) and its WAL
    failover runner starts only after the join, so it cannot replay any other broker's WAL yet. Such a broker is
    given no failover (``controller.decisions.wal_failover.choose_target``), and one given it earlier gives it back."""
    broker = image.brokers.get(node_id)
    failover = image.wal_failovers.get(node_id)
    return broker is not None and failover is not None and failover.pending and failover.node_epoch < broker.epoch


def may_take_back(image: MetadataImage, failover: WALFailoverImage, node_id: int, node_epoch: int) -> bool:
    """Whether a newer incarnation (``node_id`` at ``node_epoch``) of the broker whose WAL ``failover`` replays may
    end it itself, its own restart recovery replaying the same WAL (idempotently, fencing any earlier target's
    reservation with its higher epoch): when no broker is assigned it, or the one assigned cannot run it before its
    own failover ends (two brokers restarted together would otherwise wait on each other until both joins fail).
    Either way nobody is running the replay, so taking it back never runs it twice."""
    if failover.done or node_id != failover.node_id or node_epoch <= failover.node_epoch:
        return False
    return failover.target_id < 0 or awaiting_own_failover(image, failover.target_id)
