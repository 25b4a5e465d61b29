"""The CONTROLLER listener's messages, shared by the voters that serve them and the clients that send them.

Every RPC uses Kafka's framing (``length i32`` then a request header and a body; responses carry the request's
correlation id); a connection may pipeline requests and responses come back in request order.
:mod:`metadata.rpc.kafka_apis` (the Kafka-protocol RPCs served and their versions), :mod:`metadata.rpc.stream_rpcs`
(Fjord's own RPCs: the storage engine's metadata calls as requests), :mod:`metadata.rpc.stream_codec` (their frames),
:mod:`metadata.rpc.error_codes` (their error codes and the storage errors they stand for),
:mod:`metadata.rpc.connection` (one client connection), :mod:`metadata.rpc.raft_codec` (KRaft's Vote,
BeginQuorumEpoch, Fetch and DescribeQuorum as Kafka messages). The metadata records inside these messages are framed
by :mod:`metadata.log`.
"""
