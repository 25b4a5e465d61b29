"""``Broker``: the broker role of a node, the object that owns what a broker owns.

A broker joins its cluster in :meth:`Broker.join`: its client listeners are bound (so it advertises the ports it
really has), it registers with the controller and gets its node epoch, announces its S3 WAL and waits for any
failover of that WAL to end. Only then can the rest exist (the storage engine's WAL is fenced by the node epoch), so
the broker is constructed complete there: storage engine, WAL failover runner, request dispatcher, partitions, the
group and transaction coordinators. :meth:`start` starts them in that order, :meth:`serve` opens the listeners, and
:meth:`stop` stops what was started, in reverse.

Handlers and coordinators see the broker through ``broker.services.BrokerServices``, never this class, and the
node (``node.process``) only composes roles: it gives the broker a controller client and its metrics.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace

from broker.broker_context import BrokerContext
from broker.connection_limits import ConnectionLimitsWatcher
from broker.fetch_session import FetchSessionCache
from broker.groups.coordinator import GroupCoordinator
from broker.partition.manager import PartitionManager
from broker.partition.producer_ids import ProducerIdAllocator
from broker.request_dispatcher import RequestDispatcher
from broker.share.metrics import ShareMetrics
from broker.share.offsets_admin import ShareOffsetsAdmin
from broker.share.registry import SharePartitions
from broker.share.state_rpc import ShareStateAccess
from broker.share_sessions import ShareSessions
from broker.telemetry.service import ClientTelemetry
from broker.transactions.coordinator import TransactionCoordinator
from broker.transactions.offsets_verification import txn_offset_commit_verifier
from broker.transactions.peers import Peers
from broker.wal_failover import WALFailoverRunner
from broker.wal_handover import WALHandover
from broker.wal_ownership import TakeoverGuard, announce_wal, wait_for_wal_bucket, wait_for_wal_failover
from metadata.controller_api import ControlledShutdown, ControllerClient, LoadReporting, WriteFencing
from metadata.group_configs import ShareGroupConfigs, share_groups_enabled
from settings.endpoint import Endpoint
from settings.server import ServerConfig
from storage.config import ConfigError
from storage.engine import StorageEngine
from wire import codec
from wire.connection_gate import ConnectionGate
from wire.early_answers import EarlyConnection
from wire.listener import DEFAULT_MAX_IN_FLIGHT, KafkaListener
from wire.memory_pool import pool_of, seconds_or_never
from wire.metrics import ServerMetrics
from wire.sasl import MAX_TOKEN_BYTES
from wire.tls_reload import CertificateReloader

logger = logging.getLogger(__name__)

#: The API keys whose wire classes a starting broker loads ahead (:meth:`Broker._preload_data_path`): Produce, Fetch.
_PRELOADED_APIS = (0, 1)
_STEP_FLOOR_S = 0.5  # what a stop step gets once s3.shutdown.upload.max.ms has run out


class Broker:
    """A broker that has joined its cluster; build it with :meth:`join`."""

    def __init__(
        self,
        config: ServerConfig,
        controller: ControllerClient,
        metrics: ServerMetrics,
        *,
        listeners: list[KafkaListener],
        gate: ConnectionGate,
        node_epoch: int,
        takeover: TakeoverGuard,
        controller_address: tuple[str, int] | None = None,
    ) -> None:
        """Everything a broker owns, constructed and not yet started. ``listeners`` are bound; ``node_epoch`` is the
        registration's; ``controller_address``: where an embedded controller serves its CONTROLLER listener (what
        DescribeQuorum names)."""
        self.config = config
        self.node_id = config.node_id
        self.controller = controller
        self.cluster_id = controller.image.cluster_id
        self.node_epoch = node_epoch
        self.metrics = metrics
        self.listeners = listeners
        self.connection_gate = gate
        self.controller_address = controller_address
        self._takeover = takeover
        #: What the broker's parts read of it (``broker.broker_context``).
        self.context = BrokerContext(self.node_id, self.cluster_id, config, controller)
        self.fetch_sessions = FetchSessionCache(int(config.value("max.incremental.fetch.session.cache.slots")))
        self.producer_ids = ProducerIdAllocator(controller, lambda: (self.node_id, self.node_epoch))
        self.telemetry = ClientTelemetry(config)
        storage_config = replace(config.storage, cluster_id=self.cluster_id, node_id=self.node_id,
                                 node_epoch=node_epoch)
        self.storage = StorageEngine(storage_config, controller.stream_metadata)
        self.wal_failover = (
            WALFailoverRunner(controller, self.storage) if storage_config.wal_url.scheme == "s3" else None
        )
        #: Asks to be fenced while the S3 WAL cannot write (``broker.wal_handover``); None with a file WAL (nobody
        #: else could replay it), ``s3.wal.handover.ms`` -1, or no other broker to hand over to.
        self.wal_handover = (
            WALHandover(self.node_id, lambda: self.storage.wal, controller, storage_config.wal_handover_ms / 1000,
                        takeover)
            if self.wal_failover is not None and storage_config.wal_handover_ms >= 0
            and isinstance(controller, WriteFencing) else None
        )
        self.dispatcher = RequestDispatcher(self, metrics, store_stats=lambda: self.storage.store.stats)
        self.partitions = PartitionManager(self.context, self.storage, on_removed=self._partition_removed)
        #: Share groups' record counters on /metrics (the share partitions count into it).
        self.share_metrics = ShareMetrics(self.node_id)
        share_settings = config.share_groups  # parsed once: the keys are static

        share_config = ShareGroupConfigs(lambda: self.controller.image, share_settings)

        def share_enabled() -> bool:
            return share_groups_enabled(self.controller.image)

        self.share_partitions = SharePartitions(self.partitions, share_config, metrics=self.share_metrics)
        self.share_sessions = ShareSessions(
            self.share_partitions,
            max_sessions=share_settings.max_share_sessions,
            record_lock_duration_ms=lambda group_id: share_config(group_id).record_lock_duration_ms,
            enabled=share_enabled,
        )
        self.groups = GroupCoordinator(self.context, self.partitions)
        self.transactions = TransactionCoordinator(self.context, self.partitions, self.producer_ids, self.groups)
        self.groups.verify_transaction = txn_offset_commit_verifier(self.transactions, self.controller)
        self._share_peers = Peers(self.context)
        self.share_offsets = ShareOffsetsAdmin(
            self.context,
            ShareStateAccess(self.context, self.partitions, self._share_peers, store=self.share_partitions),
            groups=self.groups,
            enabled=share_enabled,
        )
        self._tls_reloaders = [
            CertificateReloader(server, tls.watched_files(), tls.context, tls.reload_interval_ms / 1000)
            for server in listeners
            if (tls := config.tls.get(server.listener_name)) is not None
        ]
        #: What :meth:`start` started, each with how it stops.
        self._started: list[tuple[str, Callable[[], Awaitable[None]]]] = []

    @classmethod
    async def join(
        cls,
        config: ServerConfig,
        controller: ControllerClient,
        metrics: ServerMetrics,
        *,
        controller_address: tuple[str, int] | None = None,
        listening: Mapping[str, Sequence[socket.socket]] | None = None,
    ) -> Broker:
        """Binds the client listeners (or takes their sockets from ``listening``, bound earlier by the node),
        registers this broker with their real ports, announces its WAL and waits for a failover of it to end; then
        the broker is built. Closes the listeners if any step, or building the broker, fails."""
        node_id = config.node_id
        image = controller.image
        gate = ConnectionGate(config.connection_limits(image.broker_configs, image.node_configs.get(node_id)), metrics)
        listeners = _client_listeners(config, metrics, gate, listening or {})
        takeover: TakeoverGuard | None = None
        try:
            for server in listeners:
                try:
                    await server.bind()
                except OSError as exc:
                    raise ConfigError(f"listeners: cannot bind {server.listener_name} to {server.host}:{server.port}: "
                                      f"{exc.strerror}") from None
            await wait_for_wal_bucket(config, image.cluster_id)
            node_epoch = await controller.register_broker(node_id, bound_endpoints(config, listeners), config.rack)
            logger.info("broker %d registered with epoch %d in cluster %s", node_id, node_epoch, image.cluster_id)
            takeover = TakeoverGuard(node_id, node_epoch)
            controller.subscribe(takeover)
            controller.subscribe(ConnectionLimitsWatcher(config, gate))
            takeover(controller.image, controller.image)
            await announce_wal(config, controller)
            await wait_for_wal_failover(controller, node_id, node_epoch)
            return cls(config, controller, metrics, listeners=listeners, gate=gate, node_epoch=node_epoch,
                       takeover=takeover, controller_address=controller_address)
        except BaseException:
            if takeover is not None and not takeover.halting:  # registered: it may lead partitions already
                await hand_over_partitions(config, controller)
            for server in listeners:
                await server.close()
            raise

    # -- what handlers read (broker.services.BrokerServices) ------------------------------------------------------

    @property
    def auto_create_topics_enable(self) -> bool:
        return self.config.auto_create_topics_enable

    @property
    def server(self) -> KafkaListener:
        """The first client listener (most brokers have exactly one)."""
        return self.listeners[0]

    @property
    def bound_endpoints(self) -> tuple[Endpoint, ...]:
        return bound_endpoints(self.config, self.listeners)

    def _partition_removed(self, topic: str, partition: int) -> None:
        """A partition closed or was deleted here: its traffic counters and its share partitions go with it."""
        self.dispatcher.traffic.forget(topic, partition)
        self.share_partitions.forget(topic, partition)

    # -- lifecycle -------------------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Starts the storage engine (WAL recovery), the WAL failover runner, the partitions this broker leads and
        both coordinators, in that order; nothing is served yet. Then the data path's wire classes start loading
        on a thread (``_preload_data_path``): after the recovery and the opens, so that a restart's own work does
        not share the GIL with it."""
        await self._start("storage engine", self.storage.start(), self.storage.shutdown)
        if self.wal_failover is not None:
            self.wal_failover.start()
            self._started.append(("WAL failover", self.wal_failover.stop))
        if self.wal_handover is not None:
            self.wal_handover.start()
            self._started.append(("WAL hand-over", self.wal_handover.stop))
        await self._start("partitions", self.partitions.start(), self.partitions.stop)
        await self._start("share partitions", self._start_share_partitions(), self.share_partitions.stop)
        await self._start("group coordinator", self.groups.start(), self.groups.stop)
        await self._start("transaction coordinator", self.transactions.start(), self.transactions.stop)
        self._started.append(("share-state connections", self._share_peers.close))
        if isinstance(self.controller, LoadReporting):  # a broker of a cluster: its traffic, for the auto-balancer
            self.controller.report_load_from(self.dispatcher.traffic.partition_bytes)
        self._preload_data_path()

    def _preload_data_path(self) -> None:
        """Loads the wire classes of the requests a client sends to a partition's new leader (Produce, Fetch; every
        version served) on a thread of their own while the broker starts: loaded on first use they held the event
        loop 50-120 ms when a broker started for a balancing move got its first produce request, in the middle of
        opening the partitions it was moved, and delayed the elections queued behind. A request that comes first
        only waits for its own module's import. The broker's stop ends it after the version it is loading: not a
        daemon thread, since one still importing when the interpreter finalized once aborted a node's clean exit
        (SIGABRT, "exception not rethrown", right after "node 0 stopped")."""
        wanted = [(key, self.dispatcher.versions[key]) for key in _PRELOADED_APIS if key in self.dispatcher.versions]
        stopped = threading.Event()

        def preload() -> None:
            for key, served in wanted:
                # Newest first: what current clients send is ready soonest.
                for version in range(served.max_version, served.min_version - 1, -1):
                    if stopped.is_set():
                        return
                    codec.preload(key, range(version, version + 1))

        async def stop() -> None:
            stopped.set()

        threading.Thread(target=preload, name="fjord-wire-preload").start()
        self._started.append(("wire preload", stop))

    async def _start_share_partitions(self) -> None:
        self.share_partitions.start()

    async def _start(self, name: str, starting: Awaitable[None], stop: Callable[[], Awaitable[None]]) -> None:
        # Recorded before it is awaited: a start that fails half-way still has its part stopped.
        self._started.append((name, stop))
        await starting

    async def serve(self, accepted: Mapping[str, Sequence[EarlyConnection]] | None = None) -> None:
        """Accepts connections on every client listener, and reloads their renewed certificates from now on.
        ``accepted``: by listener name, connections accepted while the node started (``wire.early_answers``)."""
        accepted = accepted or {}
        for server in self.listeners:
            await server.start_serving(self.dispatcher, connection_state=self.dispatcher.connection_state,
                                       accepted=accepted.get(server.listener_name, ()))
        for reloader in self._tls_reloaders:
            reloader.start()
        # "node N serving ..." is the line operators and tools wait for (a node serves once its broker does).
        logger.info("node %d serving %s", self.node_id,
                    ", ".join(f"{e.name}://{e.host}:{e.port}" for e in self.bound_endpoints))

    async def controlled_shutdown(self) -> None:
        """Before anything stops, the controller moves what this broker leads (:func:`hand_over_partitions`);
        an incarnation halting because its WAL was taken over asks nothing."""
        if not self._takeover.halting:
            await hand_over_partitions(self.config, self.controller)

    async def stop_accepting(self) -> None:
        """No new connections (the first step of a stop; open connections are served until the partitions close)."""
        for reloader in self._tls_reloaders:
            await reloader.stop()
        for server in self.listeners:
            await server.stop_accepting()

    async def stop(self) -> None:
        """Stops, in reverse start order, what was started: the coordinators, the partitions (each closed cleanly:
        force upload, clean-shutdown flag), the WAL failover runner, the connections, the storage engine. Each
        step runs even if an earlier one failed (and is logged).

        Everything up to the storage engine's last uploads shares one bound, ``s3.shutdown.upload.max.ms``: during
        an S3 outage the closes would wait on the upload pipeline's retries. Past it a step is cut short and the
        engine stops as after a crash: appends not yet written fail (never acknowledged), what was acknowledged
        stays in the WAL, and a broker of an S3 WAL asks in its last heartbeat to hand over (``broker.wal_handover``)
        so that another broker replays it and its partitions' new leaders can open them."""
        await self.stop_accepting()
        # The connections close after the partitions (requests in flight are answered), before the storage engine.
        order = ["wire preload", "transaction coordinator", "group coordinator", "share partitions", "partitions",
                 "WAL failover", "connections", "storage engine"]
        started = dict(self._started)
        self._started.clear()
        loop = asyncio.get_running_loop()
        bound_s = self.storage.config.shutdown_upload_max_ms / 1000
        deadline = loop.time() + bound_s
        for name in order:
            step = started.get(name) if name != "connections" else self._close_listeners
            if step is None:
                continue
            try:
                if name == "storage engine":  # bounded by its own timeout, which abandons what is left
                    await self.storage.shutdown(max(0.0, deadline - loop.time()))
                elif name == "connections":
                    await step()
                else:  # a step after one that was cut short still gets a moment to let go of its tasks
                    await asyncio.wait_for(step(), max(_STEP_FLOOR_S, deadline - loop.time()))
            except TimeoutError:
                logger.warning("node %d: stopping the %s did not finish within s3.shutdown.upload.max.ms (%.0f ms); "
                               "cut short", self.node_id, name, bound_s * 1000)
            except Exception:
                logger.exception("node %d: stopping the %s failed", self.node_id, name)
        self._takeover.stopped = True
        if self.storage.left_wal_tail and self.wal_failover is not None and isinstance(self.controller, WriteFencing):
            logger.warning("node %d stopped with acknowledged records only in its S3 WAL; its last heartbeat asks "
                           "another broker to replay it", self.node_id)
            self.controller.want_fence(True)

    async def _close_listeners(self) -> None:
        for server in self.listeners:
            await server.close()


def _client_listeners(
    config: ServerConfig, metrics: ServerMetrics, gate: ConnectionGate, listening: Mapping[str, Sequence[socket.socket]]
) -> list[KafkaListener]:
    """One ``KafkaListener`` per client listener, sharing Kafka's connection quotas (``gate``): unbound, or on its
    sockets in ``listening``."""
    idle_ms = int(config.value("connections.max.idle.ms"))
    backlog = int(config.value("socket.listen.backlog.size"))
    pool = pool_of(int(config.value("queued.max.request.bytes")))  # one for all the node's client listeners
    setup_s = seconds_or_never(int(config.value("fjord.connections.setup.max.ms")))
    listeners = []
    for listener in config.broker_listeners:
        tls = config.tls.get(listener.name)
        listeners.append(KafkaListener(
            metrics,
            host=listener.host or "0.0.0.0",
            port=listener.port,
            listener_name=listener.name,
            max_request_bytes=config.socket_request_max_bytes_of(listener.name),
            max_request_bytes_key=config.socket_request_max_bytes_key_of(listener.name),
            max_in_flight=DEFAULT_MAX_IN_FLIGHT,
            ssl_context=tls.context() if tls is not None else None,
            unauthenticated_max_request_bytes=MAX_TOKEN_BYTES if listener.name in config.sasl else None,
            gate=gate,
            idle_timeout_s=seconds_or_never(idle_ms),
            backlog=backlog,
            memory_pool=pool,
            setup_timeout_s=setup_s,
            frame_timeout_s=seconds_or_never(idle_ms),
            sockets=listening.get(listener.name, ()),
            send_buffer_bytes=int(config.value("socket.send.buffer.bytes")),
            receive_buffer_bytes=int(config.value("socket.receive.buffer.bytes")),
        ))
    return listeners


def bound_endpoints(config: ServerConfig, listeners: list[KafkaListener]) -> tuple[Endpoint, ...]:
    """The advertised endpoints with ports resolved: a listener configured with port 0 advertises the port it
    actually bound (tests and ``fjord cluster up`` rely on this)."""
    bound = {server.listener_name: server.bound_port for server in listeners}
    out = []
    for endpoint in config.advertised_endpoints():
        if endpoint.port == 0 and endpoint.name in bound:
            endpoint = replace(endpoint, port=bound[endpoint.name])
        out.append(endpoint)
    if not out:  # advertised.listeners defaults to the bound listeners
        out = [
            Endpoint(s.listener_name, s.host, s.bound_port, config.security_protocols.get(s.listener_name, "PLAINTEXT"))
            for s in listeners
        ]
    return tuple(out)


async def hand_over_partitions(config: ServerConfig, controller: ControllerClient) -> None:
    """A broker of a cluster about to stop has the controller move every partition it leads to other brokers while
    it still serves them (``controller.decisions.controlled_shutdown``): clients see a leader change of a fraction of
    a second instead of partitions unavailable until a fence. Bounded by ``controlled.shutdown.timeout.ms``; after
    that it stops anyway, which loses nothing (what it still leads is uploaded on the way out, and its fence hands
    the partitions over). A node's own in-process controller has nobody to hand over to."""
    node_id = config.node_id
    if not isinstance(controller, ControlledShutdown) or not config.value("controlled.shutdown.enable"):
        return
    timeout_s = int(config.value("controlled.shutdown.timeout.ms")) / 1000
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        done = await controller.request_controlled_shutdown(timeout_s)
    except Exception:
        logger.exception("node %d: controlled shutdown failed; stopping anyway", node_id)
        return
    led = len(controller.image.partitions_led_by(node_id))
    if done:
        logger.info("node %d: controlled shutdown done in %.1f s: it leads %d partitions%s", node_id,
                    loop.time() - started, led, " (no other broker can take them)" if led else "")
    else:
        logger.warning("node %d: controlled shutdown not done after %.1f s (controlled.shutdown.timeout.ms is "
                       "%.0f s; or no controller answers, or this registration is gone); stopping anyway while it "
                       "leads %d partitions (their data is uploaded on the way out)",
                       node_id, loop.time() - started, timeout_s, led)
