"""The one translation of the admin APIs (CreateTopics, configs, ACLs, quotas, reassignments, ...) between Kafka's
wire and the ``ControllerClient``: a broker's handlers and the controller's CONTROLLER listener both call it.

- :mod:`metadata.admin.topic_wire`: requests and responses of topics, partitions, elections and reassignments,
  both ways;
- :mod:`metadata.admin.config_wire`: the same for config changes, with the per-item answer (``Outcome``);
- :mod:`metadata.admin.scram_wire`: the same for SCRAM credentials;
- :mod:`metadata.admin.acl_wire` and :mod:`metadata.admin.quota_wire`: the same for ACLs and client quotas;
- :mod:`metadata.admin.requests`: one admin request served end to end (authorized items, the mutation quota).
"""
