"""Share groups (KIP-932): the share partitions, their durable state, and the operator's view of them."""
