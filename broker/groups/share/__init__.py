"""KIP-932 share groups: the sans-I/O state machine of share group membership.

A share group is a KIP-848 group without reconciliation: members send their subscriptions in ShareGroupHeartbeat,
the coordinator's assignor (``assignor``, Kafka's SimpleAssignor) computes the *target assignment* at a new group
epoch, and every member takes its share of it at once: nothing is revoked first, because a partition of a share
group is consumed by several members together (each record handed to one of them under a lock, which the share
partition keeps, not the group). Members leave, or their session expires, and the group epoch moves again.
"""
