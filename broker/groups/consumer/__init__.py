"""KIP-848 consumer groups: the sans-I/O state machine of the new consumer group protocol.

The coordinator, not a member, computes the assignment: members send their subscriptions in
ConsumerGroupHeartbeat, a server-side assignor (``assignors/``) computes the group's *target assignment* at a new
group epoch, and each member reconciles towards its share of it one heartbeat at a time (``reconciliation``): a
partition is revoked from its owner before another member is given it, so no partition is ever owned twice.
"""
