"""Share groups' partitions (KIP-932): the record states of each (share group, topic partition) on the partition's
leader, and their durable state in the partition's share stream (DESIGN §4).

- ``record_states.py``: Kafka's record states and acknowledgement types;
- ``partition_state.py``: the sans-I/O state machine of one share partition (acquire, acknowledge, release, lock
  time-outs, delivery limit, SPSO);
- ``state_records.py``: the share stream's records (Kafka's ShareSnapshot / ShareUpdate shape) and their replay;
- ``store.py``: one partition's share stream written, replayed, checkpointed and trimmed;
- ``share_partition.py``: ``SharePartition``, the async facade ShareFetch and ShareAcknowledge use;
- ``registry.py``: ``SharePartitions``, every share partition this broker leads, the lock timer;
- ``config.py``: the per-group settings applied and the metrics sink's shape;
- ``metrics.py``: the share-group counters on /metrics;
- ``offsets_admin.py`` and ``state_rpc.py``: Describe/Alter/DeleteShareGroupOffsets, reaching each partition's leader.
"""
