"""Every Kafka API this broker serves, by api key, with the handler that serves it: the one place to read them.

An API is advertised in ApiVersions exactly when it is listed here (``wire.api_versions.advertised`` restricts the
version table to these keys). Adding an API means writing its handler module and adding its line below.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from broker.handlers import (
    acls,
    add_offsets_to_txn,
    add_partitions_to_txn,
    alter_partition_reassignments,
    api_versions,
    client_quotas,
    cluster,
    configs,
    delete_groups,
    delete_records,
    describe_groups,
    describe_log_dirs,
    describe_producers,
    describe_quorum,
    describe_transactions,
    elect_leaders,
    end_txn,
    fetch,
    find_coordinator,
    heartbeat,
    init_producer_id,
    join_group,
    leave_group,
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
    sasl,
    scram_credentials,
    sync_group,
    topics,
    txn_offset_commit,
    unregister_broker,
    write_txn_markers,
)
from broker.handlers.context import Handler

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
        60: cluster.handle_describe_cluster,  # DescribeCluster
        61: describe_producers.handle_describe_producers,  # DescribeProducers
        64: unregister_broker.handle_unregister_broker,  # UnregisterBroker
        65: describe_transactions.handle_describe_transactions,  # DescribeTransactions
        66: list_transactions.handle_list_transactions,  # ListTransactions
    }
)
