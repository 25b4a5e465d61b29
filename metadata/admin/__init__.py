"""The one translation of the admin APIs (CreateTopics, configs, ACLs, quotas, reassignments, ...) between Kafka's
wire and the ``ControllerClient``: a broker's handlers and the controller's CONTROLLER listener both call it.

- :mod:`metadata.admin.wire`: requests and responses of topics, configs, partitions and elections, both ways;
- :mod:`metadata.admin.acl_wire` and :mod:`metadata.admin.quota_wire`: the same for ACLs and client quotas;
- :mod:`metadata.admin.requests`: one admin request served end to end (authorized items, the mutation quota).
"""
