"""The broker keys Kafka 4.0 to 4.2 added to Kafka 3.6's, and what Fjord does with each one its catalogue does not
define: the same three dispositions as :mod:`settings.kafka_broker_keys`, which merges these in.

Kafka 4's shipped ``server.properties`` sets ``share.coordinator.state.topic.*``, and a file dumped from a Kafka 4.2
broker sets every key below at its default; without these a Kafka 4 user's file would start with a warning that a
key "isn't a known config", which says nothing of what Fjord does instead. The names are those of the broker
config definitions of Kafka's 4.2 branch (``AbstractKafkaConfig.CONFIG_DEF`` and ``RemoteLogManagerConfig``, topic
and client-quota keys left out); types and defaults are Kafka 4.2's.

This module is data only (it imports only the shared reasons); the disposition tuples are read by
:mod:`settings.kafka_broker_keys`: ``(name, type, default[, dynamic[, at_least]])`` for a key with no effect,
``(reason, accepts, default)`` for a refused one, as its ``Refused`` reads them.
"""

from __future__ import annotations

from typing import Any

from settings.kafka_key_reasons import JAVA_PLUGIN, NO_PURGATORY, NO_TIERED_STORAGE

#: Kafka 4.0-4.2's new broker keys that Fjord's catalogue already defines (``settings.keys``): listed so that they
#: count as Kafka keys, not as unknown ones.
IN_THE_CATALOGUE: frozenset[str] = frozenset(
    (
        "compression.gzip.level",
        "compression.lz4.level",
        "compression.zstd.level",
        "controller.quorum.auto.join.enable",
        "controller.quorum.bootstrap.servers",
        "follower.replication.throttled.rate",
        "group.consumer.assignors",
        "group.consumer.heartbeat.interval.ms",
        "group.consumer.max.heartbeat.interval.ms",
        "group.consumer.max.session.timeout.ms",
        "group.consumer.max.size",
        "group.consumer.migration.policy",
        "group.consumer.min.heartbeat.interval.ms",
        "group.consumer.min.session.timeout.ms",
        "group.consumer.session.timeout.ms",
        "group.coordinator.rebalance.protocols",
        "group.share.assignors",
        "group.share.delivery.count.limit",
        "group.share.heartbeat.interval.ms",
        "group.share.max.heartbeat.interval.ms",
        "group.share.max.record.lock.duration.ms",
        "group.share.max.session.timeout.ms",
        "group.share.max.share.sessions",
        "group.share.max.size",
        "group.share.min.heartbeat.interval.ms",
        "group.share.min.record.lock.duration.ms",
        "group.share.min.session.timeout.ms",
        "group.share.partition.max.record.locks",
        "group.share.record.lock.duration.ms",
        "group.share.session.timeout.ms",
        "leader.replication.throttled.rate",
        "max.request.partition.size.limit",
        "replica.alter.log.dirs.io.max.bytes.per.second",
        "telemetry.max.bytes",
    )
)

SHARE_STATE_WITH_THE_PARTITION = (
    "a share partition's state (its start offset, record states and delivery counts) is kept by the topic "
    "partition's leader in the partition's own streams; there is no share coordinator or __share_group_state topic"
)
COORDINATOR_ON_THE_LOOP = (
    "the group coordinator runs on the node's one asyncio event loop and writes each change of a group at once "
    "(what arrives during one write goes into the next); there are no coordinator threads or linger to size"
)
STREAMS_GROUPS = (
    "Fjord does not serve streams groups (KIP-1071: StreamsGroupHeartbeat, StreamsGroupDescribe); Kafka Streams "
    "applications use the classic group protocol, their default"
)
SHARE_VERSION = "share groups follow the share.version feature (kafka-features.sh), as in Kafka 4.1 and later"
CONTROLLER_SAMPLING = (
    "Kafka's controller samples and logs its own event times; Fjord's controller exports what it does as "
    "Prometheus metrics on /metrics (metrics.port) instead"
)
NO_LOG_DIR_FAILURE = (
    "a broker holds no partition data in its log directories, so a failed directory takes no replicas offline "
    "and there is nothing to wait for before shutting the broker down"
)
NO_UNCLEAN_ELECTION = (
    "there are no replicas to elect from: a partition whose leader died is given to another live broker as soon "
    "as the dead broker's WAL is replayed, with nothing lost, not by a periodic unclean election"
)

#: Kafka 4.0-4.2 keys accepted with no effect, by reason: (name, type, Kafka's default[, dynamic[, at_least]]).
NO_EFFECT: tuple[tuple[str, tuple[tuple[Any, ...], ...]], ...] = (
    (
        SHARE_STATE_WITH_THE_PARTITION,
        (
            ("share.coordinator.append.linger.ms", "INT", -1, False, -1),
            ("share.coordinator.cold.partition.snapshot.interval.ms", "INT", 300000, False, 1),
            ("share.coordinator.load.buffer.size", "INT", 5242880, False, 1),
            ("share.coordinator.snapshot.update.records.per.snapshot", "INT", 500, False, 0),
            ("share.coordinator.state.topic.compression.codec", "INT", 0),
            ("share.coordinator.state.topic.min.isr", "SHORT", 2, False, 1),
            ("share.coordinator.state.topic.num.partitions", "INT", 50, False, 1),
            ("share.coordinator.state.topic.prune.interval.ms", "INT", 300000, False, 1),
            ("share.coordinator.state.topic.replication.factor", "SHORT", 3, False, 1),
            ("share.coordinator.state.topic.segment.bytes", "INT", 104857600, False, 1),
            ("share.coordinator.threads", "INT", 1, False, 1),
            ("share.coordinator.write.timeout.ms", "INT", 5000, False, 1),
            ("group.share.initialize.retry.interval.ms", "INT", 30000, False, 1),
        ),
    ),
    (SHARE_VERSION, (("group.share.enable", "BOOLEAN", False),)),
    (
        COORDINATOR_ON_THE_LOOP,
        (
            ("group.coordinator.threads", "INT", 4, False, 1),
            ("group.coordinator.append.linger.ms", "INT", -1, False, -1),
        ),
    ),
    (
        "a consumer group's regular expressions are matched again whenever the cluster's topics change, not on a "
        "timer",
        (("group.consumer.regex.refresh.interval.ms", "INT", 600000, False, 1),),
    ),
    (
        STREAMS_GROUPS,
        (
            ("group.streams.heartbeat.interval.ms", "INT", 5000, False, 1),
            ("group.streams.initial.rebalance.delay.ms", "INT", 3000, False, 0),
            ("group.streams.max.heartbeat.interval.ms", "INT", 15000, False, 1),
            ("group.streams.max.session.timeout.ms", "INT", 60000, False, 1),
            ("group.streams.max.size", "INT", 2147483647, False, 1),
            ("group.streams.max.standby.replicas", "INT", 2, False, 0),
            ("group.streams.min.heartbeat.interval.ms", "INT", 5000, False, 1),
            ("group.streams.min.session.timeout.ms", "INT", 45000, False, 1),
            ("group.streams.num.standby.replicas", "INT", 0, False, 0),
            ("group.streams.session.timeout.ms", "INT", 45000, False, 1),
        ),
    ),
    (
        NO_TIERED_STORAGE,
        (
            ("remote.fetch.max.wait.ms", "INT", 500, True, 1),
            ("remote.list.offsets.request.timeout.ms", "LONG", 30000, True, 1),
            ("remote.log.index.file.cache.total.size.bytes", "LONG", 1073741824, True, 1),
            ("remote.log.manager.copier.thread.pool.size", "INT", 10, True, 1),
            ("remote.log.manager.expiration.thread.pool.size", "INT", 10, True, 1),
            ("remote.log.manager.follower.thread.pool.size", "INT", 2, True, 1),
            ("remote.log.manager.copy.max.bytes.per.second", "LONG", 9223372036854775807, True, 1),
            ("remote.log.manager.fetch.max.bytes.per.second", "LONG", 9223372036854775807, True, 1),
            ("remote.log.manager.task.retry.backoff.max.ms", "LONG", 30000, False, 1),
            ("remote.log.manager.task.retry.backoff.ms", "LONG", 500, False, 1),
            ("remote.log.manager.task.retry.jitter", "DOUBLE", 0.2),
        ),
    ),
    (NO_PURGATORY, (("share.fetch.purgatory.purge.interval.requests", "INT", 1000),)),
    (
        CONTROLLER_SAMPLING,
        (
            ("controller.performance.always.log.threshold.ms", "LONG", 2000, False, 0),
            ("controller.performance.sample.period.ms", "LONG", 60000, False, 100),
        ),
    ),
    (NO_LOG_DIR_FAILURE, (("log.dir.failure.timeout.ms", "LONG", 30000, False, 1),)),
    (NO_UNCLEAN_ELECTION, (("unclean.leader.election.interval.ms", "LONG", 300000, True, 1),)),
)

#: Kafka 4.0-4.2 keys that stop the node unless set to what Fjord does or to Kafka's default:
#: name -> (reason, the value that asks for what Fjord does or None, Kafka's default when another value or None).
REFUSED: dict[str, tuple[str, str | None, str | None]] = {
    "add.partitions.to.txn.retry.backoff.ms": (
        "not implemented: a Produce's add of its partition to a transaction (KIP-890) asks a busy coordinator again "
        "after a fixed 20 ms",
        "20",
        None,
    ),
    "add.partitions.to.txn.retry.backoff.max.ms": (
        "not implemented: a Produce's add of its partition to a transaction (KIP-890) retries a busy coordinator "
        "for up to 1 s",
        None,
        "100",
    ),
    "config.providers": (JAVA_PLUGIN, "", None),
    "group.share.persister.class.name": (
        JAVA_PLUGIN, None, "org.apache.kafka.server.share.persister.DefaultStatePersister"
    ),
    "log.initial.task.delay.ms": (
        "not implemented: the first retention check runs one log.retention.check.interval.ms after the start",
        None,
        "30000",
    ),
    "producer.id.expiration.check.interval.ms": (
        "not implemented: idle producer ids are dropped at each of the partition's checkpoints, not on a timer of "
        "their own",
        None,
        "600000",
    ),
    "server.max.startup.time.ms": ("not implemented: a node has no start-up deadline", "9223372036854775807", None),
    "transaction.two.phase.commit.enable": (
        "two-phase-commit transactions (KIP-939) are not implemented", "false", None
    ),
    "unstable.api.versions.enable": ("not implemented: Fjord serves released API versions only", "false", None),
    "unstable.feature.versions.enable": (
        "not implemented: Fjord finalizes released feature levels only", "false", None
    ),
}

#: Kafka 4.0-4.2's new broker keys outside the catalogue that security owns (settings.security refuses every
#: ``sasl.*`` and ``ssl.*`` key it does not read, and every quota key but the client quotas' windows).
FOR_SECURITY: frozenset[str] = frozenset(
    (
        "remote.log.manager.copy.quota.window.num",
        "remote.log.manager.copy.quota.window.size.seconds",
        "remote.log.manager.fetch.quota.window.num",
        "remote.log.manager.fetch.quota.window.size.seconds",
        "sasl.oauthbearer.assertion.algorithm",
        "sasl.oauthbearer.assertion.claim.aud",
        "sasl.oauthbearer.assertion.claim.exp.seconds",
        "sasl.oauthbearer.assertion.claim.iss",
        "sasl.oauthbearer.assertion.claim.jti.include",
        "sasl.oauthbearer.assertion.claim.nbf.seconds",
        "sasl.oauthbearer.assertion.claim.sub",
        "sasl.oauthbearer.assertion.file",
        "sasl.oauthbearer.assertion.private.key.file",
        "sasl.oauthbearer.assertion.private.key.passphrase",
        "sasl.oauthbearer.assertion.template.file",
        "sasl.oauthbearer.client.credentials.client.id",
        "sasl.oauthbearer.client.credentials.client.secret",
        "sasl.oauthbearer.jwt.retriever.class",
        "sasl.oauthbearer.jwt.validator.class",
        "sasl.oauthbearer.scope",
        "ssl.allow.dn.changes",
        "ssl.allow.san.changes",
    )
)

#: Every broker key Kafka 4.0-4.2 added to Kafka 3.6's documented ones.
KAFKA_4_BROKER_KEYS: frozenset[str] = (
    IN_THE_CATALOGUE
    | {key[0] for _reason, keys in NO_EFFECT for key in keys}
    | REFUSED.keys()
    | FOR_SECURITY
)
