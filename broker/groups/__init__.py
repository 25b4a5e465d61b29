"""The group coordinator: consumer groups, their membership and their committed offsets, kept in ``__consumer_offsets``.

Split by what every group type shares and what one protocol alone needs, so that each new group type is a
sub-package for its state machine plus a module for its requests, and nothing shared has to move again.

Shared by every group type:

* ``offsets`` (one group's committed offsets and KIP-211 expiry), ``txn_offsets`` (offsets pending in a
  transaction), ``offsets_schema`` (Kafka's record formats of ``__consumer_offsets``), ``offsets_topic`` (the topic
  itself and replaying one of its partitions);
* ``runtime``: the loaded groups, loading and dropping them with their ``__consumer_offsets`` partitions, timers,
  persisting their writes, deleting a group;
* ``offset_commits``: OffsetCommit, TxnOffsetCommit, OffsetFetch, OffsetDelete and expiry;
* ``coordinator``: the ``GroupCoordinator`` the broker runs, assembled from the parts, with what concerns every
  group whatever its type (start and stop, FindCoordinator, DescribeGroups, ListGroups, DeleteGroups).

Specific to the classic protocol:

* ``classic/``: the sans-I/O state machine (states, members, protocol selection, the rebalance, JoinGroup,
  SyncGroup, Heartbeat and LeaveGroup);
* ``classic_membership``: those requests at the coordinator (the asyncio side).

Specific to KIP-848 consumer groups:

* ``consumer/``: the sans-I/O state machine (``group`` with member epochs, target and current assignments;
  ``reconciliation`` revoking before assigning; ``rules`` Kafka's epoch and instance-id checks; ``deadlines``;
  ``cluster_topics``), the server-side assignors in ``consumer/assignors/``, and ``classic_view``
  (a consumer group as DescribeGroups shows it);
* ``consumer_membership``: ConsumerGroupHeartbeat and ConsumerGroupDescribe at the coordinator, a part of
  ``GroupCoordinator`` like ``classic_membership``; ``consumer_records`` (Kafka's record formats, key versions 3-8
  and 16) and ``consumer_persistence`` (a group's changes as those records, and the group rebuilt from them).

Between the two protocols (KIP-848's online migration, ``group.consumer.migration.policy``):

* ``conversions`` (a classic group into a consumer group and back), ``migration`` (when the coordinator converts,
  and the classic requests of classic members inside a consumer group) and ``consumer/classic_members`` (their
  sans-I/O part).

Specific to KIP-932 share groups (membership only):

* ``share/``: the sans-I/O state machine (``group`` with the group epoch, the target assignment and each member's
  share of it, no reconciliation since partitions are shared; ``member``, ``changes``, ``config``), and ``assignor``
  (Kafka's SimpleAssignor: every partition to at least one member, shared when members outnumber partitions);
* ``share_membership``: ShareGroupHeartbeat and ShareGroupDescribe at the coordinator; ``share_records`` (Kafka's
  record formats, key versions 10-14) and ``share_persistence`` (a group's changes as those records, and back).

The state of the share partitions (acquired records, delivery counts, the share-partition start offset) is not
group membership and belongs beside the partitions it describes, outside this package.
"""
