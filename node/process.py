"""``Node``: one process, with its roles (broker, controller, or both), wired in start order.

Start: controller (metadata replayed) → listeners bound (real ports known) → broker registered with its advertised
endpoints → S3 WAL location announced (and a failover of this broker's WAL by another one awaited) → storage engine
(WAL recovery; with an S3 WAL, replays of dead brokers' WALs assigned to this one) → partitions → group coordinator
→ listeners accept. Stop first has the controller move what a broker of a cluster leads to other brokers (controlled
shutdown), then runs the same steps in reverse, so a SIGTERM closes every partition cleanly (force upload,
clean-shutdown flag) before the storage engine and the controller go away.

``controller_factory`` lets a node use a controller other than its own in-process one (a Raft quorum client).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace

from broker.fetch_session import FetchSessionCache
from broker.groups.coordinator import GroupCoordinator
from broker.partition.manager import PartitionManager
from broker.partition.producer_ids import ProducerIdAllocator
from broker.request_dispatcher import RequestDispatcher
from broker.transactions.coordinator import TransactionCoordinator
from broker.wal_failover import WALFailoverRunner
from controller.decisions.wal_failover import wal_location_key, zombie_failover
from controller.quorum import QuorumController
from controller.scram_bootstrap import add_scram_credentials
from metadata.controller_api import ControlledShutdown, ControllerClient, LoadReporting, ScramUpsertion
from metadata.image import MetadataImage
from node.controller_handle import ControllerFactory, ControllerHandle, default_controller_factory
from node.metrics import register_node_metrics
from settings.connection_limits import dynamic_texts
from settings.endpoint import Endpoint
from settings.server import ServerConfig
from storage.config import ConfigError
from storage.durable import DirectoryLockedError, lock_directory
from storage.engine import StorageEngine
from storage.errors import StorageError
from storage.metadata.api import NodeIdentity
from storage.objectstore.base import StoreStats
from wire.connection_limits import ConnectionLimitSettings
from wire.listener import DEFAULT_MAX_IN_FLIGHT, ConnectionGate, KafkaListener
from wire.metrics import ServerMetrics
from wire.sasl import MAX_TOKEN_BYTES
from wire.tls_reload import CertificateReloader

logger = logging.getLogger(__name__)

FAILOVER_WAIT_S = 120.0  # how long a restarted broker waits for another broker to finish replaying its WAL
#: Exit status of a broker that halts because another broker took over its S3 WAL while it was fenced (a paused
#: process resumed): non-zero so that a supervisor (docker-compose's restart policy, systemd) starts it again.
WAL_TAKEN_OVER_EXIT_STATUS = 3


class Node:
    # Set by start(), in this order; a handler only runs once all of them are.
    controller: ControllerClient
    storage: StorageEngine
    partitions: PartitionManager
    producer_ids: ProducerIdAllocator

    def __init__(
        self,
        config: ServerConfig,
        *,
        controller_factory: ControllerFactory | None = None,
        scram_credentials: Sequence[ScramUpsertion] = (),
    ) -> None:
        """``scram_credentials``: SCRAM users to create before serving if they do not exist (``--add-scram``)."""
        self.config = config
        self.node_id = config.node_id
        self.cluster_id = ""
        self.metrics = ServerMetrics()
        self.fetch_sessions = FetchSessionCache()
        self.servers: list[KafkaListener] = []
        self.connection_gate: ConnectionGate | None = None  # a broker's connection quotas, once it starts
        self._connection_limit_texts: tuple[str | None, ...] = ()  # their dynamic values last asked for
        self._tls_reloaders: list[CertificateReloader] = []  # one per SSL listener: new certificates, no restart
        self.node_epoch = -1
        self._controller_factory = controller_factory or default_controller_factory(config)
        self._scram_credentials = tuple(scram_credentials)
        self._controller_handle: ControllerHandle | None = None
        self._metrics_port: int | None = None
        self._stopped = asyncio.Event()
        self._started = False
        self._dir_locks: list[int] = []
        self._failover: WALFailoverRunner | None = None
        self._halting = False
        self.groups: GroupCoordinator | None = None
        self.transactions: TransactionCoordinator | None = None
        self.quorum: QuorumController | None = None  # set on nodes with process.roles=controller
        register_node_metrics(self)  # storage, partitions, groups and controller, read at scrape time

    # -- the names handlers read ---------------------------------------------------------------------------------

    @property
    def server(self) -> KafkaListener:
        """The first client listener (most nodes have exactly one)."""
        return self.servers[0]

    @property
    def auto_create_topics_enable(self) -> bool:
        return self.config.auto_create_topics_enable

    @property
    def controller_address(self) -> tuple[str, int] | None:
        handle = self._controller_handle
        return handle.controller_address if handle is not None else None

    @property
    def bound_endpoints(self) -> tuple[Endpoint, ...]:
        """The advertised endpoints with ports resolved: a listener configured with port 0 advertises the port it
        actually bound (tests and ``fjord cluster up`` rely on this)."""
        bound = {server.listener_name: server.bound_port for server in self.servers}
        out = []
        for endpoint in self.config.advertised_endpoints():
            if endpoint.port == 0 and endpoint.name in bound:
                endpoint = replace(endpoint, port=bound[endpoint.name])
            out.append(endpoint)
        if not out:  # advertised.listeners defaults to the bound listeners
            out = [
                Endpoint(s.listener_name, s.host, s.bound_port, self.config.security_protocols.get(s.listener_name,
                                                                                               "PLAINTEXT"))
                for s in self.servers
            ]
        return tuple(out)

    def _store_stats(self) -> StoreStats | None:
        """The object store's request counts, once the storage engine runs (the metrics endpoint reads them)."""
        storage: StorageEngine | None = getattr(self, "storage", None)
        return storage.store.stats if storage is not None else None

    @property
    def metrics_port(self) -> int | None:
        return self._metrics_port

    # -- lifecycle -----------------------------------------------------------------------------------------------

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
        if "broker" not in self.config.process_roles:
            await self._start_controller_only()
            return
        self._controller_handle = await self._controller_factory(self.config)
        self.controller = self._controller_handle.client
        self.producer_ids = ProducerIdAllocator(self.controller, lambda: (self.node_id, self.node_epoch))
        self.cluster_id = self.controller.image.cluster_id
        await add_scram_credentials(self.controller, self._scram_credentials)

        dispatcher = RequestDispatcher(self, self.metrics, store_stats=self._store_stats)
        max_request = self.config.socket_request_max_bytes
        # Kafka's connection quotas, shared by the client listeners; dynamic (_apply_connection_limits).
        image = self.controller.image
        self.connection_gate = ConnectionGate(
            self.config.connection_limits(image.broker_configs, image.node_configs.get(self.node_id)), self.metrics
        )
        idle_ms = int(self.config.value("connections.max.idle.ms"))
        backlog = int(self.config.value("socket.listen.backlog.size"))
        for listener in self.config.broker_listeners:
            tls = self.config.tls.get(listener.name)
            server = KafkaListener(
                dispatcher,
                self.metrics,
                host=listener.host or "0.0.0.0",
                port=listener.port,
                listener_name=listener.name,
                max_request_bytes=max_request,
                max_in_flight=DEFAULT_MAX_IN_FLIGHT,
                connection_state=dispatcher.connection_state,
                ssl_context=tls.context() if tls is not None else None,
                unauthenticated_max_request_bytes=MAX_TOKEN_BYTES if listener.name in self.config.sasl else None,
                gate=self.connection_gate,
                idle_timeout_s=idle_ms / 1000 if idle_ms >= 0 else None,  # Kafka: negative, never
                backlog=backlog,
            )
            try:
                await server.bind()
            except OSError as exc:
                raise ConfigError(
                    f"listeners: cannot bind {listener.name} to {listener.host}:{listener.port}: {exc.strerror}"
                ) from None
            self.servers.append(server)
            if tls is not None:
                self._tls_reloaders.append(
                    CertificateReloader(server, tls.watched_files(), tls.context, tls.reload_interval_ms / 1000)
                )

        rack = self.config.rack
        self.node_epoch = await self.controller.register_broker(self.node_id, self.bound_endpoints, rack)
        logger.info("broker %d registered with epoch %d in cluster %s", self.node_id, self.node_epoch,
                    self.cluster_id)
        self.controller.subscribe(self._halt_if_wal_taken_over)
        self.controller.subscribe(self._apply_connection_limits)
        self._halt_if_wal_taken_over(self.controller.image, self.controller.image)

        storage_config = replace(self.config.storage, cluster_id=self.cluster_id, node_id=self.node_id,
                                 node_epoch=self.node_epoch)
        await self._announce_wal()
        await self._wait_for_wal_failover()
        self.storage = StorageEngine(storage_config, self.controller.stream_metadata)
        await self.storage.start()
        if storage_config.wal_url.scheme == "s3":
            self._failover = WALFailoverRunner(self.controller, self.storage)
            self._failover.start()
        self.partitions = PartitionManager(self, on_removed=dispatcher.traffic.forget)
        await self.partitions.start()
        self.groups = GroupCoordinator(self)
        await self.groups.start()
        self.transactions = TransactionCoordinator(self)
        await self.transactions.start()
        if isinstance(self.controller, LoadReporting):  # a broker of a cluster: its traffic, for the auto-balancer
            self.controller.report_load_from(dispatcher.traffic.partition_bytes)

        metrics_port = self._configured_metrics_port()
        if metrics_port is not None:
            self._metrics_port = self.metrics.start_http(metrics_port, self.config.value("metrics.host"))
        for server in self.servers:
            await server.start_serving()
        for reloader in self._tls_reloaders:
            reloader.start()
        logger.info(
            "node %d serving %s", self.node_id,
            ", ".join(f"{e.name}://{e.host}:{e.port}" for e in self.bound_endpoints),
        )

    def _apply_connection_limits(self, old: MetadataImage, new: MetadataImage) -> None:
        """max.connections and the other connection quota keys changed with AlterConfigs (cluster-wide or on this
        broker) apply to the connections accepted from now on. Rebuilt only when one of their values changed, off
        the event loop (host names in the overrides are resolved); a later change finished first is not undone."""
        node_dynamic = new.node_configs.get(self.node_id)
        wanted = dynamic_texts(new.broker_configs, node_dynamic)
        gate = self.connection_gate
        if gate is None or wanted == dynamic_texts(old.broker_configs, old.node_configs.get(self.node_id)):
            return
        self._connection_limit_texts = wanted

        def apply(built: asyncio.Future[ConnectionLimitSettings]) -> None:
            if built.cancelled() or wanted != self._connection_limit_texts:
                return
            if built.exception() is not None:
                logger.error("cannot apply the new connection quotas: %s", built.exception())
                return
            gate.reconfigure(built.result())

        asyncio.get_running_loop().run_in_executor(
            None, self.config.connection_limits, new.broker_configs, node_dynamic
        ).add_done_callback(apply)

    def _halt_if_wal_taken_over(self, old: MetadataImage, new: MetadataImage) -> None:
        """Halts the process once the metadata shows that another broker took over this incarnation's S3 WAL.

        Such an incarnation (fenced while paused, then resumed) can never be unfenced nor write again, and its
        heartbeats are refused forever; as AutoMQ halts a fenced node, it exits at once instead of lingering until
        an operator notices. Nothing is uploaded or committed on the way out (every such write would be refused:
        the WAL belongs to the failover now), so the process skips the orderly stop and exits non-zero; a restart
        registers a new incarnation, which waits for the failover to finish and serves again."""
        if self._halting or self.node_epoch < 0:
            return
        failover = zombie_failover(new, self.node_id, self.node_epoch)
        if failover is None:
            return
        self._halting = True
        logger.error(
            "node %d (epoch %d) was fenced and broker %d took over its S3 WAL (failover attempt %d): this incarnation "
            "can never write again; it halts now and must be restarted (exit status %d)",
            self.node_id, self.node_epoch, failover.target_id, failover.attempt, WAL_TAKEN_OVER_EXIT_STATUS,
        )
        logging.shutdown()  # flush the line above before the halt skips every other exit path
        os._exit(WAL_TAKEN_OVER_EXIT_STATUS)

    async def _announce_wal(self) -> None:
        """Tells the controller where this broker's S3 WAL lives, so that if the broker dies another broker of the
        same WAL bucket can replay it (``controller.decisions.wal_failover``); a file WAL has nothing to announce."""
        url = self.config.storage.wal_url
        metadata = self.controller.stream_metadata
        key = wal_location_key(self.node_id)
        if url.scheme == "s3":
            location = url.describe().encode()
            if await metadata.get_kv(key) != location:
                await metadata.put_kv(key, location)
        elif await metadata.get_kv(key) is not None:
            await metadata.delete_kv(key)

    async def _wait_for_wal_failover(self) -> None:
        """A broker restarted while another one still replays its WAL waits for that to finish before opening
        the WAL itself (both would otherwise fence each other's reservation); bounded, then a clear error. A
        failover no live broker is assigned to is taken back: this broker's own recovery replays the same WAL."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + FAILOVER_WAIT_S
        logged = False
        while True:
            failover = self.controller.image.wal_failovers.get(self.node_id)
            if failover is None or failover.done:
                return
            if failover.target_id < 0 and failover.node_epoch < self.node_epoch:
                try:
                    await self.controller.complete_wal_failover(
                        NodeIdentity(self.node_id, self.node_epoch), self.node_id, failover.node_epoch
                    )
                    logger.info("broker %d takes back the failover of its WAL (no live broker was assigned it); "
                                "its own recovery replays it", self.node_id)
                    return
                except StorageError as exc:  # assigned to a broker meanwhile: wait for it like for any other
                    logger.info("broker %d could not take back the failover of its WAL: %s", self.node_id, exc)
            if loop.time() >= deadline:
                raise ConfigError(
                    f"broker {self.node_id}: broker {failover.target_id} is still replaying this broker's WAL "
                    f"(failover attempt {failover.attempt}) after {FAILOVER_WAIT_S:.0f} s; start it again later"
                )
            if not logged:
                logger.info("broker %d waits for the failover of its WAL (by broker %d) to finish", self.node_id,
                            failover.target_id)
                logged = True
            await asyncio.sleep(0.2)

    async def _start_controller_only(self) -> None:
        """``process.roles=controller``: a quorum voter serving only the CONTROLLER listener (no Kafka listener,
        no storage engine)."""
        quorum = await QuorumController.start(self.config, metrics=self.metrics)
        self.quorum = quorum
        self.cluster_id = quorum.cluster_id
        metrics_port = self._configured_metrics_port()
        if metrics_port is not None:  # the CONTROLLER listener's requests and the auto-balancer's moves
            self._metrics_port = self.metrics.start_http(metrics_port, self.config.value("metrics.host"))
        logger.info("node %d serving the controller quorum only", self.node_id)

    def _configured_metrics_port(self) -> int | None:
        """``metrics.port`` (off when unset); settings parsed and range-checked it when the config loaded."""
        port: int | None = self.config.value("metrics.port")
        return port

    async def stop(self) -> None:
        """Stops in reverse start order; each step runs even if an earlier one failed (and logs it)."""
        if self._stopped.is_set():
            return
        logger.info("node %d shutting down", self.node_id)
        await self._controlled_shutdown()
        if self._controller_handle is not None:
            self._controller_handle.stopping()
        for reloader in self._tls_reloaders:
            await reloader.stop()
        for server in self.servers:
            await server.stop_accepting()
        # A start that failed half-way stops only what it started.
        groups = self.groups
        transactions = self.transactions
        partitions = getattr(self, "partitions", None)
        storage = getattr(self, "storage", None)
        quorum = self.quorum
        failover = self._failover
        steps: list[tuple[str, Callable[[], Awaitable[None]] | None]] = [
            ("transaction coordinator", transactions.stop if transactions is not None else None),
            ("group coordinator", groups.stop if groups is not None else None),
            ("partitions", partitions.stop if partitions is not None else None),
            ("WAL failover", failover.stop if failover is not None else None),
            ("connections", self._close_servers),
            ("storage engine", storage.shutdown if storage is not None else None),
            ("controller", self._controller_handle.close if self._controller_handle is not None else None),
            ("controller quorum", quorum.stop if quorum is not None else None),
        ]
        for name, step in steps:
            if step is None:
                continue
            try:
                await step()
            except Exception:
                logger.exception("node %d: stopping the %s failed", self.node_id, name)
        self.metrics.stop_http()
        self._unlock_data_dirs()
        self._stopped.set()
        logger.info("node %d stopped", self.node_id)

    async def _controlled_shutdown(self) -> None:
        """Before anything stops, a broker of a cluster has the controller move every partition it leads to other
        brokers while it still serves them (``controller.decisions.controlled_shutdown``): clients see a leader change
        of a fraction of a second instead of partitions unavailable until a fence. Bounded by
        ``controlled.shutdown.timeout.ms``; after that it stops anyway, which loses nothing (what it still leads
        is uploaded on the way out, and its fence hands the partitions over)."""
        controller = getattr(self, "controller", None)
        if not isinstance(controller, ControlledShutdown) or self.node_epoch < 0 or self._halting:
            return
        if not self.config.value("controlled.shutdown.enable"):
            return
        timeout_s = int(self.config.value("controlled.shutdown.timeout.ms")) / 1000
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            done = await controller.request_controlled_shutdown(timeout_s)
        except Exception:
            logger.exception("node %d: controlled shutdown failed; stopping anyway", self.node_id)
            return
        led = len(self.controller.image.partitions_led_by(self.node_id))
        if done:
            logger.info("node %d: controlled shutdown done in %.1f s: it leads %d partitions%s", self.node_id,
                        loop.time() - started, led, " (no other broker can take them)" if led else "")
        else:
            logger.warning("node %d: controlled shutdown not done after %.1f s (controlled.shutdown.timeout.ms is "
                           "%.0f s; or no controller answers, or this registration is gone); stopping anyway while it "
                           "leads %d partitions (their data is uploaded on the way out)",
                           self.node_id, loop.time() - started, timeout_s, led)

    async def _close_servers(self) -> None:
        for server in self.servers:
            await server.close()

    async def wait_stopped(self) -> None:
        await self._stopped.wait()
