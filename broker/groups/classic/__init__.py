"""The classic group protocol's state machine (JoinGroup, SyncGroup, Heartbeat, LeaveGroup), sans-I/O.

Specific to the classic protocol, so it sits apart from what every group type shares (committed offsets, the
``__consumer_offsets`` topic, the asyncio coordinator in :mod:`broker.groups`): ``state`` (Kafka's classic group
states and the member record), ``protocols`` (choosing the protocol every member supports, reading consumer
subscriptions), ``rebalance`` (the member table and the generation lifecycle) and ``group`` (the requests that
drive it). Nothing here imports asyncio or the broker; the coordinator feeds it the wall clock.
"""
