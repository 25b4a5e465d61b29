"""A node's configuration: its ``server.properties`` plus ``--override`` pairs, typed and validated.

:meth:`ServerConfig.load` parses every value with its key's definition in :mod:`settings.keys` (the
``s3.*`` keys go to :class:`storage.config.StorageConfig`, composed here, not duplicated), then checks what only the
whole file can tell: listeners, the controller quorum's voters, and the roles this node plays. Security settings
are :mod:`settings.security`'s: TLS of SSL and SASL_SSL listeners, SASL of SASL_* listeners, and the ACL and
quota keys that stop the node; :mod:`settings.inter_broker` resolves how this broker reaches the others.
Kafka's other broker keys are :mod:`settings.kafka_broker_keys`'s: refused at start naming the key, or
accepted with an INFO line saying why they have no effect; only a key Kafka does not know gets Kafka's warning.
"""

from __future__ import annotations

import logging
import os
import socket
import ssl
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from settings.bootstrap_file import META_PROPERTIES, read_bootstrap
from settings.config_key import MS_PER_MINUTE, ConfigValueError
from settings.connection_limits import (
    check_per_ip,
    connection_limit_settings,
    listener_connection_limits,
    listener_connection_override,
)
from settings.consumer_groups import ConsumerGroupSettings, consumer_group_settings
from settings.controller_sasl import ControllerSasl, controller_sasl
from settings.endpoint import Endpoint
from settings.inter_broker import InterBrokerSettings, inter_broker_settings
from settings.kafka_broker_keys import (
    KAFKA_BROKER_KEYS,
    NODE_ID_SYNONYM,
    accepted_as_fjord_does,
    accepted_as_kafka_default,
    kafka_key_refusal,
    no_effect_reason,
    refusal_reason,
)
from settings.keys import BROKER_KEYS
from settings.listener_request_size import KEY, listener_request_max_bytes, listener_request_override
from settings.listeners import Listener, parse_listeners, parse_protocol_map
from settings.quorum_voters import QuorumVoter, resolve_voters
from settings.security import (
    SASL_PROTOCOLS,
    TLS_PROTOCOLS,
    ListenerSasl,
    ListenerTls,
    check_listener_protocols,
    listener_override,
    listener_sasl,
    listener_tls,
    refuse_unimplemented,
    sasl_listener_override,
)
from settings.share_groups import ShareGroupSettings, share_group_settings
from storage.config import BucketURL, ConfigError, StorageConfig, parse_overrides, read_properties
from storage.wal.segments import SEGMENT_SUFFIX
from wire.connection_limits import ConnectionLimitSettings
from wire.sasl.client import SaslCredentials
from wire.tls import ClientTls

logger = logging.getLogger(__name__)


def _check_kafka_keys(props: Mapping[str, str]) -> dict[str, str]:
    """Applies what Fjord does with the Kafka keys outside its catalogue (:mod:`settings.kafka_broker_keys`):
    ConfigError naming the first refused key (in file order); ``broker.id`` read as ``node.id``, Kafka's synonym;
    one INFO line per accepted key that changes nothing. Returns the properties to load."""
    for name, value in props.items():
        reason = kafka_key_refusal(name, value)
        if reason is not None:
            raise ConfigError(f"{name}: {reason}")
    out = dict(props)
    if NODE_ID_SYNONYM in props:
        given = props[NODE_ID_SYNONYM].strip()
        try:
            broker_id = BROKER_KEYS["node.id"].parse(given)
        except ConfigValueError:
            raise ConfigError(
                f"{NODE_ID_SYNONYM}: {given!r} is not a node id (a number of at least 0; broker.id is "
                "Kafka's other name for node.id)"
            ) from None
        if "node.id" not in props:
            out["node.id"] = given
        elif _as_int(props["node.id"]) not in (None, broker_id):  # 01 and 1 name the same node
            raise ConfigError(f"{NODE_ID_SYNONYM}: {given} differs from node.id {props['node.id'].strip()} "
                              "(broker.id is Kafka's other name for node.id; give one of them)")
    for name, value in props.items():
        reason = no_effect_reason(name)
        if reason is not None:
            logger.info("%s has no effect in Fjord: %s", name, reason)
        elif accepted_as_fjord_does(name, value):
            logger.info("%s=%s is accepted: it is what Fjord does", name, value.strip())
        elif accepted_as_kafka_default(name, value):
            logger.info(
                "%s=%s is accepted as Kafka's default, though Fjord does not do what it asks: %s",
                name,
                value.strip(),
                refusal_reason(name),
            )
    return out


def _formatted_voters(
    props: Mapping[str, str], values: Mapping[str, Any], formatting: Sequence[QuorumVoter] | str | None
) -> tuple[Sequence[QuorumVoter], bool]:
    """The voters a controller named by bootstrap servers alone was formatted with: those being formatted, else
    those its metadata directory's ``bootstrap.properties`` holds (read only for such a controller); and whether it
    was formatted to join a running quorum instead (``--no-initial-controllers``: a file that names no voter)."""
    if formatting is not None:
        return (() if isinstance(formatting, str) else formatting), formatting == "joining"
    if ("controller" not in values["process.roles"] or "controller.quorum.voters" in props
            or not values["controller.quorum.bootstrap.servers"]):
        return (), False
    metadata_dir = _metadata_dir(props, values)
    bootstrap = read_bootstrap(metadata_dir) if metadata_dir else None
    if bootstrap is None:
        return (), False
    return bootstrap.voters, not bootstrap.voters


def _formatted_directory(props: Mapping[str, str], values: Mapping[str, Any]) -> bool:
    """Whether the node's metadata directory is formatted (it has its ``meta.properties``)."""
    metadata_dir = _metadata_dir(props, values)
    return metadata_dir is not None and (Path(metadata_dir) / META_PROPERTIES).exists()


def _metadata_dir(props: Mapping[str, str], values: Mapping[str, Any]) -> str | None:
    """``metadata.log.dir``, else the first log directory (:attr:`ServerConfig.metadata_dir`)."""
    return str(values["metadata.log.dir"]) if values["metadata.log.dir"] else _first_log_dir(props, values)


def _first_log_dir(props: Mapping[str, str], values: Mapping[str, Any]) -> str | None:
    """The first of ``log.dirs``, else ``log.dir`` when only that one is given (:attr:`ServerConfig.log_dirs`)."""
    if "log.dirs" not in props and values["log.dir"]:
        return str(values["log.dir"])
    dirs = values["log.dirs"]
    return str(dirs[0]) if dirs else None


def _wal_in_log_dir(props: Mapping[str, str], values: Mapping[str, Any]) -> dict[str, BucketURL]:
    """With no ``s3.wal.path``, a node whose file names its log directory (``log.dirs``, else ``log.dir``) keeps
    its file WAL in ``wal/`` there: Kafka keeps all a node writes under its log directories, so a file written
    for Kafka (which names no ``s3.*`` key) gives each node its own WAL, and removing the log directories, as
    Kafka's quickstart does to start afresh, removes it too. Without either key the WAL stays at the built-in
    ``data/wal``, where earlier starts left it. The objects stay at ``s3.data.buckets``' default, which every
    node started from the same directory shares, as a partition moved between brokers must."""
    if "s3.wal.path" in props or ("log.dirs" not in props and "log.dir" not in props):
        return {}
    first = _first_log_dir(props, values)
    if not first:
        return {}
    wal = Path(first) / "wal"
    if not wal.exists() and _wal_of_an_earlier_version(Path(values["metadata.log.dir"] or first)):
        return {}
    return {"wal_url": BucketURL(0, "file", str(wal))}


def _wal_of_an_earlier_version(metadata_dir: Path) -> bool:
    """Whether this node ran before with its WAL at ``data/wal`` (versions before the WAL followed ``log.dirs``) and
    left segments there: they may hold acknowledged records not yet uploaded (which segments do cannot be told
    without reading them back), so the node keeps that WAL, as before, until ``s3.wal.path`` says otherwise. Only a
    node whose metadata directory is formatted (it has run) and that has no ``wal/`` of its own yet is kept there."""
    earlier = StorageConfig().wal_url.path
    if not (metadata_dir / META_PROPERTIES).exists() or not earlier.is_dir():
        return False
    if not any(path.suffix == SEGMENT_SUFFIX for path in earlier.iterdir()):
        return False
    logger.warning("the WAL stays at %s, where an earlier Fjord kept it for this node (its segments may hold records "
                   "not yet uploaded); set s3.wal.path to choose where this node's WAL goes", earlier)
    return True


def _as_int(text: str) -> int | None:
    """``text`` as a number, None if it is not one (the key's own parse then says so, naming it)."""
    try:
        return int(text.strip())
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """A node's configuration: the static values from its file and overrides, typed and validated."""

    static: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))  # as given, for describe
    values: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))  # typed, defaults filled
    storage: StorageConfig = field(default_factory=StorageConfig)
    listeners: tuple[Listener, ...] = ()
    advertised_listeners: tuple[Listener, ...] = ()
    security_protocols: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    voters: tuple[QuorumVoter, ...] = ()
    #: A controller formatted to be added to a running quorum (``--no-initial-controllers``): it has no voters above
    #: and finds them through ``controller.quorum.bootstrap.servers`` as it starts.
    joins_quorum: bool = False
    #: A controller formatted for a static quorum, named by ``controller.quorum.bootstrap.servers`` alone: it has no
    #: voters above; its log names them once ``kraft.version`` 1 reached it, which its controller checks at start.
    voters_in_log: bool = False
    #: The TLS settings of each SSL listener, by listener name (checked at load: a bad key file stops the start).
    tls: Mapping[str, ListenerTls] = field(default_factory=lambda: MappingProxyType({}))
    #: The SASL settings of each SASL_PLAINTEXT or SASL_SSL listener, by listener name.
    sasl: Mapping[str, ListenerSasl] = field(default_factory=lambda: MappingProxyType({}))
    #: The TLS settings of the quorum's CONTROLLER listener when it is SSL or SASL_SSL: voters serve it with them
    #: (they are in ``tls`` too) and every node's own connections to it use them as client settings. None: no TLS.
    controller_tls: ListenerTls | None = None
    #: SASL on the quorum's CONTROLLER listener: this node's own login and, on a voter, what it serves. None: the
    #: listener is not SASL.
    controller_sasl: ControllerSasl | None = None
    #: How this broker connects to the other brokers (the inter-broker listener, its TLS and SASL client settings);
    #: None on a controller-only node.
    inter_broker: InterBrokerSettings | None = None

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str] | None = None,
        overrides: Iterable[str] = (),
        *,
        formatting: Sequence[QuorumVoter] | Literal["standalone", "joining"] | None = None,
    ) -> ServerConfig:
        """Reads ``path`` (None: built-in defaults only, the embedded default) then applies ``key=value``
        overrides, as ``kafka-server-start --override`` does. ``formatting``: the voters ``fjord storage format``
        is about to write (or ``"standalone"``: this controller alone; ``"joining"``: none, it is to be added to a
        running quorum), instead of those its directory holds."""
        props = read_properties(path) if path is not None else {}
        props.update(parse_overrides(overrides))
        return cls.from_properties(props, formatting=formatting)

    @classmethod
    def from_properties(
        cls,
        props: Mapping[str, str],
        *,
        formatting: Sequence[QuorumVoter] | Literal["standalone", "joining"] | None = None,
    ) -> ServerConfig:
        refuse_unimplemented(props)
        props = _check_kafka_keys(props)
        values: dict[str, Any] = {}
        for name, key in BROKER_KEYS.items():
            if name in props:
                try:
                    values[name] = key.parse(props[name])
                except ConfigValueError as exc:
                    raise ConfigError(str(exc)) from None
            else:
                values[name] = key.default
        for name in props:
            # An s3.* key is StorageConfig's to judge: one it does not read stops the start below, naming it.
            if (name not in BROKER_KEYS and name not in KAFKA_BROKER_KEYS and not name.startswith("s3.")
                    and listener_override(name) is None and sasl_listener_override(name) is None
                    and listener_connection_override(name) is None and listener_request_override(name) is None):
                logger.warning("The configuration '%s' was supplied but isn't a known config.", name)
        node_id: int = values["node.id"]
        storage = StorageConfig.from_properties(props, node_id=node_id, **_wal_in_log_dir(props, values))
        listeners = parse_listeners(values["listeners"], "listeners")
        advertised_text = values["advertised.listeners"]
        controller_listener_names = tuple(str(n).upper() for n in values["controller.listener.names"])
        controller_names = set(controller_listener_names)
        if advertised_text is None:
            advertised = tuple(
                Listener(lst.name, lst.host or socket.gethostname(), lst.port)
                for lst in listeners
                if lst.name not in controller_names
            )
        else:
            advertised = parse_listeners(advertised_text, "advertised.listeners")
        protocols = parse_protocol_map(values["listener.security.protocol.map"])
        tls = {
            lst.name: listener_tls(lst.name, props, values)
            for lst in listeners
            if protocols.get(lst.name) in TLS_PROTOCOLS
        }
        # The quorum's CONTROLLER listener, when SSL or SASL_SSL: every node connects to it (a broker-only node does
        # not list it).
        controller_name = controller_listener_names[0] if controller_listener_names else None
        controller_tls = (
            tls.get(controller_name) or listener_tls(controller_name, props, values)
            if controller_name is not None and protocols.get(controller_name) in TLS_PROTOCOLS
            else None
        )
        if not tls and controller_tls is None and any(name.startswith("ssl.") for name in props):
            logger.warning("ssl.* settings are given but no listener is SSL; they are not used")
        sasl = {
            lst.name: listener_sasl(lst.name, props, values)
            for lst in listeners
            if protocols.get(lst.name) in SASL_PROTOCOLS and lst.name not in controller_names
        }
        controller_sasl_settings = controller_sasl(
            controller_name, protocols, props, values, serves="controller" in values["process.roles"]
        )
        if not sasl and controller_sasl_settings is None and any(name.startswith("sasl.") for name in props):
            logger.warning("sasl.* settings are given but no listener is SASL_PLAINTEXT or SASL_SSL; they are not used")
        formatted, joining = _formatted_voters(props, values, formatting)
        inter_broker = (
            inter_broker_settings(
                props,
                values,
                [lst.name for lst in listeners if lst.name not in controller_names],
                protocols,
                tls=tls,
                sasl=sasl,
            )
            if "broker" in values["process.roles"]
            else None
        )
        voters = resolve_voters(
            voters_given=values["controller.quorum.voters"] if "controller.quorum.voters" in props else None,
            voters_default=BROKER_KEYS["controller.quorum.voters"].default,
            bootstrap=values["controller.quorum.bootstrap.servers"],
            node_id=values["node.id"],
            roles=values["process.roles"],
            own_controller_addresses=[
                (lst.host, lst.port) for lst in (*listeners, *advertised)
                if controller_listener_names and lst.name == controller_listener_names[0]
            ],
            formatted=formatted,
            standalone=formatting == "standalone",
            joining=joining,
            ran_before=formatting is None and _formatted_directory(props, values),
        )
        controller = "controller" in values["process.roles"]
        config = cls(
            static=MappingProxyType(dict(props)),
            values=MappingProxyType(values),
            storage=storage,
            listeners=listeners,
            advertised_listeners=advertised,
            security_protocols=MappingProxyType(protocols),
            voters=voters,
            joins_quorum=joining and controller,
            voters_in_log=controller and not joining and not voters,
            tls=MappingProxyType(tls),
            controller_tls=controller_tls,
            controller_sasl=controller_sasl_settings,
            sasl=MappingProxyType(sasl),
            inter_broker=inter_broker,
        )
        config.validate()
        return config

    def validate(self) -> None:
        roles = set(self.process_roles)
        if not roles:
            raise ConfigError("process.roles: at least one of broker, controller is required")
        if len(roles) != len(self.process_roles):  # Kafka's KafkaConfig.parseProcessRoles
            raise ConfigError(f"Duplicate role names found in `process.roles`: [{', '.join(self.process_roles)}]")
        names = {lst.name for lst in self.listeners}
        # A listener in the wrong role would be bound by nothing: Kafka's KafkaConfig.validateValues refuses both.
        if roles == {"controller"} and not names <= set(self.controller_listener_names):
            raise ConfigError("The listeners config must only contain KRaft controller listeners from "
                              "controller.listener.names when process.roles=controller")
        if roles == {"broker"} and names & set(self.controller_listener_names):
            raise ConfigError("controller.listener.names must not contain a value appearing in the 'listeners' "
                              "configuration when running KRaft with just the broker role")
        for name in self.controller_listener_names:
            if "controller" in roles and name not in names:
                raise ConfigError(f"controller.listener.names: {name} is not one of the listeners ({', '.join(names)})")
        for lst in (*self.listeners, *self.advertised_listeners):
            if lst.name not in self.security_protocols:
                raise ConfigError(
                    f"listener.security.protocol.map: listener {lst.name} has no security protocol mapped"
                )
        check_listener_protocols(
            tuple(lst.name for lst in (*self.listeners, *self.advertised_listeners)),
            self.security_protocols,
            self.controller_listener_names,
        )
        for name in self.static:
            override = listener_override(name)
            if override is not None and override[0] not in self.tls and (
                self.controller_tls is None or override[0] != self.controller_tls.listener
            ):
                raise ConfigError(f"{name}: listener {override[0]} is not an SSL listener of this node")
            sasl_override = sasl_listener_override(name)
            if sasl_override is not None and sasl_override[0] not in self.sasl and (
                self.controller_sasl is None or sasl_override[0] != self.controller_sasl.listener
            ):
                raise ConfigError(f"{name}: listener {sasl_override[0]} is not a SASL listener of this node")
        for listener_tls_settings in self.tls.values():
            listener_tls_settings.context()  # a missing file, wrong password or unknown suite stops the start here
        if self.controller_tls is not None:
            self.controller_tls.client_context()
        if self.inter_broker is not None:
            self.inter_broker.client_context()
        for lst in self.advertised_listeners:
            if lst.name in self.controller_listener_names and "broker" in roles and "controller" not in roles:
                raise ConfigError(f"advertised.listeners: controller listener {lst.name} must not be advertised")
        if not self.log_dirs:
            raise ConfigError("log.dirs: at least one directory is required")
        if "broker" in roles and not self.broker_listeners:
            raise ConfigError("listeners: a broker needs at least one listener that is not a controller listener")
        if "controller" in roles and not self.voters_learned and self.node_id not in {v.node_id for v in self.voters}:
            raise ConfigError(
                f"controller.quorum.voters: this controller's node.id {self.node_id} is not among the voters "
                f"({', '.join(str(v.node_id) for v in self.voters)})"
            )
        if "controller" in roles and self.value("controller.quorum.auto.join.enable") and not self.dynamic_quorum:
            raise ConfigError("controller.quorum.auto.join.enable: a controller joins a dynamic quorum only (one "
                              "named by controller.quorum.bootstrap.servers, without controller.quorum.voters)")
        listener_connection_limits(self.static)  # a bad listener.name.<l>.max.connections stops the start here
        listener_request_max_bytes(self.static, {lst.name for lst in self.listeners})  # and a bad request bound
        check_per_ip(int(self.value("max.connections.per.ip")), str(self.value("max.connections.per.ip.overrides")))
        if self.group_min_session_timeout_ms > self.group_max_session_timeout_ms:
            raise ConfigError("group.min.session.timeout.ms must not exceed group.max.session.timeout.ms")
        consumer_group_settings(self.value)  # a bad group.consumer.* combination stops the start here
        share_group_settings(self.value)  # and a bad group.share.* one
        if self.broker_heartbeat_interval_ms >= self.broker_session_timeout_ms:
            raise ConfigError("broker.heartbeat.interval.ms must be smaller than broker.session.timeout.ms")

    def value(self, name: str) -> Any:
        """The typed value of a broker key (its default when not set)."""
        if name not in BROKER_KEYS:
            raise KeyError(f"unknown broker config {name}")
        return self.values.get(name, BROKER_KEYS[name].default)

    def connection_limits(
        self, cluster_dynamic: Mapping[str, str] | None = None, node_dynamic: Mapping[str, str] | None = None
    ) -> ConnectionLimitSettings:
        """The connection quotas of this broker's listeners, with the dynamic broker configs applied
        (:mod:`settings.connection_limits`)."""
        inter_broker = self.inter_broker.listener if self.inter_broker is not None else None
        return connection_limit_settings(self.value, self.static, inter_broker, cluster_dynamic, node_dynamic)

    # typed accessors for the keys other components read
    @property
    def node_id(self) -> int:
        return int(self.value("node.id"))

    @property
    def process_roles(self) -> tuple[str, ...]:
        return tuple(self.value("process.roles"))

    @property
    def controller_listener_names(self) -> tuple[str, ...]:
        return tuple(n.upper() for n in self.value("controller.listener.names"))

    def controller_client_context(self) -> ssl.SSLContext | None:
        """The TLS context of this node's connections to the quorum's CONTROLLER listener (None: PLAINTEXT)."""
        return self.controller_tls.client_context() if self.controller_tls is not None else None

    def controller_client_sasl(self) -> SaslCredentials | None:
        """This node's own SASL login on the quorum's CONTROLLER listener; None: it is not SASL."""
        return self.controller_sasl.credentials if self.controller_sasl is not None else None

    def controller_client_tls(self) -> ClientTls | None:
        """What those connections connect with, reloaded when the certificate files change
        (:meth:`ListenerTls.client_tls`); None: PLAINTEXT."""
        return self.controller_tls.client_tls() if self.controller_tls is not None else None

    @property
    def voters_learned(self) -> bool:
        """A controller whose configuration names no voters: they come from the quorum (:attr:`joins_quorum`) or
        from its own log (:attr:`voters_in_log`)."""
        return self.joins_quorum or self.voters_in_log

    @property
    def dynamic_quorum(self) -> bool:
        """The quorum's voters are the log's (KIP-853, ``kraft.version`` 1): named by bootstrap servers, not by a
        static ``controller.quorum.voters``, so AddRaftVoter and RemoveRaftVoter may change them."""
        return "controller.quorum.voters" not in self.static and bool(self.value("controller.quorum.bootstrap.servers"))

    @property
    def broker_listeners(self) -> tuple[Listener, ...]:
        return tuple(lst for lst in self.listeners if lst.name not in self.controller_listener_names)

    def advertised_endpoints(self) -> tuple[Endpoint, ...]:
        """What the broker registers with the controller (Metadata reports these)."""
        return tuple(lst.endpoint(self.security_protocols[lst.name]) for lst in self.advertised_listeners)

    @property
    def log_dirs(self) -> tuple[Path, ...]:
        """``log.dirs``, or Kafka's fallback ``log.dir`` when only that one is given."""
        if "log.dirs" not in self.static and self.value("log.dir"):
            return (Path(self.value("log.dir")),)
        return tuple(Path(d) for d in self.value("log.dirs"))

    @property
    def metadata_dir(self) -> Path:
        """Where meta.properties and the metadata log live (metadata.log.dir, else the first of log.dirs)."""
        explicit = self.value("metadata.log.dir")
        return Path(explicit) if explicit else self.log_dirs[0]

    @property
    def rack(self) -> str | None:
        rack = self.value("broker.rack")
        return str(rack) if rack else None

    @property
    def num_partitions(self) -> int:
        return int(self.value("num.partitions"))

    @property
    def default_replication_factor(self) -> int:
        return int(self.value("default.replication.factor"))

    @property
    def auto_create_topics_enable(self) -> bool:
        return bool(self.value("auto.create.topics.enable"))

    @property
    def message_max_bytes(self) -> int:
        return int(self.value("message.max.bytes"))

    @property
    def socket_request_max_bytes(self) -> int:
        return int(self.value("socket.request.max.bytes"))

    def socket_request_max_bytes_of(self, listener: str) -> int:
        """The largest request frame ``listener`` reads: its ``listener.name.<l>.socket.request.max.bytes``, else
        ``socket.request.max.bytes`` (``settings.listener_request_size``)."""
        overrides = listener_request_max_bytes(self.static, {lst.name for lst in self.listeners})
        return overrides.get(listener.upper(), self.socket_request_max_bytes)

    def socket_request_max_bytes_key_of(self, listener: str) -> str:
        """The key whose bound :meth:`socket_request_max_bytes_of` gives ``listener``: what a refusal names."""
        overrides = listener_request_max_bytes(self.static, {lst.name for lst in self.listeners})
        return f"listener.name.{listener.lower()}.{KEY}" if listener.upper() in overrides else KEY

    @property
    def fetch_max_bytes(self) -> int:
        return int(self.value("fetch.max.bytes"))

    @property
    def broker_session_timeout_ms(self) -> int:
        return int(self.value("broker.session.timeout.ms"))

    @property
    def broker_heartbeat_interval_ms(self) -> int:
        return int(self.value("broker.heartbeat.interval.ms"))

    @property
    def group_initial_rebalance_delay_ms(self) -> int:
        return int(self.value("group.initial.rebalance.delay.ms"))

    @property
    def consumer_groups(self) -> ConsumerGroupSettings:
        """The KIP-848 consumer groups' settings, checked together (``settings.consumer_groups``)."""
        return consumer_group_settings(self.value)

    @property
    def share_groups(self) -> ShareGroupSettings:
        """The KIP-932 share groups' settings, checked together (``settings.share_groups``); parsed on each call, so
        a long-lived reader keeps the result."""
        return share_group_settings(self.value)

    @property
    def group_min_session_timeout_ms(self) -> int:
        return int(self.value("group.min.session.timeout.ms"))

    @property
    def group_max_session_timeout_ms(self) -> int:
        return int(self.value("group.max.session.timeout.ms"))

    @property
    def group_max_size(self) -> int:
        return int(self.value("group.max.size"))

    @property
    def offsets_topic_num_partitions(self) -> int:
        return int(self.value("offsets.topic.num.partitions"))

    @property
    def offsets_retention_ms(self) -> int:
        return int(self.value("offsets.retention.minutes")) * MS_PER_MINUTE

    @property
    def offsets_commit_timeout_ms(self) -> int:
        return int(self.value("offsets.commit.timeout.ms"))

    @property
    def transactional_id_expiration_ms(self) -> int:
        return int(self.value("transactional.id.expiration.ms"))

    @property
    def transaction_max_timeout_ms(self) -> int:
        return int(self.value("transaction.max.timeout.ms"))

    @property
    def transaction_state_log_num_partitions(self) -> int:
        return int(self.value("transaction.state.log.num.partitions"))
