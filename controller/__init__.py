"""The controller role: the owner of the cluster metadata and its decisions, replicated by a Raft quorum.

``controller`` owns the state (the image, the metadata log and the stream metadata) and applies the pure decisions
of the ``decisions`` package, one module per subject (``brokers``, ``leadership``, ``topics``, ``configs``,
``acls``, ``scram``, ``reassignment``, ``controlled_shutdown``, ``wal_failover``, and ``balancing``, the
auto-balancer's plan); ``auto_balancer`` runs that plan periodically on the active controller, with the brokers'
load reports (``metadata.broker_load``); ``quorum`` runs the controller on the Raft core (the ``raft`` package);
``rpc`` serves the CONTROLLER listener and ``embedded_listener`` the single embedded node's; ``metadata_replica``
is the committed metadata replayed on a broker-only node (a Raft observer); ``shell`` and ``shell_sources`` are the
metadata shell; ``scram_bootstrap`` and ``feature_bootstrap`` a new cluster's first SCRAM users and feature levels;
``metrics`` the controller's Prometheus metrics. The auto-balancer's runner stays beside ``controller`` rather than
in a package with its plan: it drives a ``Controller``, which itself reads the plan's settings, and two sibling
packages may not import each other. What the broker shares with the controller (records, image, the
``ControllerClient`` API, the quorum client, the admin requests' translation) is in the ``metadata`` package below
both; this package never imports the broker.
"""
