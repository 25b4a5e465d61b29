"""Every Kafka API this broker serves, by api key, with the handler that serves it and the ACL check (guard) that
runs before it: the one place to read them, and which operation on which resource each request needs (Kafka's
KafkaApis checks).

An API is advertised in ApiVersions exactly when it is listed in :data:`HANDLERS` (``wire.api_versions.advertised``
restricts the version table to these keys). Adding an API means writing its handler module, and its guard beside
the handler, and adding its lines below. The guards' shared parts (refusing whole, splitting per item) are
``broker.handlers.guards``'; Metadata and DescribeTopicPartitions (hiding topics, auto-creation) and the
authorized-operations fields are checked in their handlers, so those APIs have no guard here.

This module imports the handler modules, never the other way, so a handler module may import the guards' helpers
without an import circle.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

from broker.handlers import (
    acls,
    add_offsets_to_txn,
    add_partitions_to_txn,
    alter_partition_reassignments,
    api_versions,
    client_quotas,
    cluster,
    configs,
    consumer_group_describe,
    consumer_group_heartbeat,
    delegation_tokens,
    delete_groups,
    delete_records,
    describe_groups,
    describe_log_dirs,
    describe_producers,
    describe_quorum,
    describe_topic_partitions,
    describe_transactions,
    elect_leaders,
    end_txn,
    fetch,
    find_coordinator,
    group_common,
    heartbeat,
    init_producer_id,
    join_group,
    leave_group,
    list_config_resources,
    list_groups,
    list_offsets,
    list_partition_reassignments,
    list_transactions,
    metadata,
    offset_commit,
    offset_delete,
    offset_fetch,
    offset_for_leader_epoch,
    produce,
    raft_voters,
    sasl,
    scram_credentials,
    share_acknowledge,
    share_common,
    share_fetch,
    share_group_describe,
    share_group_heartbeat,
    share_group_offsets,
    share_group_state,
    sync_group,
    telemetry,
    topics,
    txn_offset_commit,
    unregister_broker,
    update_features,
    write_txn_markers,
)
from broker.handlers.context import Handler, RequestContext
from broker.handlers.guards import Guard

HANDLERS: Final[Mapping[int, Handler]] = MappingProxyType(
    {
        0: produce.handle_produce,  # Produce
        1: fetch.handle_fetch,  # Fetch
        2: list_offsets.handle_list_offsets,  # ListOffsets
        3: metadata.handle_metadata,  # Metadata
        8: offset_commit.handle_offset_commit,  # OffsetCommit
        9: offset_fetch.handle_offset_fetch,  # OffsetFetch
        10: find_coordinator.handle_find_coordinator,  # FindCoordinator
        11: join_group.handle_join_group,  # JoinGroup
        12: heartbeat.handle_heartbeat,  # Heartbeat
        13: leave_group.handle_leave_group,  # LeaveGroup
        14: sync_group.handle_sync_group,  # SyncGroup
        15: describe_groups.handle_describe_groups,  # DescribeGroups
        16: list_groups.handle_list_groups,  # ListGroups
        17: sasl.handle_sasl_handshake,  # SaslHandshake
        18: api_versions.handle_api_versions,  # ApiVersions
        19: topics.handle_create_topics,  # CreateTopics
        20: topics.handle_delete_topics,  # DeleteTopics
        21: delete_records.handle_delete_records,  # DeleteRecords
        22: init_producer_id.handle_init_producer_id,  # InitProducerId
        23: offset_for_leader_epoch.handle_offset_for_leader_epoch,  # OffsetForLeaderEpoch
        24: add_partitions_to_txn.handle_add_partitions_to_txn,  # AddPartitionsToTxn
        25: add_offsets_to_txn.handle_add_offsets_to_txn,  # AddOffsetsToTxn
        26: end_txn.handle_end_txn,  # EndTxn
        27: write_txn_markers.handle_write_txn_markers,  # WriteTxnMarkers
        28: txn_offset_commit.handle_txn_offset_commit,  # TxnOffsetCommit
        29: acls.handle_describe_acls,  # DescribeAcls
        30: acls.handle_create_acls,  # CreateAcls
        31: acls.handle_delete_acls,  # DeleteAcls
        32: configs.handle_describe_configs,  # DescribeConfigs
        33: configs.handle_alter_configs,  # AlterConfigs
        35: describe_log_dirs.handle_describe_log_dirs,  # DescribeLogDirs
        36: sasl.handle_sasl_authenticate,  # SaslAuthenticate
        37: topics.handle_create_partitions,  # CreatePartitions
        38: delegation_tokens.handle_create_delegation_token,  # CreateDelegationToken
        39: delegation_tokens.handle_renew_delegation_token,  # RenewDelegationToken
        40: delegation_tokens.handle_expire_delegation_token,  # ExpireDelegationToken
        41: delegation_tokens.handle_describe_delegation_token,  # DescribeDelegationToken
        42: delete_groups.handle_delete_groups,  # DeleteGroups
        43: elect_leaders.handle_elect_leaders,  # ElectLeaders
        44: configs.handle_incremental_alter_configs,  # IncrementalAlterConfigs
        45: alter_partition_reassignments.handle_alter_partition_reassignments,  # AlterPartitionReassignments
        46: list_partition_reassignments.handle_list_partition_reassignments,  # ListPartitionReassignments
        47: offset_delete.handle_offset_delete,  # OffsetDelete
        48: client_quotas.handle_describe_client_quotas,  # DescribeClientQuotas
        49: client_quotas.handle_alter_client_quotas,  # AlterClientQuotas
        50: scram_credentials.handle_describe_user_scram_credentials,  # DescribeUserScramCredentials
        51: scram_credentials.handle_alter_user_scram_credentials,  # AlterUserScramCredentials
        55: describe_quorum.handle_describe_quorum,  # DescribeQuorum
        57: update_features.handle_update_features,  # UpdateFeatures
        60: cluster.handle_describe_cluster,  # DescribeCluster
        61: describe_producers.handle_describe_producers,  # DescribeProducers
        64: unregister_broker.handle_unregister_broker,  # UnregisterBroker
        65: describe_transactions.handle_describe_transactions,  # DescribeTransactions
        66: list_transactions.handle_list_transactions,  # ListTransactions
        68: consumer_group_heartbeat.handle_consumer_group_heartbeat,  # ConsumerGroupHeartbeat
        69: consumer_group_describe.handle_consumer_group_describe,  # ConsumerGroupDescribe
        71: telemetry.handle_get_telemetry_subscriptions,  # GetTelemetrySubscriptions
        72: telemetry.handle_push_telemetry,  # PushTelemetry
        74: list_config_resources.handle_list_config_resources,  # ListConfigResources
        75: describe_topic_partitions.handle_describe_topic_partitions,  # DescribeTopicPartitions
        76: share_group_heartbeat.handle_share_group_heartbeat,  # ShareGroupHeartbeat
        77: share_group_describe.handle_share_group_describe,  # ShareGroupDescribe
        78: share_fetch.handle_share_fetch,  # ShareFetch
        79: share_acknowledge.handle_share_acknowledge,  # ShareAcknowledge
        80: raft_voters.handle_raft_voter_change,  # AddRaftVoter (forwarded to the quorum's leader)
        81: raft_voters.handle_raft_voter_change,  # RemoveRaftVoter (forwarded to the quorum's leader)
        83: share_group_state.handle_initialize_share_group_state,  # InitializeShareGroupState (between brokers)
        86: share_group_state.handle_delete_share_group_state,  # DeleteShareGroupState (between brokers)
        87: share_group_state.handle_read_share_group_state_summary,  # ReadShareGroupStateSummary (between brokers)
        90: share_group_offsets.handle_describe_share_group_offsets,  # DescribeShareGroupOffsets
        91: share_group_offsets.handle_alter_share_group_offsets,  # AlterShareGroupOffsets
        92: share_group_offsets.handle_delete_share_group_offsets,  # DeleteShareGroupOffsets
    }
)

#: Each API's ACL check, applied by :func:`serve_authorized` when ``authorizer.class.name`` is set; an API not listed
#: here has none (or, like Metadata, checks in its handler).
GUARDS: Final[Mapping[int, Guard]] = MappingProxyType(
    {
        0: produce.authorize_produce,  # Produce: TOPIC WRITE; TRANSACTIONAL_ID WRITE when transactional
        # Fetch: TOPIC READ per partition in the handler, so a fetch session keeps the refused ones (no follower
        # fetches: Fjord brokers do not replicate)
        2: list_offsets.authorize_list_offsets,  # ListOffsets: TOPIC DESCRIBE
        8: offset_commit.authorize_offset_commit,  # OffsetCommit: GROUP READ, then TOPIC READ
        9: offset_fetch.authorize_offset_fetch,  # OffsetFetch: GROUP DESCRIBE
        10: find_coordinator.authorize_find_coordinator,  # FindCoordinator: GROUP / TRANSACTIONAL_ID DESCRIBE
        11: group_common.authorize_group_member,  # JoinGroup: GROUP READ
        12: group_common.authorize_group_member,  # Heartbeat: GROUP READ
        13: group_common.authorize_group_member,  # LeaveGroup: GROUP READ
        14: group_common.authorize_group_member,  # SyncGroup: GROUP READ
        15: describe_groups.authorize_describe_groups,  # DescribeGroups: GROUP DESCRIBE
        # ListGroups: only the groups the principal may DESCRIBE (all of them with CLUSTER DESCRIBE)
        16: list_groups.authorize_list_groups,
        19: topics.authorize_create_topics,  # CreateTopics: CLUSTER CREATE or TOPIC CREATE
        20: topics.authorize_delete_topics,  # DeleteTopics: TOPIC DELETE
        21: delete_records.authorize_delete_records,  # DeleteRecords: TOPIC DELETE
        # InitProducerId: TRANSACTIONAL_ID WRITE, or CLUSTER IDEMPOTENT_WRITE (or WRITE on some topic)
        22: init_producer_id.authorize_init_producer_id,
        23: offset_for_leader_epoch.authorize_offset_for_leader_epoch,  # OffsetForLeaderEpoch: TOPIC DESCRIBE
        # AddPartitionsToTxn: TRANSACTIONAL_ID WRITE and TOPIC WRITE (v4, between brokers: CLUSTER CLUSTER_ACTION)
        24: add_partitions_to_txn.authorize_add_partitions_to_txn,
        25: add_offsets_to_txn.authorize_add_offsets_to_txn,  # AddOffsetsToTxn: TRANSACTIONAL_ID WRITE and GROUP READ
        26: end_txn.authorize_end_txn,  # EndTxn: TRANSACTIONAL_ID WRITE
        27: write_txn_markers.authorize_write_txn_markers,  # WriteTxnMarkers: CLUSTER CLUSTER_ACTION
        # TxnOffsetCommit: TRANSACTIONAL_ID WRITE, GROUP READ, TOPIC READ
        28: txn_offset_commit.authorize_txn_offset_commit,
        29: acls.authorize_describe_acls,  # DescribeAcls: CLUSTER DESCRIBE
        30: acls.authorize_create_acls,  # CreateAcls: CLUSTER ALTER
        31: acls.authorize_delete_acls,  # DeleteAcls: CLUSTER ALTER
        32: configs.authorize_describe_configs,  # DescribeConfigs: TOPIC or CLUSTER DESCRIBE_CONFIGS
        33: configs.authorize_alter_configs,  # AlterConfigs: TOPIC or CLUSTER ALTER_CONFIGS
        35: describe_log_dirs.authorize_describe_log_dirs,  # DescribeLogDirs: CLUSTER DESCRIBE
        37: topics.authorize_create_partitions,  # CreatePartitions: TOPIC ALTER
        # Create/Renew/Expire/DescribeDelegationToken: checked in their handler (USER CREATE_TOKENS for another
        # owner; DELEGATION_TOKEN DESCRIBE or USER DESCRIBE_TOKENS to see others' tokens), as Kafka's KafkaApis
        42: delete_groups.authorize_delete_groups,  # DeleteGroups: GROUP DELETE
        43: elect_leaders.authorize_elect_leaders,  # ElectLeaders: CLUSTER ALTER
        44: configs.authorize_incremental_alter_configs,  # IncrementalAlterConfigs: TOPIC or CLUSTER ALTER_CONFIGS
        # AlterPartitionReassignments: CLUSTER ALTER
        45: alter_partition_reassignments.authorize_alter_partition_reassignments,
        # ListPartitionReassignments: CLUSTER DESCRIBE
        46: list_partition_reassignments.authorize_list_partition_reassignments,
        47: offset_delete.authorize_offset_delete,  # OffsetDelete: GROUP DELETE, then TOPIC READ
        48: client_quotas.authorize_describe_client_quotas,  # DescribeClientQuotas: CLUSTER DESCRIBE_CONFIGS
        49: client_quotas.authorize_alter_client_quotas,  # AlterClientQuotas: CLUSTER ALTER_CONFIGS
        # DescribeUserScramCredentials: CLUSTER DESCRIBE
        50: scram_credentials.authorize_describe_user_scram_credentials,
        51: scram_credentials.authorize_alter_user_scram_credentials,  # AlterUserScramCredentials: CLUSTER ALTER
        55: describe_quorum.authorize_describe_quorum,  # DescribeQuorum: CLUSTER DESCRIBE
        57: update_features.authorize_update_features,  # UpdateFeatures: CLUSTER ALTER
        61: describe_producers.authorize_describe_producers,  # DescribeProducers: TOPIC READ
        64: unregister_broker.authorize_unregister_broker,  # UnregisterBroker: CLUSTER ALTER
        65: describe_transactions.authorize_describe_transactions,  # DescribeTransactions: TRANSACTIONAL_ID DESCRIBE
        66: list_transactions.authorize_list_transactions,  # ListTransactions: only the ids the principal may DESCRIBE
        # ConsumerGroupHeartbeat: GROUP READ, TOPIC DESCRIBE on the subscribed names
        68: consumer_group_heartbeat.authorize_consumer_group_heartbeat,
        69: consumer_group_describe.authorize_consumer_group_describe,  # ConsumerGroupDescribe: GROUP, TOPIC DESCRIBE
        # GetTelemetrySubscriptions, PushTelemetry: no ACL (as Kafka: a client pushes its own metrics)
        74: list_config_resources.authorize_list_config_resources,  # ListConfigResources: CLUSTER DESCRIBE_CONFIGS
        76: share_group_heartbeat.authorize_share_group_heartbeat,  # ShareGroupHeartbeat: GROUP READ, TOPIC DESCRIBE
        77: share_group_describe.authorize_share_group_describe,  # ShareGroupDescribe: GROUP, assigned TOPIC DESCRIBE
        # ShareFetch, ShareAcknowledge: GROUP READ (whole request), then TOPIC READ per partition in the handler
        78: share_common.authorize_share_group,
        79: share_common.authorize_share_group,
        80: raft_voters.authorize_raft_voter_change,  # AddRaftVoter: CLUSTER ALTER
        81: raft_voters.authorize_raft_voter_change,  # RemoveRaftVoter: CLUSTER ALTER
        83: share_group_state.authorize_share_group_state,  # InitializeShareGroupState: CLUSTER CLUSTER_ACTION
        86: share_group_state.authorize_share_group_state,  # DeleteShareGroupState: CLUSTER CLUSTER_ACTION
        87: share_group_state.authorize_share_group_state,  # ReadShareGroupStateSummary: CLUSTER CLUSTER_ACTION
        # DescribeShareGroupOffsets: GROUP DESCRIBE, then TOPIC DESCRIBE
        90: share_group_offsets.authorize_describe_share_group_offsets,
        91: share_group_offsets.authorize_alter_share_group_offsets,  # AlterShareGroupOffsets: GROUP READ, TOPIC READ
        # DeleteShareGroupOffsets: GROUP DELETE, then TOPIC READ
        92: share_group_offsets.authorize_delete_share_group_offsets,
    }
)


async def serve_authorized(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    """Answers ``request`` through ``handler`` with the API's ACL checks applied (none when authorization is off)."""
    guard = GUARDS.get(ctx.api_key)
    if guard is None or not ctx.authorizer.enabled:
        return await handler(ctx, request)
    return await guard(ctx, request, handler)
