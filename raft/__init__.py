"""Raft for the controller quorum, built the KRaft way: pull-based replication, pre-vote, check-quorum, snapshots.

`core.RaftNode` is the sans-I/O state machine; `storage` persists it; `driver` runs it on asyncio. It depends on
nothing of Fjord's but storage's durable files: the controller quorum and a broker's observer build on it.
"""
