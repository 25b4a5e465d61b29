"""Raft for the controller quorum, built the KRaft way: pull-based replication, pre-vote, check-quorum, snapshots.

`core.RaftNode` is the sans-I/O state machine; `storage` persists it; `driver` runs it on asyncio.
"""
