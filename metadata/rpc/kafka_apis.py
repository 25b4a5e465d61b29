"""The Kafka-protocol RPCs the CONTROLLER listener serves: their API keys and versions, so the voters' dispatcher,
the brokers' quorum client and the Raft codec agree on one table.

Kafka-protocol RPCs (kio entities, ``wire.codec`` encodes them; versions in :data:`KAFKA_API_VERSIONS`):

==================  ====  ========  ===================================================================
RPC                 key   versions  served by
==================  ====  ========  ===================================================================
Fetch               1     12        Raft: voters and observers (brokers) pull ``__cluster_metadata``-0;
                                    records are Kafka v2 record batches, one Raft entry per record, the
                                    batch's partition leader epoch = the entries' epoch, LEADER_CHANGE
                                    entries as control batches (see ``metadata.rpc.raft_codec``)
ApiVersions         18    0-4       the keys and versions of this table, and the finalized features
CreateTopics        19    2-7       active controller (forwarded by brokers)
DeleteTopics        20    1-6       active controller
AlterConfigs        33    0-2       active controller
CreatePartitions    37    0-3       active controller
ElectLeaders        43    0-2       active controller (preferred and unclean elections,
                                    ``controller.decisions.leadership``)
IncrementalAlter..  44    0-1       active controller
AlterPartitionRe..  45    0         active controller (DESIGN §9: the reassignment is the controller's)
AlterUserScramCr..  51    0         active controller (SCRAM credentials are metadata records)
CreateAcls          30    1-3       active controller (ACL bindings are metadata records)
DeleteAcls          31    1-3       active controller
AlterClientQuotas   49    0-1       active controller (client quotas are metadata records)
UpdateFeatures      57    0-2       active controller (finalized feature levels are metadata records)
Vote                52    2         Raft (KIP-996 pre-vote)
BeginQuorumEpoch    53    1         Raft
EndQuorumEpoch      54    1         Raft
DescribeQuorum      55    0-2       the leader answers with voters, observers, epoch, high watermark;
                                    a follower answers NOT_LEADER_OR_FOLLOWER (kafka-metadata-quorum)
FetchSnapshot       59    1         Raft: snapshot download by a lagging voter or observer
BrokerRegistration  62    0-4       active controller: returns the broker epoch
BrokerHeartbeat     63    0-1       active controller: session keep-alive, fencing and unfencing, controlled
                                    shutdown (``want_shut_down``: the broker's partitions move away first)
UnregisterBroker    64    0         active controller: removes a stopped broker (forwarded by brokers)
DescribeCluster     60    0-1       any voter: endpoint type 2 (KIP-919) lists the voters and the active
                                    controller (how ``kafka-metadata-quorum --bootstrap-controller`` finds
                                    the leader); type 1 lists the live brokers of this voter's image
AllocateProducerIds 67    0         active controller: a block of producer ids for the calling broker,
                                    committed as a ProducerIdsRecord before the answer
AddRaftVoter        80    0-1       the Raft leader (KIP-853): one VOTERS entry, answered once committed
RemoveRaftVoter     81    0         the Raft leader (KIP-853); NOT_LEADER_OR_FOLLOWER elsewhere
SaslHandshake       17    1         a SASL CONTROLLER listener's authentication (``controller.rpc.sasl``);
SaslAuthenticate    36    0-2       before it, only ApiVersions is served; elsewhere ILLEGAL_SASL_STATE
==================  ====  ========  ===================================================================

A Kafka-protocol request that reaches a controller which is not the active one is answered with the response's
``NOT_CONTROLLER`` error code (41), as KRaft does; the client finds the leader with DescribeQuorum (or from the
``leader_id`` of Fjord's own RPCs) and retries there.
"""

from __future__ import annotations

from typing import Final

FETCH: Final = 1
API_VERSIONS: Final = 18
CREATE_TOPICS: Final = 19
DELETE_TOPICS: Final = 20
ALTER_CONFIGS: Final = 33
CREATE_PARTITIONS: Final = 37
ELECT_LEADERS: Final = 43
INCREMENTAL_ALTER_CONFIGS: Final = 44
ALTER_PARTITION_REASSIGNMENTS: Final = 45
ALTER_USER_SCRAM_CREDENTIALS: Final = 51
CREATE_ACLS: Final = 30
DELETE_ACLS: Final = 31
ALTER_CLIENT_QUOTAS: Final = 49
UPDATE_FEATURES: Final = 57
VOTE: Final = 52
BEGIN_QUORUM_EPOCH: Final = 53
END_QUORUM_EPOCH: Final = 54
DESCRIBE_QUORUM: Final = 55
FETCH_SNAPSHOT: Final = 59
BROKER_REGISTRATION: Final = 62
BROKER_HEARTBEAT: Final = 63
UNREGISTER_BROKER: Final = 64
DESCRIBE_CLUSTER: Final = 60
ALLOCATE_PRODUCER_IDS: Final = 67
SASL_HANDSHAKE: Final = 17
SASL_AUTHENTICATE: Final = 36
ADD_RAFT_VOTER: Final = 80
REMOVE_RAFT_VOTER: Final = 81
UPDATE_RAFT_VOTER: Final = 82

METADATA_TOPIC: Final = "__cluster_metadata"
METADATA_PARTITION: Final = 0

KAFKA_API_VERSIONS: Final[dict[int, tuple[int, int]]] = {
    FETCH: (12, 12),
    API_VERSIONS: (0, 4),
    CREATE_TOPICS: (2, 7),
    DELETE_TOPICS: (1, 6),
    ALTER_CONFIGS: (0, 2),
    CREATE_PARTITIONS: (0, 3),
    ELECT_LEADERS: (0, 2),
    INCREMENTAL_ALTER_CONFIGS: (0, 1),
    ALTER_PARTITION_REASSIGNMENTS: (0, 0),
    ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
    CREATE_ACLS: (1, 3),
    DELETE_ACLS: (1, 3),
    ALTER_CLIENT_QUOTAS: (0, 1),
    UPDATE_FEATURES: (0, 2),
    VOTE: (2, 2),
    BEGIN_QUORUM_EPOCH: (1, 1),
    END_QUORUM_EPOCH: (1, 1),
    DESCRIBE_QUORUM: (0, 2),
    FETCH_SNAPSHOT: (1, 1),
    BROKER_REGISTRATION: (0, 4),
    BROKER_HEARTBEAT: (0, 1),
    UNREGISTER_BROKER: (0, 0),
    DESCRIBE_CLUSTER: (0, 1),
    ALLOCATE_PRODUCER_IDS: (0, 0),
    SASL_HANDSHAKE: (1, 1),
    SASL_AUTHENTICATE: (0, 2),
    ADD_RAFT_VOTER: (0, 1),
    REMOVE_RAFT_VOTER: (0, 0),
    UPDATE_RAFT_VOTER: (0, 0),
}
"""(min, max) version of every Kafka-protocol RPC the CONTROLLER listener serves."""
