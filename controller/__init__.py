"""Cluster metadata: topics, partitions, brokers, streams and objects, replicated by a Raft quorum.

``api`` is what the broker codes against; ``controller`` owns the state and applies the pure decisions of
``brokers``, ``leadership``, ``topics``, ``config_control`` and ``reassignment``; ``raft`` and ``quorum`` replicate
it; ``rpc`` serves the CONTROLLER listener and ``remote`` is a broker's client of it; ``admin_wire`` and
``admin_requests`` are the one translation of the admin APIs, shared by brokers and controllers.
"""
