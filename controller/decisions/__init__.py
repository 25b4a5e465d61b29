"""The controller's decisions, sans-I/O: one module of pure functions per subject, named by it.

As Kafka splits its QuorumController into control managers, each module reads the image (and what the controller
fetched for it) and returns the records to append, or the error the request is refused with; none holds state,
does I/O or logs. ``controller.controller.Controller`` holds the lock, does the reads, appends and logs, and
``controller.auto_balancer`` runs ``balancing`` periodically on the active controller.

- ``brokers``: registration, fencing, unfencing and the end of a WAL failover;
- ``leadership``: who leads each partition, and ElectLeaders;
- ``topics``: CreateTopics, DeleteTopics, CreatePartitions and replica placement;
- ``configs``: AlterConfigs and IncrementalAlterConfigs;
- ``acls``: CreateAcls and DeleteAcls;
- ``scram``: AlterUserScramCredentials;
- ``reassignment``: AlterPartitionReassignments and the moves it starts and completes;
- ``controlled_shutdown``: a broker's controlled shutdown and its unregistration;
- ``wal_failover``: which live broker replays a dead broker's S3 WAL;
- ``balancing``: the auto-balancer's plan, the moves that even out leader counts and load.
"""
