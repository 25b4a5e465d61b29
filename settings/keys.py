"""The catalogue of config keys: every non-storage broker key and every topic config, defined once.

Each key has Kafka's name, type, default and validator, so that a node's file (:mod:`settings.server`),
the controller's checks of CreateTopics/AlterConfigs values (:func:`validate_topic_config`,
:func:`validate_broker_config`) and DescribeConfigs (:mod:`settings.describe`) all read the same definition
and can never disagree. The ``s3.*`` keys are :class:`storage.config.StorageConfig`'s and are not repeated here.

Deliberate departures from Kafka's defaults are marked ``# fjord:`` with the reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from settings.config_key import (
    INT_MAX,
    LONG_MAX,
    MS_PER_HOUR,
    MS_PER_MINUTE,
    ConfigKey,
    ConfigType,
    ConfigValueError,
    Validator,
    all_of,
    at_least,
    between,
    either,
    one_of,
)
from settings.config_resources import RESOURCE_BROKER, RESOURCE_TOPIC
from settings.kafka_broker_keys import NO_EFFECT_KEYS, NODE_ID_SYNONYM
from wire.connection_limits import parse_ip_overrides

# ---------------------------------------------------------------------- broker keys

#: The documentation of the replication-throttle keys (broker rates and topic replica lists).
NO_REPLICATION_TRAFFIC = (
    "Accepted for Kafka's tools (kafka-reassign-partitions.sh --throttle sets it, --verify removes it) and has no "
    "effect in Fjord: a partition's data lives in shared object storage, so a reassignment moves leadership without "
    "copying data, and there is no replication or log-dir copy traffic to throttle."
)

#: The documentation of Kafka's tiered-storage topic keys (KIP-405). Fjord has no local tier to bound: a partition's
#: log is in object storage from the start, kept for retention.ms and retention.bytes alone.
NO_LOCAL_TIER = (
    "Accepted for Kafka compatibility and has no effect in Fjord, which has no local tier: every partition's log "
    "already lives in object storage and is kept for retention.ms and retention.bytes alone. -2 (the default) means "
    "those values, as in Kafka."
)
#: Kafka answers remote.storage.enable=true with INVALID_CONFIG and this message when tiered storage is off
#: cluster-wide (LogConfig.validateRemoteStorageOnlyIfSystemEnabled), which it always is in Fjord.
REMOTE_STORAGE_REFUSED = (
    "Tiered Storage functionality is disabled in the broker. Topic cannot be configured with remote log storage: "
    "every Fjord partition already lives in object storage."
)
REMOTE_STORAGE_DOC = (
    "Kafka's switch for a topic's tiered storage. false (the default) is accepted; true is refused with "
    "INVALID_CONFIG, as Kafka refuses it while tiered storage is disabled: every Fjord partition already lives in "
    "object storage."
)

#: The documentation of the Kerberos keys Kafka lets AlterConfigs change on a running broker.
NO_GSSAPI = (
    "Accepted because Kafka makes it a dynamic broker key (admin clients and librdkafka's own tests set it with "
    "AlterConfigs) and has no effect in Fjord: it tunes Kerberos (SASL GSSAPI), which Fjord does not implement; a "
    "node refuses GSSAPI, and this key in its properties file, at start."
)

#: The documentation of the connection quota keys (wire.connection_limits). Their listener.name.<l>. forms are read
#: from the properties file only.
MAX_CONNECTIONS_DOC = (
    "The most connections the broker keeps open; at the limit its listeners stop accepting until one closes. The "
    "inter-broker listener is not held by it (KIP-402): other listeners close their least recently active "
    "connections to make room. listener.name.<listener>.max.connections limits one listener (static in Fjord: "
    "properties file only)."
)
MAX_CONNECTIONS_PER_IP_DOC = "The most connections one IP address may open; more are closed at once."
PER_IP_OVERRIDES_DOC = "Per-address exceptions to max.connections.per.ip, as host:count,ip:count."
CREATION_RATE_DOC = (
    "The most new connections the broker accepts per second, over the client quotas' windows; more are delayed. "
    "listener.name.<listener>.max.connection.creation.rate limits one listener (static in Fjord: properties file "
    "only)."
)


#: socket.request.max.bytes' documentation; its listener.name.<l>. form (settings.listener_request_size) is read from
#: the properties file only, as the connection quota keys' are.
SOCKET_REQUEST_MAX_BYTES_DOC = (
    "The most bytes one request may claim; a larger one closes its connection before its body is read. "
    "listener.name.<listener>.socket.request.max.bytes bounds one listener (Fjord's; properties file only)."
)


#: ssl.protocol's documentation (DescribeConfigs).
QUEUED_MAX_REQUEST_BYTES_DOC = (
    "The most bytes of requests the node reads and queues at once, until answered: a request larger than a "
    "connection's 256 KiB staging buffer reserves its claimed size before it is read and waits for room; smaller ones "
    "count once received, and while the bound is reached connections read no more. -1 or 0: unbounded (Kafka's "
    "default); Fjord's default, 256 MiB, keeps a node inside its memory."
)
SETUP_MAX_MS_DOC = (
    "Fjord's own: a connection that has not finished its TLS handshake and authenticated (SASL listeners) or sent "
    "one whole request (other listeners) this many ms after it was accepted is closed. -1: never."
)
SSL_PROTOCOL_DOC = (
    "The SSL protocol Kafka's JVM builds its SSLContext with: TLSv1.2, TLSv1.3 (Kafka's default) or TLS. In Fjord, as "
    "on Kafka's listeners, the versions served and used are ssl.enabled.protocols'; ssl.protocol changes none of them."
)


def _ip_overrides_valid(value: Any) -> str | None:
    try:
        parse_ip_overrides(str(value or ""))
    except ValueError as exc:
        return str(exc)
    return None


_B = ConfigType
_COMPRESSION = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
_TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
#: group.consumer.migration.policy: which online conversions between classic and consumer groups are allowed.
_MIGRATION = ("disabled", "upgrade", "downgrade", "bidirectional")
_SEGMENT_BYTES_FLOOR = 14  # LegacyRecord.RECORD_OVERHEAD_V0 in Kafka 3.x

# fjord: offsets.topic.num.partitions defaults to 10, not Kafka's 50. Every Fjord partition is a KV entry plus up to
# four streams in the metadata log, created when the topic is first used; 50 of them make the first FindCoordinator
# of a fresh single node take seconds. Ten still spreads coordinators over ten brokers, and the value is fixed at the
# topic's creation, so a cluster that needs more sets it before first use.
INTERNAL_TOPIC_PARTITIONS = 10
#: transaction.state.log.num.partitions keeps Kafka's 50: measured on one embedded node, the first transactional
#: InitProducerId (FindCoordinator creating the topic, then loading the id's partition) took about 0.5 s with 50
#: partitions as with 10, and opening all 50 (their streams created) about 0.3 s: the cost that once justified 10
#: is gone.
TRANSACTION_STATE_PARTITIONS = 50

BROKER_KEYS: dict[str, ConfigKey] = {
    k.name: k
    for k in (
        # identity and networking (static)
        # The cluster id a quorum formats with (`kafka-storage format -t` in KRaft); unset: derived from the voters.
        ConfigKey("cluster.id", _B.STRING, None),
        ConfigKey("node.id", _B.INT, 0, at_least(0)),  # fjord: the embedded default needs one (Kafka: required)
        ConfigKey("process.roles", _B.LIST, ["broker", "controller"], all_of("broker", "controller")),
        ConfigKey("listeners", _B.STRING, "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"),
        ConfigKey("advertised.listeners", _B.STRING, None),
        ConfigKey("controller.listener.names", _B.LIST, ["CONTROLLER"]),
        ConfigKey("inter.broker.listener.name", _B.STRING, None),
        ConfigKey(
            "listener.security.protocol.map",
            _B.STRING,
            "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
        ),
        ConfigKey("controller.quorum.voters", _B.LIST, ["0@127.0.0.1:9093"]),
        # Kafka 4's dynamic quorum (KIP-853): the voters are the metadata log's, found through these servers.
        ConfigKey("controller.quorum.bootstrap.servers", _B.LIST, []),
        # KIP-853: a controller of a dynamic quorum adds itself to the voters once it has caught up
        # (controller.quorum_membership); refused with a static controller.quorum.voters (ServerConfig.validate).
        ConfigKey("controller.quorum.auto.join.enable", _B.BOOLEAN, False),
        ConfigKey("controller.quorum.election.timeout.ms", _B.INT, 1000, at_least(1)),
        ConfigKey("controller.quorum.fetch.timeout.ms", _B.INT, 2000, at_least(1)),
        ConfigKey("controller.quorum.election.backoff.max.ms", _B.INT, 1000, at_least(1)),
        ConfigKey("controller.quorum.request.timeout.ms", _B.INT, 2000, at_least(1)),
        # Caps each attempt (connecting included) of a broker's requests to the active controller, as Kafka's
        # NodeToControllerChannelManager does; Fjord's attempts are shorter by default (metadata.remote.client).
        ConfigKey("controller.socket.timeout.ms", _B.INT, 30000, at_least(1)),
        ConfigKey("log.dirs", _B.LIST, ["data/kraft"]),
        ConfigKey("log.dir", _B.STRING, None),  # fjord: no /tmp default; used only when log.dirs is not set
        ConfigKey("metadata.log.dir", _B.STRING, None),
        ConfigKey("metadata.log.max.record.bytes.between.snapshots", _B.LONG, 20 * 1024 * 1024, at_least(1)),
        ConfigKey("metadata.log.max.snapshot.interval.ms", _B.LONG, 3600000, at_least(0)),  # KIP-876; 0: off
        ConfigKey("broker.rack", _B.STRING, None),
        ConfigKey("socket.request.max.bytes", _B.INT, 104857600, at_least(1), doc=SOCKET_REQUEST_MAX_BYTES_DOC),
        # The most bytes one Fetch response carries, whatever its max_bytes asks (broker.handlers.fetch).
        ConfigKey("fetch.max.bytes", _B.INT, 57671680, at_least(1024)),
        # The most partitions one DescribeTopicPartitions response describes, whatever its limit asks (KIP-966).
        ConfigKey("max.request.partition.size.limit", _B.INT, 2000, at_least(1)),
        # The SO_SNDBUF and SO_RCVBUF of each connection a listener accepts (wire.listener); -1: the OS default.
        # Fjord's default is -1 where Kafka's is 102400: a fixed buffer turns off Linux's automatic sizing, and one
        # event loop writing a megabyte fetch answer through 100 KiB at a time pays a wake-up for each piece.
        ConfigKey("socket.send.buffer.bytes", _B.INT, -1),
        ConfigKey("socket.receive.buffer.bytes", _B.INT, -1),
        ConfigKey("connections.max.idle.ms", _B.LONG, 600000),
        # Memory bounds against hostile clients (issue 26, wire.frames / wire.memory_pool): the bytes of large
        # requests a node reads and queues at once (Kafka: -1, unbounded; fjord: 256 MiB, a frame that does not fit
        # waits, -1 or 0 unbounded), and how long a connection may take to finish its TLS handshake and
        # authenticate (SASL) or send its first whole request (fjord's own key; -1 never).
        ConfigKey("queued.max.request.bytes", _B.LONG, 256 * 1024 * 1024, doc=QUEUED_MAX_REQUEST_BYTES_DOC),
        ConfigKey("fjord.connections.setup.max.ms", _B.LONG, 10000, doc=SETUP_MAX_MS_DOC),
        # The broker listeners' listen backlog (wire.listener), where connections also wait while quotas hold them.
        ConfigKey("socket.listen.backlog.size", _B.INT, 50, at_least(1)),
        # Connection quotas (wire.connection_limits: Kafka's ConnectionQuotas, KIP-402, KIP-612), dynamic as Kafka's.
        ConfigKey("max.connections", _B.INT, INT_MAX, at_least(0), dynamic=True, doc=MAX_CONNECTIONS_DOC),
        ConfigKey("max.connections.per.ip", _B.INT, INT_MAX, at_least(0), dynamic=True, doc=MAX_CONNECTIONS_PER_IP_DOC),
        ConfigKey("max.connections.per.ip.overrides", _B.STRING, "", _ip_overrides_valid, dynamic=True,
                  doc=PER_IP_OVERRIDES_DOC),
        ConfigKey("max.connection.creation.rate", _B.INT, INT_MAX, at_least(0), dynamic=True,
                  doc=CREATION_RATE_DOC),
        ConfigKey("request.timeout.ms", _B.INT, 30000, at_least(0)),
        # cluster membership
        ConfigKey("broker.session.timeout.ms", _B.INT, 9000, at_least(1)),
        ConfigKey("broker.heartbeat.interval.ms", _B.INT, 2000, at_least(1)),
        # Controlled shutdown (controller.decisions.controlled_shutdown): a broker of a multi-broker cluster stopping
        # cleanly first has the controller move every partition it leads to other brokers (Kafka's key and default).
        ConfigKey("controlled.shutdown.enable", _B.BOOLEAN, True),
        # fjord: how long it waits for that before it stops anyway (Kafka bounds it with
        # controlled.shutdown.max.retries x retry.backoff.ms); nothing is lost then: the partitions' data is in its
        # WAL, uploaded on the way out or replayed by a WAL failover.
        ConfigKey("controlled.shutdown.timeout.ms", _B.LONG, 30000, at_least(0)),
        # How long a reassigned partition waits for its source broker to close its streams before the target is
        # elected anyway (a dead or stuck source; DESIGN §9). AutoMQ waits 10 s too.
        ConfigKey("partition.reassignment.election.timeout.ms", _B.INT, 10000, at_least(0)),
        # fjord: how often the active controller looks for streams of deleted topics that their broker could not
        # delete (controller.orphan_streams); one found closed in two looks in a row is deleted.
        ConfigKey("deleted.topic.streams.check.interval.ms", _B.LONG, 60000, at_least(1)),
        # The auto-balancer (controller.decisions.balancing) on the active controller, with AutoMQ's names where AutoMQ
        # has the idea; all dynamic (cluster-wide defaults), as AutoMQ's are reconfigurable.
        # fjord: on by default (AutoMQ: off): without it a restarted or added broker leads nothing for ever. It
        # does nothing on a single broker.
        ConfigKey("autobalancer.controller.enable", _B.BOOLEAN, True, dynamic=True),
        # fjord: 10 s, not AutoMQ's 60 s: a move costs a fraction of a second and no data copy.
        ConfigKey("autobalancer.controller.anomaly.detect.interval.ms", _B.LONG, 10000, at_least(1), dynamic=True),
        # How soon the next round runs while the balancer is moving partitions (AutoMQ's key, its default).
        ConfigKey("autobalancer.controller.execution.interval.ms", _B.LONG, 1000, at_least(1), dynamic=True),
        # fjord: the most reassignments in flight at once (an operator's included) before the balancer starts more.
        ConfigKey("autobalancer.controller.max.moves.in.flight", _B.INT, 4, at_least(1), dynamic=True),
        # fjord: the most the leader counts of two live brokers may differ before partitions move.
        ConfigKey("autobalancer.controller.leader.count.tolerance", _B.INT, 1, at_least(1), dynamic=True),
        # fjord: how long a fenced broker (dead, restarting, in controlled shutdown) pauses the balancer before the
        # other brokers are balanced without it.
        ConfigKey("autobalancer.controller.fenced.broker.wait.ms", _B.LONG, 300000, at_least(0), dynamic=True),
        ConfigKey("autobalancer.controller.exclude.topics", _B.LIST, [], dynamic=True),
        ConfigKey("autobalancer.controller.exclude.broker.ids", _B.LIST, [], dynamic=True),
        # The load goal (metadata.broker_load): a broker whose bytes in+out exceed the mean of the balanced brokers
        # by more than this fraction gives hot partitions to the least loaded broker (fjord; AutoMQ-like name).
        ConfigKey("autobalancer.controller.load.tolerance", _B.DOUBLE, 0.2, at_least(0), dynamic=True),
        # fjord: a partition with less traffic (bytes in+out per second) is not moved for load: noise, not load.
        ConfigKey("autobalancer.controller.load.min.partition.bytes.per.sec", _B.LONG, 102400, at_least(0),
                  dynamic=True),
        # How often a broker of a cluster reports its per-partition traffic to the active controller (AutoMQ's
        # key; fjord: 10 s, AutoMQ 60 s). The controller ignores a report older than three of its own intervals.
        ConfigKey("autobalancer.reporter.metrics.reporting.interval.ms", _B.LONG, 10000, at_least(1)),
        # topics
        ConfigKey("num.partitions", _B.INT, 1, at_least(1)),
        ConfigKey("default.replication.factor", _B.INT, 1, at_least(1)),
        ConfigKey("auto.create.topics.enable", _B.BOOLEAN, True),
        ConfigKey("delete.topic.enable", _B.BOOLEAN, True),
        ConfigKey("message.max.bytes", _B.INT, 1048588, at_least(0), dynamic=True),
        ConfigKey("compression.type", _B.STRING, "producer", one_of(*_COMPRESSION), dynamic=True),
        ConfigKey("compression.gzip.level", _B.INT, -1, either(between(1, 9), between(-1, -1)), dynamic=True),
        ConfigKey("compression.lz4.level", _B.INT, 9, between(1, 17), dynamic=True),
        ConfigKey("compression.zstd.level", _B.INT, 3, between(-131072, 22), dynamic=True),
        ConfigKey("min.insync.replicas", _B.INT, 1, at_least(1), dynamic=True),
        ConfigKey("unclean.leader.election.enable", _B.BOOLEAN, False, dynamic=True),
        ConfigKey("log.retention.ms", _B.LONG, None, at_least(-1), dynamic=True),
        ConfigKey("log.retention.minutes", _B.INT, None, at_least(-1)),
        ConfigKey("log.retention.hours", _B.INT, 168, at_least(-1)),
        ConfigKey("log.retention.bytes", _B.LONG, -1, dynamic=True),
        ConfigKey("log.retention.check.interval.ms", _B.LONG, 300000, at_least(1)),
        # The recovery point (DESIGN §4: PARTITION's recovery offset with the producer snapshot, leader epochs and
        # time-index position) is checkpointed after every upload and at the latest this long after a partition's
        # first write since the last checkpoint, so an unclean restart replays at most that much. Kafka's key.
        ConfigKey("log.flush.offset.checkpoint.interval.ms", _B.INT, 60000, at_least(1)),
        # fjord: ... or once this many bytes were appended since the last checkpoint, whichever comes first.
        ConfigKey("log.flush.offset.checkpoint.interval.bytes", _B.LONG, 16 * 1024 * 1024, at_least(1)),
        ConfigKey("log.cleanup.policy", _B.LIST, ["delete"], all_of("compact", "delete"), dynamic=True),
        ConfigKey("log.cleaner.enable", _B.BOOLEAN, True),
        ConfigKey("log.cleaner.delete.retention.ms", _B.LONG, 86400000, at_least(0), dynamic=True),
        ConfigKey("log.cleaner.min.compaction.lag.ms", _B.LONG, 0, at_least(0), dynamic=True),
        ConfigKey("log.cleaner.max.compaction.lag.ms", _B.LONG, LONG_MAX, at_least(1), dynamic=True),
        ConfigKey("log.cleaner.min.cleanable.ratio", _B.DOUBLE, 0.5, between(0, 1), dynamic=True),
        ConfigKey("log.cleaner.backoff.ms", _B.LONG, 15000, at_least(0), dynamic=True),
        ConfigKey("log.cleaner.dedupe.buffer.size", _B.LONG, 128 * 1024 * 1024, dynamic=True),
        ConfigKey("log.message.timestamp.type", _B.STRING, "CreateTime", one_of(*_TIMESTAMP_TYPES), dynamic=True),
        ConfigKey("log.message.timestamp.before.max.ms", _B.LONG, LONG_MAX, at_least(0), dynamic=True),
        ConfigKey("log.message.timestamp.after.max.ms", _B.LONG, 3600000, at_least(0), dynamic=True),
        ConfigKey("log.message.downconversion.enable", _B.BOOLEAN, True, dynamic=True),
        # Kafka 3.x's floor (the smallest possible record); Kafka 4.0 raised it to 1 MiB, but 3.6 clients and
        # their test suites still create topics with small segments. Fjord has no segments, so any size is safe.
        ConfigKey("log.segment.bytes", _B.INT, 1073741824, at_least(_SEGMENT_BYTES_FLOOR), dynamic=True),
        # Deprecated since Kafka 3.0 and ignored there (every batch is v2); accepted so 3.x clients can still set it.
        ConfigKey("log.message.format.version", _B.STRING, "3.0-IV1", dynamic=True),
        ConfigKey("log.segment.delete.delay.ms", _B.LONG, 60000, at_least(0), dynamic=True),
        ConfigKey("log.roll.ms", _B.LONG, None, at_least(1), dynamic=True),
        ConfigKey("log.roll.hours", _B.INT, 168, at_least(1)),
        ConfigKey("log.roll.jitter.ms", _B.LONG, None, at_least(0), dynamic=True),
        ConfigKey("log.roll.jitter.hours", _B.INT, 0, at_least(0)),
        ConfigKey("log.index.interval.bytes", _B.INT, 4096, at_least(0), dynamic=True),
        ConfigKey("log.index.size.max.bytes", _B.INT, 10485760, at_least(4), dynamic=True),
        ConfigKey("log.flush.interval.messages", _B.LONG, LONG_MAX, at_least(1), dynamic=True),
        ConfigKey("log.flush.interval.ms", _B.LONG, None, at_least(0), dynamic=True),
        ConfigKey("log.flush.scheduler.interval.ms", _B.LONG, LONG_MAX),
        ConfigKey("log.preallocate", _B.BOOLEAN, False, dynamic=True),
        # groups and offsets
        ConfigKey("group.initial.rebalance.delay.ms", _B.INT, 3000, at_least(0)),
        ConfigKey("group.min.session.timeout.ms", _B.INT, 6000),
        ConfigKey("group.max.session.timeout.ms", _B.INT, 1800000),
        ConfigKey("group.max.size", _B.INT, INT_MAX, at_least(1)),
        # KIP-848 consumer groups (Kafka 4.2's keys and defaults; settings.consumer_groups checks them together)
        # "share" is accepted as Kafka 4.2 accepts it: share groups follow the share.version feature, not this list.
        ConfigKey(
            "group.coordinator.rebalance.protocols", _B.LIST, ["classic", "consumer"],
            all_of("classic", "consumer", "share"),
        ),
        ConfigKey("group.consumer.session.timeout.ms", _B.INT, 45000, at_least(1)),
        ConfigKey("group.consumer.min.session.timeout.ms", _B.INT, 45000, at_least(1)),
        ConfigKey("group.consumer.max.session.timeout.ms", _B.INT, 60000, at_least(1)),
        ConfigKey("group.consumer.heartbeat.interval.ms", _B.INT, 5000, at_least(1)),
        ConfigKey("group.consumer.min.heartbeat.interval.ms", _B.INT, 5000, at_least(1)),
        ConfigKey("group.consumer.max.heartbeat.interval.ms", _B.INT, 15000, at_least(1)),
        ConfigKey("group.consumer.max.size", _B.INT, INT_MAX, at_least(1)),
        ConfigKey("group.consumer.assignors", _B.LIST, ["uniform", "range"]),
        ConfigKey(
            "group.consumer.migration.policy", _B.STRING, "bidirectional", one_of(*_MIGRATION, case_sensitive=False)
        ),
        # KIP-932 share groups (Kafka 4.2's keys, defaults and ranges; settings.share_groups checks them together;
        # share groups are switched on by the share.version feature, not by a key)
        ConfigKey("group.share.session.timeout.ms", _B.INT, 45000, at_least(1)),
        ConfigKey("group.share.min.session.timeout.ms", _B.INT, 45000, at_least(1)),
        ConfigKey("group.share.max.session.timeout.ms", _B.INT, 60000, at_least(1)),
        ConfigKey("group.share.heartbeat.interval.ms", _B.INT, 5000, at_least(1)),
        ConfigKey("group.share.min.heartbeat.interval.ms", _B.INT, 5000, at_least(1)),
        ConfigKey("group.share.max.heartbeat.interval.ms", _B.INT, 15000, at_least(1)),
        ConfigKey("group.share.record.lock.duration.ms", _B.INT, 30000, between(1000, 3600000)),
        ConfigKey("group.share.min.record.lock.duration.ms", _B.INT, 15000, between(1000, 30000)),
        ConfigKey("group.share.max.record.lock.duration.ms", _B.INT, 60000, between(30000, 3600000)),
        ConfigKey("group.share.delivery.count.limit", _B.INT, 5, between(2, 10)),
        ConfigKey("group.share.partition.max.record.locks", _B.INT, 2000, between(100, 10000)),
        ConfigKey("group.share.max.size", _B.INT, 200, between(1, 1000)),
        ConfigKey("group.share.max.share.sessions", _B.INT, 2000, at_least(1)),
        ConfigKey("group.share.assignors", _B.LIST, ["simple"]),
        ConfigKey("offsets.topic.num.partitions", _B.INT, INTERNAL_TOPIC_PARTITIONS, at_least(1)),
        ConfigKey("offsets.topic.replication.factor", _B.SHORT, 1, at_least(1)),  # fjord: Kafka 3 (one node)
        ConfigKey("offsets.topic.segment.bytes", _B.INT, 104857600, at_least(1)),
        ConfigKey("offsets.retention.minutes", _B.INT, 10080, at_least(1)),
        ConfigKey("offsets.retention.check.interval.ms", _B.LONG, 600000, at_least(1)),
        ConfigKey("offsets.commit.timeout.ms", _B.INT, 5000, at_least(1)),
        ConfigKey("offset.metadata.max.bytes", _B.INT, 4096),
        # transactions and idempotence
        ConfigKey("transactional.id.expiration.ms", _B.INT, 604800000, at_least(1)),
        ConfigKey("transaction.max.timeout.ms", _B.INT, 900000, at_least(1)),
        ConfigKey("transaction.state.log.num.partitions", _B.INT, TRANSACTION_STATE_PARTITIONS, at_least(1)),
        ConfigKey("transaction.state.log.replication.factor", _B.SHORT, 1, at_least(1)),  # fjord: as above
        ConfigKey("transaction.state.log.min.isr", _B.INT, 1, at_least(1)),
        ConfigKey("transaction.state.log.segment.bytes", _B.INT, 104857600, at_least(1)),
        ConfigKey("transaction.abort.timed.out.transaction.cleanup.interval.ms", _B.INT, 10000, at_least(1)),
        ConfigKey("producer.id.expiration.ms", _B.INT, 86400000, at_least(1), dynamic=True),
        # The throttles kafka-reassign-partitions.sh --throttle sets and --verify deletes: accepted so the tool works,
        # with no effect (NO_REPLICATION_TRAFFIC says why; DescribeConfigs shows it).
        ConfigKey("leader.replication.throttled.rate", _B.LONG, LONG_MAX, at_least(0), dynamic=True,
                  doc=NO_REPLICATION_TRAFFIC),
        ConfigKey("follower.replication.throttled.rate", _B.LONG, LONG_MAX, at_least(0), dynamic=True,
                  doc=NO_REPLICATION_TRAFFIC),
        ConfigKey("replica.alter.log.dirs.io.max.bytes.per.second", _B.LONG, LONG_MAX, at_least(0), dynamic=True,
                  doc=NO_REPLICATION_TRAFFIC),
        ConfigKey("max.incremental.fetch.session.cache.slots", _B.INT, 1000, at_least(0)),
        # fjord: the port of the Prometheus /metrics endpoint (absent: no endpoint)
        ConfigKey("metrics.port", _B.INT, None, between(0, 65535)),
        # fjord: the address /metrics binds (0.0.0.0 where a Prometheus in another container or host scrapes it)
        ConfigKey("metrics.host", _B.STRING, "127.0.0.1"),
        # TLS of SSL client listeners (settings.security; listener.name.<name>.ssl.* overrides them). These
        # are the only ssl.* keys Fjord reads; any other one, and every quota key but quota.window.*, stops the node.
        # fjord: PEM only, so PEM is the default (Kafka's is JKS, which the standard library cannot read).
        ConfigKey("ssl.keystore.type", _B.STRING, "PEM", one_of("PEM", case_sensitive=False)),
        ConfigKey("ssl.keystore.location", _B.STRING, None),
        ConfigKey("ssl.keystore.key", _B.PASSWORD, None),
        ConfigKey("ssl.keystore.certificate.chain", _B.PASSWORD, None),
        ConfigKey("ssl.key.password", _B.PASSWORD, None),
        ConfigKey("ssl.truststore.type", _B.STRING, "PEM", one_of("PEM", case_sensitive=False)),
        ConfigKey("ssl.truststore.location", _B.STRING, None),
        ConfigKey("ssl.truststore.certificates", _B.PASSWORD, None),
        ConfigKey("ssl.client.auth", _B.STRING, "none", one_of("none", "requested", "required")),
        ConfigKey("ssl.enabled.protocols", _B.LIST, ["TLSv1.2", "TLSv1.3"], all_of("TLSv1.2", "TLSv1.3")),
        # Kafka's SSLContext protocol. A listener serves the versions of ssl.enabled.protocols whatever it says (as
        # Kafka's broker does), and so do Fjord's own connections; any name Kafka's JVM takes for TLS 1.2+ is accepted.
        ConfigKey("ssl.protocol", _B.STRING, "TLSv1.3", one_of("TLSv1.2", "TLSv1.3", "TLS"), doc=SSL_PROTOCOL_DOC),
        ConfigKey("ssl.cipher.suites", _B.LIST, []),
        # KIP-371: how a client certificate's subject DN becomes the principal (wire.tls_principal).
        ConfigKey("ssl.principal.mapping.rules", _B.STRING, "DEFAULT"),
        # A node's own connections to an SSL CONTROLLER listener check the host name ("https") or not ("").
        ConfigKey(
            "ssl.endpoint.identification.algorithm", _B.STRING, "https", one_of("https", "", case_sensitive=False)
        ),
        # fjord: how often an SSL listener checks its keystore and truststore files (mtime, size) and, when they
        # changed, serves new connections with them (wire.tls_reload); 0: never. Kafka reloads only through
        # IncrementalAlterConfigs of listener.name.<l>.ssl.keystore.location.
        ConfigKey("ssl.reload.interval.ms", _B.LONG, 5000, at_least(0)),
        # SASL of SASL_PLAINTEXT/SASL_SSL client listeners (settings.security; listener.name.<name>.*
        # overrides them).
        # Kafka's default mechanism is GSSAPI, which Fjord refuses at start: a SASL listener names its mechanisms.
        ConfigKey("sasl.enabled.mechanisms", _B.LIST, ["GSSAPI"]),
        ConfigKey("sasl.jaas.config", _B.PASSWORD, None),
        # How brokers reach each other (settings.inter_broker): the listener named after this protocol
        # unless inter.broker.listener.name is set, and the SASL mechanism of their own connections (GSSAPI, Kafka's
        # default, stops a broker whose inter-broker listener is SASL).
        ConfigKey("security.inter.broker.protocol", _B.STRING, "PLAINTEXT"),
        ConfigKey("sasl.mechanism.inter.broker.protocol", _B.STRING, "GSSAPI"),
        ConfigKey("sasl.mechanism.controller.protocol", _B.STRING, "GSSAPI"),
        # Kafka's dynamic Kerberos keys (DynamicListenerConfig), with its types and defaults: accepted by
        # AlterConfigs with no effect (NO_GSSAPI says why; DescribeConfigs shows it). In a properties file they
        # still stop the node (settings.security.refusal): written there, they ask for Kerberos.
        ConfigKey("sasl.kerberos.service.name", _B.STRING, None, dynamic=True, doc=NO_GSSAPI),
        ConfigKey("sasl.kerberos.kinit.cmd", _B.STRING, "/usr/bin/kinit", dynamic=True, doc=NO_GSSAPI),
        ConfigKey("sasl.kerberos.ticket.renew.window.factor", _B.DOUBLE, 0.8, dynamic=True, doc=NO_GSSAPI),
        ConfigKey("sasl.kerberos.ticket.renew.jitter", _B.DOUBLE, 0.05, dynamic=True, doc=NO_GSSAPI),
        ConfigKey("sasl.kerberos.min.time.before.relogin", _B.LONG, 60000, dynamic=True, doc=NO_GSSAPI),
        ConfigKey("sasl.kerberos.principal.to.local.rules", _B.LIST, ["DEFAULT"], dynamic=True, doc=NO_GSSAPI),
        # KIP-48 delegation tokens (metadata.delegation_tokens): on while a secret key is set, the same on every node
        ConfigKey("delegation.token.secret.key", _B.PASSWORD, None),
        ConfigKey("delegation.token.master.key", _B.PASSWORD, None),  # the secret key's deprecated name
        ConfigKey("delegation.token.max.lifetime.ms", _B.LONG, 604_800_000, at_least(1)),
        ConfigKey("delegation.token.expiry.time.ms", _B.LONG, 86_400_000, at_least(1)),
        ConfigKey("delegation.token.expiry.check.interval.ms", _B.LONG, 3_600_000, at_least(1)),
        # KIP-368: a SASL session's lifetime (0: none); the client re-authenticates before it ends.
        ConfigKey("connections.max.reauth.ms", _B.LONG, 0, at_least(0)),
        # KIP-306: a failed SASL authentication is answered this long after it failed (and nothing after it is).
        ConfigKey("connection.failed.authentication.delay.ms", _B.INT, 100, at_least(0)),
        # client quotas (broker.quotas): the windows a client's rates are measured over, as Kafka's
        ConfigKey("quota.window.num", _B.INT, 11, at_least(1)),
        ConfigKey("quota.window.size.seconds", _B.INT, 1, at_least(1)),
        # authorization (metadata.acl): only Kafka's StandardAuthorizer is accepted (settings.security)
        ConfigKey("authorizer.class.name", _B.STRING, ""),
        ConfigKey("super.users", _B.STRING, ""),
        ConfigKey("allow.everyone.if.no.acl.found", _B.BOOLEAN, False),
        # KIP-714 client telemetry (broker.telemetry): the largest PushTelemetry payload (Kafka's key), and fjord: the
        # bounds of the pushed metrics /metrics shows (clients kept, least recently pushing dropped first; series each)
        ConfigKey("telemetry.max.bytes", _B.INT, 1_048_576, at_least(1)),
        ConfigKey("fjord.client.telemetry.max.clients", _B.INT, 500, at_least(0)),
        ConfigKey("fjord.client.telemetry.max.series.per.client", _B.INT, 200, at_least(0)),
    )
}
# Kafka 3.6 keys whose purpose Fjord's design makes moot (settings.kafka_broker_keys): Kafka's type, default
# and update mode, so they load, describe and alter as Kafka's do; their doc says why they change nothing.
BROKER_KEYS.update(
    (
        k.name,
        ConfigKey(k.name, ConfigType[k.type], k.default, None if k.at_least is None else at_least(k.at_least),
                  dynamic=k.dynamic, doc=k.doc),
    )
    for k in NO_EFFECT_KEYS
)


# ---------------------------------------------------------------------- topic configs


@dataclass(frozen=True, slots=True)
class BrokerSynonym:
    """A broker key a topic config falls back to; ``scale`` converts its unit (hours) to the topic's (ms)."""

    name: str
    scale: int = 1


@dataclass(frozen=True, slots=True)
class TopicConfigDef:
    key: ConfigKey
    synonyms: tuple[BrokerSynonym, ...] = ()  # most specific first, as Kafka lists them

    @property
    def name(self) -> str:
        return self.key.name

    @property
    def type(self) -> str:
        return self.key.type.name.lower()

    def default_text(self) -> str | None:
        return self.key.default_text()


def _topic(
    name: str,
    kind: ConfigType,
    default: Any,
    validator: Validator | None = None,
    *synonyms: str | BrokerSynonym,
    doc: str | None = None,
) -> TopicConfigDef:
    syns = tuple(s if isinstance(s, BrokerSynonym) else BrokerSynonym(s) for s in synonyms)
    return TopicConfigDef(ConfigKey(name, kind, default, validator, doc=doc), syns)


def _throttled_replicas_valid(replicas: Any) -> str | None:
    """Kafka's ThrottledReplicaListValidator: ``*`` alone, or ``partition:broker`` pairs."""
    items = list(replicas or [])
    if items == ["*"] or all(re.fullmatch(r"\d+:\d+", item) for item in items):
        return None
    return (
        "must be the literal '*' or a list of replicas in the following format: "
        "[partitionId]:[brokerId],[partitionId]:[brokerId],..."
    )


def _throttled_replicas(name: str) -> TopicConfigDef:
    return TopicConfigDef(ConfigKey(name, _B.LIST, [], _throttled_replicas_valid, doc=NO_REPLICATION_TRAFFIC))


TOPIC_CONFIGS: dict[str, TopicConfigDef] = {
    d.name: d
    for d in (
        _topic("cleanup.policy", _B.LIST, ["delete"], all_of("compact", "delete"), "log.cleanup.policy"),
        _topic("compression.type", _B.STRING, "producer", one_of(*_COMPRESSION), "compression.type"),
        _topic("compression.gzip.level", _B.INT, -1, either(between(1, 9), between(-1, -1)), "compression.gzip.level"),
        _topic("compression.lz4.level", _B.INT, 9, between(1, 17), "compression.lz4.level"),
        _topic("compression.zstd.level", _B.INT, 3, between(-131072, 22), "compression.zstd.level"),
        _topic("delete.retention.ms", _B.LONG, 86400000, at_least(0), "log.cleaner.delete.retention.ms"),
        _topic("file.delete.delay.ms", _B.LONG, 60000, at_least(0), "log.segment.delete.delay.ms"),
        _topic("flush.messages", _B.LONG, LONG_MAX, at_least(1), "log.flush.interval.messages"),
        _topic("flush.ms", _B.LONG, LONG_MAX, at_least(0), "log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
        _throttled_replicas("follower.replication.throttled.replicas"),
        _throttled_replicas("leader.replication.throttled.replicas"),
        _topic("index.interval.bytes", _B.INT, 4096, at_least(0), "log.index.interval.bytes"),
        _topic("local.retention.bytes", _B.LONG, -2, at_least(-2), "log.local.retention.bytes", doc=NO_LOCAL_TIER),
        _topic("local.retention.ms", _B.LONG, -2, at_least(-2), "log.local.retention.ms", doc=NO_LOCAL_TIER),
        _topic("max.compaction.lag.ms", _B.LONG, LONG_MAX, at_least(1), "log.cleaner.max.compaction.lag.ms"),
        _topic("max.message.bytes", _B.INT, 1048588, at_least(0), "message.max.bytes"),
        _topic("message.downconversion.enable", _B.BOOLEAN, True, None, "log.message.downconversion.enable"),
        _topic("message.format.version", _B.STRING, "3.0-IV1", None, "log.message.format.version"),
        _topic(
            "message.timestamp.type", _B.STRING, "CreateTime", one_of(*_TIMESTAMP_TYPES), "log.message.timestamp.type"
        ),
        _topic(
            "message.timestamp.before.max.ms", _B.LONG, LONG_MAX, at_least(0), "log.message.timestamp.before.max.ms"
        ),
        _topic("message.timestamp.after.max.ms", _B.LONG, 3600000, at_least(0), "log.message.timestamp.after.max.ms"),
        _topic("min.cleanable.dirty.ratio", _B.DOUBLE, 0.5, between(0, 1), "log.cleaner.min.cleanable.ratio"),
        _topic("min.compaction.lag.ms", _B.LONG, 0, at_least(0), "log.cleaner.min.compaction.lag.ms"),
        _topic("min.insync.replicas", _B.INT, 1, at_least(1), "min.insync.replicas"),
        _topic("preallocate", _B.BOOLEAN, False, None, "log.preallocate"),
        # Judged with the topic's other values (settings.describe.check_topic_values): true is refused.
        _topic("remote.storage.enable", _B.BOOLEAN, False, doc=REMOTE_STORAGE_DOC),
        _topic("retention.bytes", _B.LONG, -1, None, "log.retention.bytes"),
        _topic(
            "retention.ms",
            _B.LONG,
            604800000,
            at_least(-1),
            "log.retention.ms",
            BrokerSynonym("log.retention.minutes", MS_PER_MINUTE),
            BrokerSynonym("log.retention.hours", MS_PER_HOUR),
        ),
        _topic("segment.bytes", _B.INT, 1073741824, at_least(_SEGMENT_BYTES_FLOOR), "log.segment.bytes"),
        _topic("segment.index.bytes", _B.INT, 10485760, at_least(4), "log.index.size.max.bytes"),
        _topic(
            "segment.jitter.ms",
            _B.LONG,
            0,
            at_least(0),
            "log.roll.jitter.ms",
            BrokerSynonym("log.roll.jitter.hours", MS_PER_HOUR),
        ),
        _topic(
            "segment.ms", _B.LONG, 604800000, at_least(1), "log.roll.ms", BrokerSynonym("log.roll.hours", MS_PER_HOUR)
        ),
        _topic("unclean.leader.election.enable", _B.BOOLEAN, False, None, "unclean.leader.election.enable"),
    )
}


def topic_config_def(name: str) -> TopicConfigDef | None:
    return TOPIC_CONFIGS.get(name)


def config_key(resource_type: int, name: str) -> ConfigKey | None:
    """The definition of a topic (resource type 2) or broker (4) config key, None if there is none."""
    if resource_type == RESOURCE_TOPIC:
        definition = TOPIC_CONFIGS.get(name)
        return None if definition is None else definition.key
    if resource_type == RESOURCE_BROKER:
        return BROKER_KEYS.get(name)
    return None


def validate_topic_config(name: str, value: str) -> str:
    """The normalized text of a topic config value; ConfigValueError (INVALID_CONFIG) if unknown or invalid."""
    definition = TOPIC_CONFIGS.get(name)
    if definition is None:
        raise ConfigValueError(f"Unknown topic config name: {name}")
    return definition.key.render(definition.key.parse(value)) or ""


def validate_broker_config(name: str, value: str) -> str:
    """The normalized text of a dynamic broker config value; ConfigValueError if unknown, static or invalid."""
    key = BROKER_KEYS.get(name)
    if key is None and name != NODE_ID_SYNONYM:  # broker.id: described read-only, as node.id
        raise ConfigValueError(f"Unknown broker config name: {name}")
    if key is None or not key.dynamic:
        raise ConfigValueError(f"Cannot update these configs dynamically: {name}")
    return key.render(key.parse(value)) or ""
