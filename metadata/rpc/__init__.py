"""The CONTROLLER listener's messages, shared by the voters that serve them and the clients that send them:
:mod:`metadata.rpc.messages` (Fjord's controller RPCs and the metadata-record framing), :mod:`metadata.rpc.connection`
(one client connection), :mod:`metadata.rpc.raft_codec` (KRaft's Vote, BeginQuorumEpoch, Fetch and DescribeQuorum
as Kafka messages).
"""
