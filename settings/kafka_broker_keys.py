"""Kafka 3.6's broker configuration keys, and what Fjord does with each one its catalogue does not define.

The rule: a setting Fjord does not implement stops the node at start with a message naming the key; it is never
silently ignored. So a Kafka user's ``server.properties`` is read key by key against Kafka 3.6's "Broker Configs"
(:data:`KAFKA_BROKER_KEYS`, the names only) and every key lands in exactly one place:

* Fjord's catalogue (:data:`settings.keys.BROKER_KEYS`), the ``s3.*`` keys of
  :class:`storage.config.StorageConfig`, or the security keys :mod:`settings.security` refuses: unchanged.
* **No effect** (:data:`NO_EFFECT_KEYS`): the key's purpose does not exist in Fjord's design (partitions are not
  replicated between brokers, there is no ZooKeeper, no JMX, no purgatory...). It is accepted with Kafka's type and
  default, joins the catalogue (so DescribeConfigs shows it with its reason and AlterConfigs takes it as Kafka does),
  and the node logs once at start, at INFO, that it has no effect and why.
* **Refused** (:func:`kafka_key_refusal`): the purpose still exists in Fjord but Fjord does not do what the key
  asks, so the node stops naming the key. Two values never stop it: Kafka 3.6's default (a file dumped or templated
  from a running Kafka must start; a default asks for nothing special), and, where Fjord's fixed behaviour equals
  one value of the key (one cleaner task, KIP-890 verification always on, no Java plugin), that value: it asks for
  what Fjord does. Both start with an INFO line saying what Fjord does instead.
* ``broker.id``: Kafka's other name for ``node.id``; it sets the node id when ``node.id`` is not given, and
  DescribeConfigs shows it, read-only, equal to ``node.id``.

The keys Kafka 4.0-4.2 added are :mod:`settings.kafka4_broker_keys`'s, merged in here with the same dispositions.
A key outside Kafka's lists keeps Kafka's behaviour: a warning, and the start goes on.

This module is data and a few lookups; it imports only the reasons (:mod:`settings.kafka_key_reasons`) and Kafka 4's
keys, so :mod:`settings.keys` can build the no-effect keys into its catalogue from it. Types are
:class:`settings.config_key.ConfigType` names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from settings import kafka4_broker_keys as kafka4
from settings.kafka_key_reasons import (
    AUTO_BALANCER,
    CLEANER_MAP,
    CONNECT_TIMEOUT,
    FIXED_OPEN_PARALLELISM,
    JAVA_PLUGIN,
    KRAFT_ONLY,
    LOAD_READS,
    METADATA_RETENTION,
    NO_DYNAMIC_PASSWORDS,
    NO_JMX,
    NO_LOCAL_LOG,
    NO_PURGATORY,
    NO_THREAD_POOL,
    NO_TIERED_STORAGE,
    NOT_REPLICATED,
    ONE_EVENT_LOOP,
    ONE_TRANSACTION_PASS,
    ZOOKEEPER_MODE,
)

#: Every broker key of Kafka 3.6's documentation, "Broker Configs" (its generated kafka_config.html): names only.
KAFKA_36_BROKER_KEYS: frozenset[str] = frozenset(
    (
        "advertised.listeners",
        "alter.config.policy.class.name",
        "alter.log.dirs.replication.quota.window.num",
        "alter.log.dirs.replication.quota.window.size.seconds",
        "authorizer.class.name",
        "auto.create.topics.enable",
        "auto.include.jmx.reporter",
        "auto.leader.rebalance.enable",
        "background.threads",
        "broker.heartbeat.interval.ms",
        "broker.id",
        "broker.id.generation.enable",
        "broker.rack",
        "broker.session.timeout.ms",
        "client.quota.callback.class",
        "compression.type",
        "connection.failed.authentication.delay.ms",
        "connections.max.idle.ms",
        "connections.max.reauth.ms",
        "control.plane.listener.name",
        "controlled.shutdown.enable",
        "controlled.shutdown.max.retries",
        "controlled.shutdown.retry.backoff.ms",
        "controller.listener.names",
        "controller.quorum.append.linger.ms",
        "controller.quorum.election.backoff.max.ms",
        "controller.quorum.election.timeout.ms",
        "controller.quorum.fetch.timeout.ms",
        "controller.quorum.request.timeout.ms",
        "controller.quorum.retry.backoff.ms",
        "controller.quorum.voters",
        "controller.quota.window.num",
        "controller.quota.window.size.seconds",
        "controller.socket.timeout.ms",
        "create.topic.policy.class.name",
        "default.replication.factor",
        "delegation.token.expiry.check.interval.ms",
        "delegation.token.expiry.time.ms",
        "delegation.token.master.key",
        "delegation.token.max.lifetime.ms",
        "delegation.token.secret.key",
        "delete.records.purgatory.purge.interval.requests",
        "delete.topic.enable",
        "early.start.listeners",
        "fetch.max.bytes",
        "fetch.purgatory.purge.interval.requests",
        "group.initial.rebalance.delay.ms",
        "group.max.session.timeout.ms",
        "group.max.size",
        "group.min.session.timeout.ms",
        "initial.broker.registration.timeout.ms",
        "inter.broker.listener.name",
        "inter.broker.protocol.version",
        "kafka.metrics.polling.interval.secs",
        "kafka.metrics.reporters",
        "leader.imbalance.check.interval.seconds",
        "leader.imbalance.per.broker.percentage",
        "listener.security.protocol.map",
        "listeners",
        "log.cleaner.backoff.ms",
        "log.cleaner.dedupe.buffer.size",
        "log.cleaner.delete.retention.ms",
        "log.cleaner.enable",
        "log.cleaner.io.buffer.load.factor",
        "log.cleaner.io.buffer.size",
        "log.cleaner.io.max.bytes.per.second",
        "log.cleaner.max.compaction.lag.ms",
        "log.cleaner.min.cleanable.ratio",
        "log.cleaner.min.compaction.lag.ms",
        "log.cleaner.threads",
        "log.cleanup.policy",
        "log.dir",
        "log.dirs",
        "log.flush.interval.messages",
        "log.flush.interval.ms",
        "log.flush.offset.checkpoint.interval.ms",
        "log.flush.scheduler.interval.ms",
        "log.flush.start.offset.checkpoint.interval.ms",
        "log.index.interval.bytes",
        "log.index.size.max.bytes",
        "log.local.retention.bytes",
        "log.local.retention.ms",
        "log.message.downconversion.enable",
        "log.message.format.version",
        "log.message.timestamp.after.max.ms",
        "log.message.timestamp.before.max.ms",
        "log.message.timestamp.difference.max.ms",
        "log.message.timestamp.type",
        "log.preallocate",
        "log.retention.bytes",
        "log.retention.check.interval.ms",
        "log.retention.hours",
        "log.retention.minutes",
        "log.retention.ms",
        "log.roll.hours",
        "log.roll.jitter.hours",
        "log.roll.jitter.ms",
        "log.roll.ms",
        "log.segment.bytes",
        "log.segment.delete.delay.ms",
        "max.connection.creation.rate",
        "max.connections",
        "max.connections.per.ip",
        "max.connections.per.ip.overrides",
        "max.incremental.fetch.session.cache.slots",
        "message.max.bytes",
        "metadata.log.dir",
        "metadata.log.max.record.bytes.between.snapshots",
        "metadata.log.max.snapshot.interval.ms",
        "metadata.log.segment.bytes",
        "metadata.log.segment.ms",
        "metadata.max.idle.interval.ms",
        "metadata.max.retention.bytes",
        "metadata.max.retention.ms",
        "metric.reporters",
        "metrics.num.samples",
        "metrics.recording.level",
        "metrics.sample.window.ms",
        "min.insync.replicas",
        "node.id",
        "num.io.threads",
        "num.network.threads",
        "num.partitions",
        "num.recovery.threads.per.data.dir",
        "num.replica.alter.log.dirs.threads",
        "num.replica.fetchers",
        "offset.metadata.max.bytes",
        "offsets.commit.required.acks",
        "offsets.commit.timeout.ms",
        "offsets.load.buffer.size",
        "offsets.retention.check.interval.ms",
        "offsets.retention.minutes",
        "offsets.topic.compression.codec",
        "offsets.topic.num.partitions",
        "offsets.topic.replication.factor",
        "offsets.topic.segment.bytes",
        "password.encoder.cipher.algorithm",
        "password.encoder.iterations",
        "password.encoder.key.length",
        "password.encoder.keyfactory.algorithm",
        "password.encoder.old.secret",
        "password.encoder.secret",
        "principal.builder.class",
        "process.roles",
        "producer.id.expiration.ms",
        "producer.purgatory.purge.interval.requests",
        "queued.max.request.bytes",
        "queued.max.requests",
        "quota.window.num",
        "quota.window.size.seconds",
        "remote.log.manager.task.interval.ms",
        "remote.log.manager.thread.pool.size",
        "remote.log.metadata.custom.metadata.max.bytes",
        "remote.log.metadata.manager.class.name",
        "remote.log.metadata.manager.class.path",
        "remote.log.metadata.manager.impl.prefix",
        "remote.log.metadata.manager.listener.name",
        "remote.log.reader.max.pending.tasks",
        "remote.log.reader.threads",
        "remote.log.storage.manager.class.name",
        "remote.log.storage.manager.class.path",
        "remote.log.storage.manager.impl.prefix",
        "remote.log.storage.system.enable",
        "replica.fetch.backoff.ms",
        "replica.fetch.max.bytes",
        "replica.fetch.min.bytes",
        "replica.fetch.response.max.bytes",
        "replica.fetch.wait.max.ms",
        "replica.high.watermark.checkpoint.interval.ms",
        "replica.lag.time.max.ms",
        "replica.selector.class",
        "replica.socket.receive.buffer.bytes",
        "replica.socket.timeout.ms",
        "replication.quota.window.num",
        "replication.quota.window.size.seconds",
        "request.timeout.ms",
        "reserved.broker.max.id",
        "sasl.client.callback.handler.class",
        "sasl.enabled.mechanisms",
        "sasl.jaas.config",
        "sasl.kerberos.kinit.cmd",
        "sasl.kerberos.min.time.before.relogin",
        "sasl.kerberos.principal.to.local.rules",
        "sasl.kerberos.service.name",
        "sasl.kerberos.ticket.renew.jitter",
        "sasl.kerberos.ticket.renew.window.factor",
        "sasl.login.callback.handler.class",
        "sasl.login.class",
        "sasl.login.connect.timeout.ms",
        "sasl.login.read.timeout.ms",
        "sasl.login.refresh.buffer.seconds",
        "sasl.login.refresh.min.period.seconds",
        "sasl.login.refresh.window.factor",
        "sasl.login.refresh.window.jitter",
        "sasl.login.retry.backoff.max.ms",
        "sasl.login.retry.backoff.ms",
        "sasl.mechanism.controller.protocol",
        "sasl.mechanism.inter.broker.protocol",
        "sasl.oauthbearer.clock.skew.seconds",
        "sasl.oauthbearer.expected.audience",
        "sasl.oauthbearer.expected.issuer",
        "sasl.oauthbearer.jwks.endpoint.refresh.ms",
        "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms",
        "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms",
        "sasl.oauthbearer.jwks.endpoint.url",
        "sasl.oauthbearer.scope.claim.name",
        "sasl.oauthbearer.sub.claim.name",
        "sasl.oauthbearer.token.endpoint.url",
        "sasl.server.callback.handler.class",
        "sasl.server.max.receive.size",
        "security.inter.broker.protocol",
        "security.providers",
        "socket.connection.setup.timeout.max.ms",
        "socket.connection.setup.timeout.ms",
        "socket.listen.backlog.size",
        "socket.receive.buffer.bytes",
        "socket.request.max.bytes",
        "socket.send.buffer.bytes",
        "ssl.cipher.suites",
        "ssl.client.auth",
        "ssl.enabled.protocols",
        "ssl.endpoint.identification.algorithm",
        "ssl.engine.factory.class",
        "ssl.key.password",
        "ssl.keymanager.algorithm",
        "ssl.keystore.certificate.chain",
        "ssl.keystore.key",
        "ssl.keystore.location",
        "ssl.keystore.password",
        "ssl.keystore.type",
        "ssl.principal.mapping.rules",
        "ssl.protocol",
        "ssl.provider",
        "ssl.secure.random.implementation",
        "ssl.trustmanager.algorithm",
        "ssl.truststore.certificates",
        "ssl.truststore.location",
        "ssl.truststore.password",
        "ssl.truststore.type",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        "transaction.max.timeout.ms",
        "transaction.partition.verification.enable",
        "transaction.remove.expired.transaction.cleanup.interval.ms",
        "transaction.state.log.load.buffer.size",
        "transaction.state.log.min.isr",
        "transaction.state.log.num.partitions",
        "transaction.state.log.replication.factor",
        "transaction.state.log.segment.bytes",
        "transactional.id.expiration.ms",
        "unclean.leader.election.enable",
        "zookeeper.clientCnxnSocket",
        "zookeeper.connect",
        "zookeeper.connection.timeout.ms",
        "zookeeper.max.in.flight.requests",
        "zookeeper.metadata.migration.enable",
        "zookeeper.session.timeout.ms",
        "zookeeper.set.acl",
        "zookeeper.ssl.cipher.suites",
        "zookeeper.ssl.client.enable",
        "zookeeper.ssl.crl.enable",
        "zookeeper.ssl.enabled.protocols",
        "zookeeper.ssl.endpoint.identification.algorithm",
        "zookeeper.ssl.keystore.location",
        "zookeeper.ssl.keystore.password",
        "zookeeper.ssl.keystore.type",
        "zookeeper.ssl.ocsp.enable",
        "zookeeper.ssl.protocol",
        "zookeeper.ssl.truststore.location",
        "zookeeper.ssl.truststore.password",
        "zookeeper.ssl.truststore.type",
    )
)
#: ... and with them those Kafka 4.0-4.2 added: every broker key a Kafka user's file may hold.
KAFKA_BROKER_KEYS: frozenset[str] = KAFKA_36_BROKER_KEYS | kafka4.KAFKA_4_BROKER_KEYS

# ---------------------------------------------------------------------- no effect: their purpose is moot in Fjord

@dataclass(frozen=True, slots=True)
class NoEffectKey:
    """A Kafka key accepted with its Kafka type, default and update mode, that changes nothing in Fjord."""

    name: str
    type: str  # a ConfigType name
    default: Any
    reason: str
    dynamic: bool = False  # Kafka's update mode is per-broker or cluster-wide
    at_least: int | None = None  # Kafka's lower bound, still checked: a value Kafka refuses is refused

    @property
    def doc(self) -> str:
        """What DescribeConfigs shows as the key's documentation."""
        return f"Accepted for Kafka compatibility; it has no effect in Fjord: {self.reason}."


def _no_effect(
    reason: str, *keys: tuple[str, str, Any] | tuple[str, str, Any, bool] | tuple[str, str, Any, bool, int]
) -> tuple[NoEffectKey, ...]:
    return tuple(NoEffectKey(k[0], k[1], k[2], reason, *k[3:]) for k in keys)


NO_EFFECT_KEYS: tuple[NoEffectKey, ...] = (
    *_no_effect(
        NOT_REPLICATED,
        ("num.replica.fetchers", "INT", 1, True),
        # KIP-392: Fetch always answers preferred_read_replica -1, there being no follower to read from.
        ("replica.selector.class", "CLASS", None),
        ("replica.fetch.min.bytes", "INT", 1),
        ("replica.fetch.wait.max.ms", "INT", 500),
        ("replica.fetch.backoff.ms", "INT", 1000),
        ("replica.fetch.max.bytes", "INT", 1048576),
        ("replica.fetch.response.max.bytes", "INT", 10485760),
        ("replica.high.watermark.checkpoint.interval.ms", "LONG", 5000),
        ("replica.lag.time.max.ms", "LONG", 30000),
        ("replica.socket.receive.buffer.bytes", "INT", 65536),
        ("replica.socket.timeout.ms", "INT", 30000),
        ("offsets.commit.required.acks", "SHORT", -1),
    ),
    *_no_effect(
        ZOOKEEPER_MODE,
        ("broker.id.generation.enable", "BOOLEAN", True),
        ("reserved.broker.max.id", "INT", 1000),
        ("controlled.shutdown.max.retries", "INT", 3),
        ("controlled.shutdown.retry.backoff.ms", "LONG", 5000),
        ("inter.broker.protocol.version", "STRING", "3.6-IV2"),
    ),
    *_no_effect(FIXED_OPEN_PARALLELISM, ("num.recovery.threads.per.data.dir", "INT", 1, True)),
    *_no_effect(
        NO_LOCAL_LOG,
        ("num.replica.alter.log.dirs.threads", "INT", None),
        ("log.flush.start.offset.checkpoint.interval.ms", "INT", 60000),
    ),
    *_no_effect(
        NO_PURGATORY,
        ("fetch.purgatory.purge.interval.requests", "INT", 1000),
        ("producer.purgatory.purge.interval.requests", "INT", 1000),
        ("delete.records.purgatory.purge.interval.requests", "INT", 1),
    ),
    *_no_effect(ONE_EVENT_LOOP, ("num.network.threads", "INT", 3, True, 1), ("num.io.threads", "INT", 8, True, 1)),
    *_no_effect(NO_THREAD_POOL, ("background.threads", "INT", 10, True)),
    *_no_effect(
        CLEANER_MAP,
        ("log.cleaner.io.buffer.size", "INT", 524288, True),
        ("log.cleaner.io.buffer.load.factor", "DOUBLE", 0.9, True),
    ),
    *_no_effect(
        NO_TIERED_STORAGE,
        ("log.local.retention.bytes", "LONG", -2, True),
        ("log.local.retention.ms", "LONG", -2, True),
        ("remote.log.manager.thread.pool.size", "INT", 10),
        ("remote.log.manager.task.interval.ms", "LONG", 30000),
        ("remote.log.metadata.custom.metadata.max.bytes", "INT", 128),
        (
            "remote.log.metadata.manager.class.name",
            "STRING",
            "org.apache.kafka.server.log.remote.metadata.storage.TopicBasedRemoteLogMetadataManager",
        ),
        ("remote.log.metadata.manager.class.path", "STRING", None),
        ("remote.log.metadata.manager.impl.prefix", "STRING", "rlmm.config."),
        ("remote.log.metadata.manager.listener.name", "STRING", None),
        ("remote.log.reader.max.pending.tasks", "INT", 100),
        ("remote.log.reader.threads", "INT", 10),
        ("remote.log.storage.manager.class.name", "STRING", None),
        ("remote.log.storage.manager.class.path", "STRING", None),
        ("remote.log.storage.manager.impl.prefix", "STRING", "rsm.config."),
    ),
    *_no_effect(
        NO_JMX,
        ("auto.include.jmx.reporter", "BOOLEAN", True),
        ("kafka.metrics.polling.interval.secs", "INT", 10),
        ("metrics.num.samples", "INT", 2),
        ("metrics.recording.level", "STRING", "INFO"),
        ("metrics.sample.window.ms", "LONG", 30000),
    ),
    *_no_effect(
        NO_DYNAMIC_PASSWORDS,
        ("password.encoder.secret", "PASSWORD", None),
        ("password.encoder.old.secret", "PASSWORD", None),
        ("password.encoder.cipher.algorithm", "STRING", "AES/CBC/PKCS5Padding"),
        ("password.encoder.iterations", "INT", 4096),
        ("password.encoder.key.length", "INT", 128),
        ("password.encoder.keyfactory.algorithm", "STRING", None),
    ),
    *_no_effect(
        METADATA_RETENTION,
        ("metadata.max.retention.bytes", "LONG", 104857600),
        ("metadata.max.retention.ms", "LONG", 604800000),
    ),
    *_no_effect(ONE_TRANSACTION_PASS, ("transaction.remove.expired.transaction.cleanup.interval.ms", "INT", 3600000)),
    *(key for reason, keys in kafka4.NO_EFFECT for key in _no_effect(reason, *keys)),
)

_NO_EFFECT_REASONS = {key.name: key.reason for key in NO_EFFECT_KEYS}

# ---------------------------------------------------------------------- refused: Fjord does not do what they ask

@dataclass(frozen=True, slots=True)
class Refused:
    """Why a Kafka key stops the node; ``accepts`` is the one value that asks for what Fjord does anyway, and
    ``default`` Kafka 3.6's default when that is another value (None: the same one), accepted too."""

    reason: str
    accepts: str | None = None
    default: str | None = None

    @property
    def kafka_default(self) -> str | None:
        return self.accepts if self.default is None else self.default


#: Kafka 3.6's defaults of its ZooKeeper-mode keys ("": none); any other value asks for ZooKeeper.
_ZOOKEEPER_DEFAULTS = {
    "zookeeper.connect": "",
    "zookeeper.clientCnxnSocket": "",
    "zookeeper.connection.timeout.ms": "",
    "zookeeper.max.in.flight.requests": "10",
    "zookeeper.metadata.migration.enable": "false",
    "zookeeper.session.timeout.ms": "18000",
    "zookeeper.set.acl": "false",
    "zookeeper.ssl.cipher.suites": "",
    "zookeeper.ssl.client.enable": "false",
    "zookeeper.ssl.crl.enable": "false",
    "zookeeper.ssl.enabled.protocols": "",
    "zookeeper.ssl.endpoint.identification.algorithm": "HTTPS",
    "zookeeper.ssl.keystore.location": "",
    "zookeeper.ssl.keystore.password": "",
    "zookeeper.ssl.keystore.type": "",
    "zookeeper.ssl.ocsp.enable": "false",
    "zookeeper.ssl.protocol": "TLSv1.2",
    "zookeeper.ssl.truststore.location": "",
    "zookeeper.ssl.truststore.password": "",
    "zookeeper.ssl.truststore.type": "",
}


_REFUSED: dict[str, Refused] = {
    "control.plane.listener.name": Refused(
        "a ZooKeeper-mode listener for the controller's connections to brokers; Fjord runs KRaft only, where "
        "controllers listen on controller.listener.names",
        default="",
    ),
    "auto.leader.rebalance.enable": Refused(AUTO_BALANCER, accepts="true"),
    "leader.imbalance.check.interval.seconds": Refused(AUTO_BALANCER, accepts="300"),
    "leader.imbalance.per.broker.percentage": Refused(AUTO_BALANCER, accepts="10"),
    "early.start.listeners": Refused("not implemented: a node starts all its listeners together", default=""),
    "log.cleaner.threads": Refused("not implemented: the log cleaner is one task per broker", accepts="1"),
    "log.cleaner.io.max.bytes.per.second": Refused(
        "not implemented: the log cleaner's I/O is not throttled", accepts="1.7976931348623157E308"
    ),
    "log.message.timestamp.difference.max.ms": Refused(
        "deprecated and not implemented; set log.message.timestamp.before.max.ms and "
        "log.message.timestamp.after.max.ms (KIP-937), which Fjord enforces",
        accepts="9223372036854775807",
    ),
    "initial.broker.registration.timeout.ms": Refused(
        "not implemented: a broker waits for its registration with no deadline", default="60000"
    ),
    "socket.connection.setup.timeout.ms": Refused(CONNECT_TIMEOUT, default="10000"),
    "socket.connection.setup.timeout.max.ms": Refused(CONNECT_TIMEOUT, default="30000"),
    "queued.max.requests": Refused(
        "not implemented: requests are bounded per connection (64 in flight), not by a broker-wide queue",
        accepts="500",
    ),
    "offsets.load.buffer.size": Refused(LOAD_READS, accepts="1048576", default="5242880"),
    "transaction.state.log.load.buffer.size": Refused(LOAD_READS, accepts="1048576", default="5242880"),
    "offsets.topic.compression.codec": Refused("not implemented: offset commits are written uncompressed", accepts="0"),
    "metadata.log.segment.bytes": Refused(
        "not implemented: the metadata log's segments are a fixed 16 MiB", accepts="16777216", default="1073741824"
    ),
    "metadata.log.segment.ms": Refused(
        "not implemented: the metadata log does not roll segments by time", default="604800000"
    ),
    "metadata.max.idle.interval.ms": Refused(
        "not implemented: the active controller appends no no-op records", accepts="0", default="500"
    ),
    "controller.quorum.append.linger.ms": Refused(
        "not implemented: the quorum leader flushes at once (what arrives during one fsync goes into the next)",
        accepts="0",
        default="25",
    ),
    "controller.quorum.retry.backoff.ms": Refused(
        "not implemented: the quorum retries failed requests after a fixed 20 ms", accepts="20"
    ),
    "transaction.partition.verification.enable": Refused(
        "KIP-890 verification of transactional produce is always on in Fjord", accepts="true"
    ),
    "remote.log.storage.system.enable": Refused(
        "Kafka's tiered storage is not implemented: every Fjord partition already lives in object storage "
        "(the s3.* keys)",
        accepts="false",
    ),
    **{name: Refused(KRAFT_ONLY, default=default) for name, default in _ZOOKEEPER_DEFAULTS.items()},
    **{
        name: Refused(JAVA_PLUGIN, accepts="")
        for name in (
            "alter.config.policy.class.name",
            "create.topic.policy.class.name",
            "metric.reporters",
            "kafka.metrics.reporters",
            "security.providers",
        )
    },
    **{name: Refused(reason, accepts, default) for name, (reason, accepts, default) in kafka4.REFUSED.items()},
}

#: ``broker.id`` is Kafka's synonym of ``node.id`` in KRaft (either one sets both); it is not a key of its own.
NODE_ID_SYNONYM = "broker.id"


def _accepted(value: str, accepts: str) -> bool:
    text = value.strip()
    if text.lower() == accepts.lower():
        return True
    try:
        return float(text) == float(accepts)
    except ValueError:
        return False


def kafka_key_refusal(name: str, value: str) -> str | None:
    """Why the Kafka key ``name`` set to ``value`` stops the node, or None (it is not refused here)."""
    refused = _REFUSED.get(name)
    if refused is None or accepted_as_fjord_does(name, value) or accepted_as_kafka_default(name, value):
        return None
    return refused.reason


def accepted_as_fjord_does(name: str, value: str) -> bool:
    """True for a refusable key set to the one value that asks for what Fjord does anyway."""
    refused = _REFUSED.get(name)
    return refused is not None and refused.accepts is not None and _accepted(value, refused.accepts)


def accepted_as_kafka_default(name: str, value: str) -> bool:
    """True for a refusable key set to Kafka 3.6's default when that is not what Fjord does: it starts anyway."""
    refused = _REFUSED.get(name)
    return refused is not None and refused.default is not None and _accepted(value, refused.default)


def refusal_reason(name: str) -> str | None:
    """What Fjord does not do that the refusable key ``name`` asks for (its INFO line at Kafka's default)."""
    refused = _REFUSED.get(name)
    return None if refused is None else refused.reason


def no_effect_reason(name: str) -> str | None:
    """Why the Kafka key ``name`` is accepted with no effect, or None."""
    return _NO_EFFECT_REASONS.get(name)


def refused_keys() -> frozenset[str]:
    """The Kafka keys :func:`kafka_key_refusal` may refuse (for checks that every Kafka key has a disposition)."""
    return frozenset(_REFUSED)


def refused_kafka_defaults() -> dict[str, str]:
    """Kafka 3.6's default of each refusable key ("": none), every one of which starts a node."""
    return {name: refused.kafka_default for name, refused in _REFUSED.items() if refused.kafka_default is not None}
