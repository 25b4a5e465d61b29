"""``Node``: one process, with its roles (broker, controller, or both), started and stopped in order.

A node owns the process: the lock on its data directories, the metrics endpoint, the controller it gets
(``node.controller_handle``: its own in-process one, a Raft voter, or a client of the quorum), and the order in which
roles start and stop. Each role is an object of its own package: the broker (``broker.broker.Broker``) and the
controller quorum (``controller.quorum.QuorumController``).

Start: controller (metadata replayed) → SCRAM users of ``--add-scram`` and feature levels of ``--feature``, of the
command line or a format's ``bootstrap.properties`` (``node.first_start``) → the
broker joins (listeners bound, or the sockets ``fjord server start`` bound first taken over; broker registered with
its real ports, S3 WAL announced, a failover of it awaited) → broker started (storage engine with WAL recovery,
partitions, coordinators) → metrics endpoint → listeners accept.
Stop first has the controller move what a broker of a cluster leads to other brokers (controlled shutdown), then
runs the same steps in reverse, so a SIGTERM closes every partition cleanly (force upload, clean-shutdown flag)
before the storage engine and the controller go away.

``controller_factory`` lets a node use a controller other than its own in-process one (a Raft quorum client).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from broker.broker import Broker
from metadata.controller_api import FeatureUpdate
from node.controller_handle import (
    ControllerFactory,
    ControllerHandle,
    default_controller_factory,
    start_quorum_voter,
)
from node.early_listen import ListeningSockets
from node.first_start import apply_first_start, first_start
from node.metrics import register_node_metrics
from settings.scram_option import AddScram
from settings.server import ServerConfig
from storage.config import ConfigError
from storage.durable import DirectoryLockedError, lock_directory
from storage.namespace import namespace_for
from storage.objectstore.local_location import check_local_objects
from wire.early_answers import EarlyAnswers
from wire.metrics import ServerMetrics

if TYPE_CHECKING:  # imported by node.controller_handle for the nodes on Raft alone
    from controller.quorum import QuorumController

logger = logging.getLogger(__name__)


class Node:
    def __init__(
        self,
        config: ServerConfig,
        *,
        controller_factory: ControllerFactory | None = None,
        scram_credentials: Sequence[AddScram] = (),
        initial_features: Sequence[FeatureUpdate] = (),
        listening: ListeningSockets | None = None,
        early_answers: EarlyAnswers | None = None,
    ) -> None:
        """``scram_credentials``: SCRAM users to create before serving if they do not exist (``--add-scram``);
        ``initial_features``: the feature levels a new cluster finalizes (``--feature``); ``listening``: the client
        listeners' sockets bound at the start of the process (``node.early_listen``; None: the broker binds them);
        ``early_answers``: what answers ApiVersions on them until the broker serves (``wire.early_answers``)."""
        self.config = config
        self.node_id = config.node_id
        self.cluster_id = ""
        self.metrics = ServerMetrics()
        self._controller_factory = controller_factory or default_controller_factory(config)
        self._scram_credentials = tuple(scram_credentials)
        self._initial_features = tuple(initial_features)
        self._listening = listening or {}
        self._early_answers = early_answers
        self._controller_handle: ControllerHandle | None = None
        self._metrics_port: int | None = None
        self._stopped = asyncio.Event()
        self._started = False
        self._dir_locks: list[int] = []
        #: The broker role, once it has joined its cluster (None: a controller-only node, or not started yet).
        self.broker: Broker | None = None
        #: The controller role of a controller-only node (a combined node's is behind its controller handle).
        self.quorum: QuorumController | None = None
        register_node_metrics(self)  # storage, partitions, groups and controller, read at scrape time

    @property
    def metrics_port(self) -> int | None:
        return self._metrics_port

    async def start(self) -> None:
        if self._started:
            raise RuntimeError(f"node {self.node_id} already started")
        self._started = True
        try:
            await self._start()
        except BaseException:
            await self.stop()
            raise

    def _lock_data_dirs(self) -> None:
        """One process per data directory, as Kafka's ``.lock`` in every log directory: a node started on the
        directories of one still running (a restart racing the old process's shutdown) stops here, before it
        opens the metadata log, instead of interleaving writes with it."""
        for directory in dict.fromkeys((*self.config.log_dirs, self.config.metadata_dir)):
            try:
                self._dir_locks.append(lock_directory(directory))
            except DirectoryLockedError:
                raise ConfigError(
                    f"log.dirs: {directory} is in use by another Fjord process (is a node already running on it?)"
                ) from None
            except OSError as exc:
                raise ConfigError(f"log.dirs: cannot use {directory}: {exc.strerror}") from None

    def _unlock_data_dirs(self) -> None:
        while self._dir_locks:
            os.close(self._dir_locks.pop())

    async def _start(self) -> None:
        self._lock_data_dirs()
        options = first_start(self.config, self._scram_credentials, self._initial_features)
        if "broker" not in self.config.process_roles:
            await self._start_controller_only()
            return
        handle = self._controller_handle = await self._controller_factory(self.config)
        self.cluster_id = handle.client.image.cluster_id
        check_local_objects(self.config.storage.data_buckets[0], namespace_for(self.cluster_id),
                            self.config.metadata_dir)
        await apply_first_start(self.config, handle.client, options)
        self.broker = await Broker.join(
            self.config, handle.client, self.metrics, controller_address=handle.controller_address,
            listening=self._listening,
        )
        await self.broker.start()
        self._start_metrics()
        await self.broker.serve(self._early_answers.stop() if self._early_answers is not None else None)

    async def _start_controller_only(self) -> None:
        """``process.roles=controller``: a quorum voter serving only the CONTROLLER listener (no Kafka listener,
        no storage engine)."""
        quorum = await start_quorum_voter(self.config, self.metrics)
        self.quorum = quorum
        self.cluster_id = quorum.cluster_id
        self._start_metrics()  # the CONTROLLER listener's requests and the auto-balancer's moves
        logger.info("node %d serving the controller quorum only", self.node_id)

    def _start_metrics(self) -> None:
        """Serves the metrics endpoint on ``metrics.port`` (off when unset; range-checked when the config loaded)."""
        port: int | None = self.config.value("metrics.port")
        if port is not None:
            host = self.config.value("metrics.host")
            try:
                self._metrics_port = self.metrics.start_http(port, host)
            except OSError as exc:  # a port in use: one line naming the key, as a listener's bind error does
                raise ConfigError(f"metrics.port: cannot serve the metrics on {host}:{port}: "
                                  f"{exc.strerror or exc}") from None

    async def stop(self) -> None:
        """Stops in reverse start order; each step runs even if an earlier one failed (and logs it)."""
        if self._stopped.is_set():
            return
        logger.info("node %d shutting down", self.node_id)
        broker = self.broker
        if broker is not None:
            await broker.controlled_shutdown()
        if self._controller_handle is not None:
            self._controller_handle.stopping()
        if broker is not None:
            await self._step("broker", broker.stop)
        if self._controller_handle is not None:
            await self._step("controller", self._controller_handle.close)
        if self.quorum is not None:
            await self._step("controller quorum", self.quorum.stop)
        self.metrics.stop_http()
        self._unlock_data_dirs()
        self._stopped.set()
        logger.info("node %d stopped", self.node_id)

    async def _step(self, name: str, stop: Callable[[], Awaitable[None]]) -> None:
        try:
            await stop()
        except Exception:
            logger.exception("node %d: stopping the %s failed", self.node_id, name)

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    async def failed(self) -> Exception:
        """Returns, with its error, once the node's Raft replica of the metadata (a controller's voter, a broker's
        observer) has failed for good, as when its log cannot be written: the node no longer takes part in the
        quorum, or its broker's metadata stays as it is, so the process must stop for its supervisor to start it
        again (Kafka's fault handler halts it). Never returns for a node without one (the embedded default, whose
        metadata log refuses writes instead) or while the replica runs."""
        if self.quorum is not None:
            return await self.quorum.driver.failed()
        if self._controller_handle is not None and self._controller_handle.failed is not None:
            return await self._controller_handle.failed()
        never: asyncio.Future[Exception] = asyncio.get_running_loop().create_future()
        return await never
