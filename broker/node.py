"""``BrokerNode``: one process's broker (with, in the combined mode, its controller), wired in start order.

Start: controller (metadata replayed) → listeners bound (real ports known) → broker registered with its advertised
endpoints → storage engine (WAL recovery) → partitions → group coordinator → listeners accept. Stop runs the same
steps in reverse, so a SIGTERM closes every partition cleanly (force upload, clean-shutdown flag) before the storage
engine and the controller go away.

The partition layer, the group coordinator and the storage engine are separate components; they are imported when
the node starts, so a node still runs (serving metadata and admin APIs) where one of them is not installed.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from broker.metrics import BrokerMetrics
from broker.server import DEFAULT_MAX_IN_FLIGHT, BrokerServer, RequestDispatcher
from controller.client import ControllerClient
from controller.config import BROKER_KEYS, ServerConfig
from controller.records import Endpoint
from storage.config import ConfigError

logger = logging.getLogger(__name__)

ControllerFactory = Callable[[ServerConfig], Awaitable["ControllerHandle"]]


class ControllerHandle:
    """A started controller: the client the broker uses and how to stop it."""

    def __init__(self, client: ControllerClient, close: Callable[[], Awaitable[None]] | None = None) -> None:
        self.client = client
        self._close = close

    async def close(self) -> None:
        if self._close is not None:
            await self._close()


def _optional_class(module: str, name: str) -> Any:
    """The class ``module.name``, or None when that component is not part of this installation yet."""
    try:
        imported = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        # Only our own packages may be missing (components land independently); a missing third-party
        # dependency is a broken installation and must fail loudly.
        if exc.name is not None and exc.name.split(".")[0] in ("storage", "broker", "controller"):
            logger.warning("%s is not available (%s); the node runs without it", module, exc)
            return None
        raise
    return getattr(imported, name, None)


async def open_local_controller(config: ServerConfig) -> ControllerHandle:
    """The combined node's in-process controller over its local metadata log (the embedded default)."""
    from controller.client import LocalControllerClient
    from controller.controller import Controller

    controller = await Controller.start(config)
    return ControllerHandle(LocalControllerClient(controller), controller.close)


async def _start_component(name: str, construct: Callable[[], Any], start: str) -> Any:
    """Constructs and starts one component; None when a module it needs is not installed yet (see
    ``_optional_class``). Any other failure propagates and fails the node's start."""
    try:
        component = construct()
        await getattr(component, start)()
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] not in ("storage", "broker", "controller"):
            raise
        logger.warning("%s is not available (%s); the node runs without it", name, exc)
        return None
    return component


class BrokerNode:
    def __init__(self, config: ServerConfig, *, controller_factory: ControllerFactory | None = None) -> None:
        self.config = config
        self.node_id = config.node_id
        self.cluster_id = ""
        self.metrics = BrokerMetrics()
        self.controller: ControllerClient = None  # type: ignore[assignment]  # set by start()
        self.storage: Any = None
        self.partitions: Any = None
        self.groups: Any = None
        self.servers: list[BrokerServer] = []
        self.node_epoch = -1
        self._controller_factory = controller_factory or open_local_controller
        self._controller_handle: ControllerHandle | None = None
        self._metrics_port: int | None = None
        self._stopped = asyncio.Event()
        self._started = False

    # -- the names handlers read ---------------------------------------------------------------------------------

    @property
    def server(self) -> BrokerServer:
        """The first client listener (most nodes have exactly one)."""
        return self.servers[0]

    @property
    def auto_create_topics_enable(self) -> bool:
        return self.config.auto_create_topics_enable

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

    async def _start(self) -> None:
        self._controller_handle = await self._controller_factory(self.config)
        self.controller = self._controller_handle.client
        self.cluster_id = self.controller.image.cluster_id

        dispatcher = RequestDispatcher(self, self.metrics)
        max_request = self.config.socket_request_max_bytes
        for listener in self.config.broker_listeners:
            server = BrokerServer(
                dispatcher,
                host=listener.host or "0.0.0.0",
                port=listener.port,
                listener_name=listener.name,
                max_request_bytes=max_request,
                max_in_flight=DEFAULT_MAX_IN_FLIGHT,
            )
            try:
                await server.bind()
            except OSError as exc:
                raise ConfigError(
                    f"listeners: cannot bind {listener.name} to {listener.host}:{listener.port}: {exc.strerror}"
                ) from None
            self.servers.append(server)

        rack = self.config.rack
        self.node_epoch = await self.controller.register_broker(self.node_id, self.bound_endpoints, rack)
        logger.info("broker %d registered with epoch %d in cluster %s", self.node_id, self.node_epoch,
                    self.cluster_id)

        engine_cls = _optional_class("storage.engine", "StorageEngine")
        if engine_cls is not None:
            storage_config = replace(self.config.storage, cluster_id=self.cluster_id, node_id=self.node_id,
                                     node_epoch=self.node_epoch)
            self.storage = await _start_component(
                "storage engine", lambda: engine_cls(storage_config, self.controller.stream_metadata), "start"
            )
        manager_cls = _optional_class("broker.partition.manager", "PartitionManager")
        if manager_cls is not None and self.storage is not None:
            self.partitions = await _start_component("partition manager", lambda: manager_cls(self), "start")
        coordinator_cls = _optional_class("broker.groups.coordinator", "GroupCoordinator")
        if coordinator_cls is not None and self.partitions is not None:
            self.groups = await _start_component("group coordinator", lambda: coordinator_cls(self), "start")

        metrics_port = self._configured_metrics_port()
        if metrics_port is not None:
            self._metrics_port = self.metrics.start_http(metrics_port)
        for server in self.servers:
            await server.start_serving()
        logger.info(
            "node %d serving %s", self.node_id,
            ", ".join(f"{e.name}://{e.host}:{e.port}" for e in self.bound_endpoints),
        )

    def _configured_metrics_port(self) -> int | None:
        """``metrics.port`` (off when unset). Read as a raw static value until controller.config defines the key."""
        if "metrics.port" in BROKER_KEYS:
            value = self.config.value("metrics.port")
            text = None if value is None else str(value)
        else:
            text = self.config.static.get("metrics.port")
        if text is None or not text.strip():
            return None
        try:
            port = int(text)
        except ValueError:
            raise ConfigError(f"metrics.port: {text!r} is not a port number") from None
        if not 0 <= port <= 65535:
            raise ConfigError(f"metrics.port: {port} is outside 0-65535")
        return port

    async def stop(self) -> None:
        """Stops in reverse start order; each step runs even if an earlier one failed (and logs it)."""
        if self._stopped.is_set():
            return
        logger.info("node %d shutting down", self.node_id)
        for server in self.servers:
            await server.stop_accepting()
        steps: list[tuple[str, Callable[[], Awaitable[None]] | None]] = [
            ("group coordinator", self.groups.stop if self.groups is not None else None),
            ("partitions", self.partitions.stop if self.partitions is not None else None),
            ("connections", self._close_servers),
            ("storage engine", self.storage.shutdown if self.storage is not None else None),
            ("controller", self._controller_handle.close if self._controller_handle is not None else None),
        ]
        for name, step in steps:
            if step is None:
                continue
            try:
                await step()
            except Exception:
                logger.exception("node %d: stopping the %s failed", self.node_id, name)
        self.metrics.stop_http()
        self._stopped.set()
        logger.info("node %d stopped", self.node_id)

    async def _close_servers(self) -> None:
        for server in self.servers:
            await server.close()

    async def wait_stopped(self) -> None:
        await self._stopped.wait()
