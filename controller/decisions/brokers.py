"""Broker membership — registration, fencing, unfencing and the end of a WAL failover — decided sans-I/O.

Each function reads only the image (and what the controller fetched for it, such as where brokers' WALs live) and
returns the records to append, or raises the error the request is refused with; ``controller.controller.Controller``
holds the lock, does the reads, appends and logs. A membership change moves leadership in the same write
(``controller.decisions.leadership``), so no image ever shows a fenced broker leading a partition it could not serve.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from controller.decisions import leadership
from controller.decisions.wal_failover import assign, needs_failover
from metadata.cluster_records import FenceBrokerRecord, RegisterBrokerRecord, UnfenceBrokerRecord, WALFailoverDoneRecord
from metadata.errors import ControllerError
from metadata.image import MetadataImage
from metadata.wal_failover import may_take_back, zombie_failover
from settings.endpoint import Endpoint
from storage.errors import NodeEpochExpiredError
from storage.metadata.api import NodeIdentity
from storage.metadata.record_codec import MetadataRecord


@dataclass(frozen=True, slots=True)
class Registration:
    """A broker's (re)registration: its new node epoch and the records that register it and give it leadership."""

    epoch: int
    records: list[MetadataRecord]


@dataclass(frozen=True, slots=True)
class Fencing:
    """A fenced broker: the records to append, and how many partitions it led that move elsewhere."""

    records: list[MetadataRecord]
    moved: int


def register(
    image: MetadataImage, node_id: int, listeners: Sequence[Endpoint], rack: str | None, now_ms: int
) -> Registration:
    """Registers ``node_id`` unfenced with an epoch above any it had (the wall clock, so epochs also grow across a
    metadata log that was lost), keeping or taking the partitions it should lead."""
    previous = image.brokers.get(node_id)
    epoch = max(now_ms, previous.epoch + 1 if previous is not None else 0)
    records: list[MetadataRecord] = [RegisterBrokerRecord(node_id, epoch, tuple(listeners), rack, fenced=False)]
    records.extend(leadership.on_register(image, node_id))
    return Registration(epoch, records)


def is_current(image: MetadataImage, node_id: int, epoch: int) -> bool:
    """Whether ``epoch`` is ``node_id``'s current registration: requests from an older incarnation change nothing."""
    broker = image.brokers.get(node_id)
    return broker is not None and broker.epoch == epoch


def fence(image: MetadataImage, node_id: int, epoch: int, wal_locations: Mapping[int, str] | None) -> Fencing:
    """Fences the current registration ``epoch`` of ``node_id`` and moves the partitions it leads.

    ``wal_locations`` (where each broker's S3 WAL lives) is given when its session expired: it may have died with
    acknowledged records only in its WAL, so a WAL in the shared bucket is assigned to a live broker to replay in
    the same write. None for a controlled shutdown, which uploaded and closed everything first."""
    changes = leadership.on_fence(image, node_id)
    records: list[MetadataRecord] = [FenceBrokerRecord(node_id, epoch), *changes]
    if wal_locations is not None and needs_failover(image, node_id, epoch, wal_locations):
        records.append(assign(image, node_id, epoch, wal_locations))
    return Fencing(records, len(changes))


def unfence(image: MetadataImage, node_id: int, epoch: int) -> list[MetadataRecord] | None:
    """Unfences ``node_id`` (it heartbeats again and caught up with the metadata log) and gives it the partitions
    it should lead; None if ``epoch`` is not its current registration, it is not fenced, or its WAL was taken
    over by another broker (that incarnation can never write again)."""
    broker = image.brokers.get(node_id)
    if broker is None or broker.epoch != epoch or not broker.fenced:
        return None
    if zombie_failover(image, node_id, epoch) is not None:
        return None
    records: list[MetadataRecord] = [UnfenceBrokerRecord(node_id, epoch)]
    untouched = image.wal_failovers.get(node_id)
    if untouched is not None and untouched.pending and untouched.node_epoch == epoch:
        records.append(WALFailoverDoneRecord(node_id, epoch))  # back before any broker took its WAL
    records.extend(leadership.on_register(image, node_id))
    return records


def wal_failover_done(
    image: MetadataImage, node: NodeIdentity, failed_node_id: int, failed_node_epoch: int
) -> WALFailoverDoneRecord | None:
    """The record ending the failover of ``failed_node_id``'s WAL that ``node`` reports done; None if it is done
    already (the report is idempotent). NodeEpochExpiredError when ``node`` is not (or no longer) the assigned
    target: its work may be redone by the current one.

    A newer incarnation of the failed broker itself may also end a failover that has no live target at the
    moment: its own restart recovery replays the same WAL (idempotently, fencing any earlier target's
    reservation with its higher epoch), so it need not wait for a broker that may never come, nor for one that is
    itself waiting for its own failover (``metadata.wal_failover.may_take_back``)."""
    failover = image.wal_failovers.get(failed_node_id)
    if failover is None or failover.node_epoch != failed_node_epoch:
        raise NodeEpochExpiredError(
            f"node {node.node_id}: no WAL failover of broker {failed_node_id} epoch {failed_node_epoch}"
        )
    if failover.done:
        return None
    taken_back = may_take_back(image, failover, node.node_id, node.node_epoch)
    if not taken_back and not failover.delegated_to(node.node_id, node.node_epoch):
        raise NodeEpochExpiredError(
            f"node {node.node_id} (epoch {node.node_epoch}) is not the assigned target of the WAL failover "
            f"of broker {failed_node_id}: broker {failover.target_id} epoch {failover.target_epoch} is"
        )
    return WALFailoverDoneRecord(failed_node_id, failed_node_epoch)


def check_producer_ids_request(image: MetadataImage, broker_id: int, broker_epoch: int) -> None:
    """AllocateProducerIds is answered only to a broker's current registration, so that a zombie incarnation cannot
    take blocks; ControllerError (BROKER_ID_NOT_REGISTERED, STALE_BROKER_EPOCH) otherwise."""
    broker = image.brokers.get(broker_id)
    if broker is None:
        raise ControllerError(
            ErrorCode.broker_id_not_registered, f"broker {broker_id} asked for producer ids unregistered"
        )
    if broker.epoch != broker_epoch:
        raise ControllerError(
            ErrorCode.stale_broker_epoch,
            f"broker {broker_id} asked for producer ids with epoch {broker_epoch}, its registration is "
            f"{broker.epoch}",
        )
