"""Why Fjord accepts a Kafka broker key with no effect, or refuses it: the reasons DescribeConfigs shows and the
start's INFO lines and errors give, shared by Kafka 3.6's keys (:mod:`settings.kafka_broker_keys`) and those Kafka
4.0-4.2 added (:mod:`settings.kafka4_broker_keys`)."""

from __future__ import annotations

# ---------------------------------------------------------------------- no effect: their purpose is moot in Fjord

NOT_REPLICATED = (
    "partitions are not replicated between brokers: a partition's data lives in object storage, written by its one "
    "leader through its WAL, so there are no followers, fetchers or ISR"
)
ZOOKEEPER_MODE = "a ZooKeeper-mode setting, which Kafka's KRaft mode does not read either; Fjord runs KRaft only"
NO_LOCAL_LOG = (
    "a partition has no log files on the broker: its leader recovers it from its streams when it opens the partition "
    "and its log start offset is written to its meta stream when it moves (DESIGN §4)"
)
FIXED_OPEN_PARALLELISM = (
    "a partition has no log files on the broker to recover: a broker opens its partitions from their streams, at "
    "most 8 at a time whatever its data directories (broker/partition/manager.py), recovering each one as it opens"
)
NO_PURGATORY = (
    "delayed requests wait as asyncio futures that go away when they complete; there is no purgatory to purge"
)
ONE_EVENT_LOOP = (
    "a node reads, handles and answers every request on one asyncio event loop; there are no network or request "
    "handler threads to size"
)
NO_THREAD_POOL = (
    "background work (retention, the log cleaner, checkpoints, expirations) runs as asyncio tasks on the event loop; "
    "there is no background thread pool"
)
CLEANER_MAP = (
    "the log cleaner reads through the stream cache and keeps its key map in a dict bounded by "
    "log.cleaner.dedupe.buffer.size; it has no I/O buffers or hash-table load factor to size"
)
NO_TIERED_STORAGE = (
    "it tunes Kafka's tiered storage, which Fjord does not have: every partition already lives in object storage "
    "(the s3.* keys), and remote.log.storage.system.enable=true stops the node"
)
NO_JMX = (
    "Fjord has neither JMX nor Kafka's metrics library: it exports Prometheus counters, gauges and histograms on "
    "/metrics (metrics.port) and the scraper computes rates over its own windows"
)
NO_DYNAMIC_PASSWORDS = (
    "Fjord keeps no password in dynamic configs (every password key is static, in the properties file), so there is "
    "nothing to encode"
)
METADATA_RETENTION = (
    "the metadata log keeps only its newest snapshot and drops the entries that snapshot covers; nothing older is "
    "retained to bound"
)
ONE_TRANSACTION_PASS = (
    "expired transactional ids are removed in the same pass that aborts timed-out transactions, every "
    "transaction.abort.timed.out.transaction.cleanup.interval.ms"
)


# ---------------------------------------------------------------------- refused: Fjord does not do what they ask

KRAFT_ONLY = "Fjord runs KRaft only; there is no ZooKeeper (the controller quorum is controller.quorum.voters)"
JAVA_PLUGIN = "Fjord is not a JVM and loads no Java plugin classes"
CONNECT_TIMEOUT = (
    "not implemented: the node's own connections are set up within the timeout of the request that needs them "
    "(controller.quorum.request.timeout.ms to the controller quorum), with no timeout or exponential back-off of "
    "their own"
)
LOAD_READS = "not implemented: a coordinator loads its partition in 1 MiB reads"
AUTO_BALANCER = (
    "Fjord has no preferred replicas to elect back; its auto-balancer spreads leaders instead, so only Kafka's "
    "default is accepted (tune or switch it off with autobalancer.controller.enable, "
    "autobalancer.controller.leader.count.tolerance, autobalancer.controller.anomaly.detect.interval.ms)"
)
