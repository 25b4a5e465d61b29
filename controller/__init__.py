"""The controller role: the owner of the cluster metadata and its decisions, replicated by a Raft quorum.

``controller`` owns the state and applies the pure decisions of ``brokers``, ``leadership``, ``topics``,
``config_control``, ``reassignment``, ``acl_control`` and ``scram_control``; ``quorum`` runs it on the Raft core
(the ``raft`` package); ``rpc`` serves the CONTROLLER listener; ``balancer`` and ``auto_balancer`` move partitions
by load; ``metadata_replica`` is the committed metadata replayed on a broker-only node (a Raft observer).
What the broker shares with the controller (records, image, the ``ControllerClient`` API, the quorum client, the
admin requests' translation) is in the ``metadata`` package below both; this package never imports the broker.
"""
