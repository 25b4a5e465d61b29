"""Who owns this broker's S3 WAL: announced when the broker joins, a failover by another broker awaited, and the
halt of an incarnation whose WAL another broker took over (a restart in place when it handed over itself).

A broker's S3 WAL can be replayed by any broker of the same bucket when it dies (``broker.wal_failover``). So before
a broker opens its WAL it tells the controller where the WAL lives, and a broker restarted while another one still
replays its WAL waits for that replay to end (both would otherwise fence each other's reservation). A fenced
incarnation that resumes after its WAL was taken over can never write again: it halts.

The S3 WAL's object names (``storage.wal.s3_format``) are imported only by a broker whose WAL is on S3, as
``storage.wal.factory`` imports the S3 WAL itself: a broker with a file WAL (the shipped config) has no use for them,
and importing them cost every such broker's start (issue 25).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from dataclasses import replace

from metadata.controller_api import ControllerClient
from metadata.image import MetadataImage
from metadata.wal_failover import may_take_back, wal_location_key, zombie_failover
from settings.server import ServerConfig
from storage.config import ConfigError
from storage.errors import ObjectStoreError, StorageError
from storage.metadata.api import NodeIdentity
from storage.objectstore.factory import open_object_store

logger = logging.getLogger(__name__)

FAILOVER_WAIT_S = 120.0  # how long a restarted broker waits for another broker to finish replaying its WAL
#: Exit status of a broker that halts because another broker took over its S3 WAL while it was fenced (a paused
#: process resumed): non-zero so that a supervisor (docker-compose's restart policy, systemd) starts it again.
WAL_TAKEN_OVER_EXIT_STATUS = 3
#: The environment variable that carries a broker's hand-over count across its restart in place (the execv keeps
#: the environment): the new incarnation's ``fjord_wal_handovers_total`` goes on from it instead of from zero, so a
#: scrape after the rejoin still shows the hand-over. Set only by that restart; an operator has no reason to set it.
HANDOVERS_ENV = "FJORD_WAL_HANDOVERS"


def inherited_handovers() -> int:
    """The hand-overs of this process's earlier incarnations (``HANDOVERS_ENV``; 0 when unset or not a count)."""
    try:
        return max(0, int(os.environ.get(HANDOVERS_ENV, "0")))
    except ValueError:
        return 0


async def announce_wal(config: ServerConfig, controller: ControllerClient) -> None:
    """Tells the controller where this broker's S3 WAL lives, so that if the broker dies another broker of the
    same WAL bucket can replay it; a file WAL has nothing to announce (a stale announcement is removed)."""
    url = config.storage.wal_url
    metadata = controller.stream_metadata
    key = wal_location_key(config.node_id)
    if url.scheme == "s3":
        location = url.describe().encode()
        if await metadata.get_kv(key) != location:
            await metadata.put_kv(key, location)
    elif await metadata.get_kv(key) is not None:
        await metadata.delete_kv(key)


async def wait_for_wal_bucket(config: ServerConfig, cluster_id: str, retry_s: float = 1.0) -> None:
    """Before registering, a broker with an S3 WAL waits until the WAL's bucket takes writes (a small probe object
    under its own node prefix written, then deleted), however long that takes. Registering gives it leaderships at
    once, and a broker that cannot write its WAL would hold them unwritable and, past ``s3.wal.handover.ms``, hand
    over again: a broker restarted after handing over during an outage (``broker.wal_handover``) must leave its
    partitions where they are until S3 is back for it, and an S3 that answers reads but refuses writes is not back.
    One WARNING when it waits, one INFO when S3 takes writes."""
    storage = replace(config.storage, cluster_id=cluster_id, node_id=config.node_id)
    if storage.wal_url.scheme != "s3":
        return
    from storage.wal import s3_format  # noqa: PLC0415 - an S3 WAL only: see the module docstring

    store = open_object_store(storage.wal_url, storage)
    key = s3_format.probe_key(storage.namespace, config.node_id)
    began: float | None = None
    try:
        while True:
            try:
                await store.put(key, b"probe")
                await store.delete([key])
            except ObjectStoreError as exc:
                if began is None:
                    began = time.monotonic()
                    logger.warning("broker %d cannot write to its WAL's bucket %s (%s); it registers once S3 answers",
                                   config.node_id, storage.wal_url.describe(), exc)
                await asyncio.sleep(retry_s)
                continue
            if began is not None:
                logger.info("broker %d: its WAL's bucket takes writes again after %.1fs; it registers",
                            config.node_id, time.monotonic() - began)
            return
    finally:
        await store.close()


async def wait_for_wal_failover(
    controller: ControllerClient, node_id: int, node_epoch: int, wait_s: float = FAILOVER_WAIT_S
) -> None:
    """A broker restarted while another one still replays its WAL waits for that to finish before opening
    the WAL itself; bounded by ``wait_s``, then a clear error. A failover no live broker is assigned to is taken
    back: this broker's own recovery replays the same WAL. So is one assigned to a broker that is itself waiting
    here for its own failover (``metadata.wal_failover.may_take_back``): that broker's failover runner starts only
    after its join, so two brokers restarted together would each wait for the other until both joins failed."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    logged = False
    while True:
        failover = controller.image.wal_failovers.get(node_id)
        if failover is None or failover.done:
            return
        if may_take_back(controller.image, failover, node_id, node_epoch):
            try:
                await controller.complete_wal_failover(NodeIdentity(node_id, node_epoch), node_id, failover.node_epoch)
                logger.info("broker %d takes back the failover of its WAL (%s); its own recovery replays it", node_id,
                            "no live broker was assigned it" if failover.target_id < 0 else
                            f"broker {failover.target_id} waits for its own failover")
                return
            except StorageError as exc:  # assigned to a broker meanwhile: wait for it like for any other
                logger.info("broker %d could not take back the failover of its WAL: %s", node_id, exc)
        if loop.time() >= deadline:
            raise ConfigError(
                f"broker {node_id}: broker {failover.target_id} is still replaying this broker's WAL "
                f"(failover attempt {failover.attempt}) after {wait_s:.0f} s; start it again later"
            )
        if not logged:
            logger.info("broker %d waits for the failover of its WAL (by broker %d) to finish", node_id,
                        failover.target_id)
            logged = True
        await asyncio.sleep(0.2)


class TakeoverGuard:
    """Halts the process once the metadata shows that another broker took over this incarnation's S3 WAL.

    Such an incarnation (fenced while paused, then resumed) can never be unfenced nor write again, and its
    heartbeats are refused forever; as AutoMQ halts a fenced node, it exits at once instead of lingering until an
    operator notices. Nothing is uploaded or committed on the way out (every such write would be refused: the WAL
    belongs to the failover now), so the process skips the orderly stop and exits non-zero; a restart registers a
    new incarnation, which waits for the failover to finish and serves again. Subscribed to the image as soon as
    the broker has registered."""

    def __init__(self, node_id: int, node_epoch: int) -> None:
        self.node_id = node_id
        self.node_epoch = node_epoch
        self.halting = False
        #: Set while this broker hands over (``broker.wal_handover``): the takeover is what it asked for, so it
        #: restarts in place (the same command, a new incarnation) rather than exiting for a supervisor.
        self.handing_over = False
        #: Hand-overs of this process so far (this incarnation's and the earlier ones'), passed on to the restart.
        self.handovers = 0
        #: Set once the broker's storage engine has stopped: it writes nothing any more, so a takeover of its WAL
        #: (the replay its last heartbeat may ask for) lets the orderly stop finish instead of halting it.
        self.stopped = False

    def __call__(self, old: MetadataImage, new: MetadataImage) -> None:
        if self.halting or self.stopped:
            return
        failover = zombie_failover(new, self.node_id, self.node_epoch)
        if failover is None:
            return
        self.halting = True
        if self.handing_over:
            logger.info(
                "node %d (epoch %d) handed over: broker %d replays its S3 WAL (failover attempt %d); it restarts in "
                "place and registers again once its WAL's bucket answers", self.node_id, self.node_epoch,
                failover.target_id, failover.attempt,
            )
            for handler in logging.getLogger().handlers:
                handler.flush()
            try:
                # The data-directory locks and the listeners' sockets are close-on-exec: the new image takes them
                # anew. The hand-over count rides along in the environment.
                os.environ[HANDOVERS_ENV] = str(self.handovers)
                os.execv(sys.executable, sys.orig_argv)
            except OSError as exc:
                logger.error("node %d cannot restart in place (%s); it halts instead", self.node_id, exc)
        logger.error(
            "node %d (epoch %d) was fenced and broker %d took over its S3 WAL (failover attempt %d): this incarnation "
            "can never write again; it halts now and must be restarted (exit status %d)",
            self.node_id, self.node_epoch, failover.target_id, failover.attempt, WAL_TAKEN_OVER_EXIT_STATUS,
        )
        logging.shutdown()  # flush the line above before the halt skips every other exit path
        os._exit(WAL_TAKEN_OVER_EXIT_STATUS)
