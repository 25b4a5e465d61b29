"""Turns one request frame from the CONTROLLER listener into one response frame, against a `QuorumController`.

Raft requests go to the Raft core through the network transport and are answered with the core's reply.
DescribeQuorum is answered from the driver. Broker registration and heartbeats, the admin APIs brokers forward and
Fjord's own stream RPCs need the active controller; elsewhere they are answered NOT_CONTROLLER.

A *read-only* dispatcher (the embedded single node's CONTROLLER listener, ``controller.embedded_listener``) answers
only what reads the stream metadata: ApiVersions, DescribeQuorum, DescribeCluster and the stream RPCs that change
nothing (GetKV, GetStreams, GetObjects, ...). Its controller's writes go through its own broker, which authorizes
them; a write arriving on a listener that checks no principal would bypass that, so the mutating stream RPCs (and
DescribeMetadata, the whole metadata) are answered INVALID_REQUEST and every other Kafka API is not served (the
connection closes, as for any unknown API).

With an authorizer configured, every CONTROLLER listener (PLAINTEXT, SSL, SASL, and the read-only one) checks the
right each request asks of its caller, as Kafka's controller does (``controller.rpc.authorization``): CLUSTER_ACTION
for what nodes send (Raft, registration, heartbeats, producer ids, the stream RPCs), Kafka's own right for the
admin APIs and DescribeQuorum, a super user for DescribeMetadata; the admin APIs Kafka authorizes item by item
(CreateTopics, DeleteTopics, CreatePartitions, AlterConfigs, IncrementalAlterConfigs) answer each refused topic or
resource with its own error and send the others on (``controller.rpc.item_authorization``). Until the voter has
loaded the metadata up to the quorum's commit offset, only super users are served. Only ApiVersions and the SASL
exchange come before that check. A refused Kafka request is answered CLUSTER_AUTHORIZATION_FAILED (on each item of
an admin request, as Kafka's error responses are), and the connection stays open; a refused stream RPC closes it.

The admin APIs are read and answered through ``metadata.admin``'s translations, the ones the broker's handlers use
too, so a request answers the same item for item whether a client sent it to a broker or a broker forwarded it here.
Only the party asked differs: here it is the active `Controller`, and a voter that is not active answers
NOT_CONTROLLER on every topic, resource or partition, which the forwarding broker reads as "try the next voter".

The dispatcher sees the voter through :class:`ServedQuorum`, the few things it asks of it; the quorum module builds
the server and hands itself in, so the dependency runs one way (quorum → rpc).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from kio.schema.errors import ErrorCode

from controller.controller import Controller
from controller.rpc import item_authorization, sasl
from controller.rpc.authorization import PER_ITEM_APIS, ControllerAuthorizer, kafka_operation
from controller.rpc.sasl import SaslGate
from metadata.admin import config_wire, topic_wire
from metadata.admin import requests as admin_requests
from metadata.broker_load import BrokerLoad, PartitionLoad
from metadata.controller_api import ConfigResource
from metadata.errors import ControllerError, NodeFencedError, NotControllerError
from metadata.image import MetadataImage
from metadata.rpc import kafka_apis, stream_rpcs
from metadata.rpc.error_codes import RpcError, error_code_for
from metadata.rpc.raft_codec import (
    RAFT_API_KEYS,
    RaftCodecError,
    describe_quorum_response,
    request_from_kio,
    response_to_kio,
)
from metadata.rpc.stream_codec import StreamCodecError, api_key_of, decode_stream_request, encode_stream_response
from raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    DescribeQuorumResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    Errors,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    LeaderIdAndEpoch,
    RaftRequest,
    RaftResponse,
    VoteRequest,
    VoteResponse,
)
from settings.endpoint import Endpoint
from settings.server import ServerConfig
from storage.errors import StorageError
from storage.metadata.api import NodeIdentity, StreamMetadata
from wire import codec, schema
from wire.api_versions import api_name, feature_fields
from wire.codec import ProtocolError
from wire.dispatch import ConnectionClosing
from wire.metrics import ServerMetrics

if TYPE_CHECKING:
    from wire.dispatch import Peer

logger = logging.getLogger(__name__)

_SECURITY_PROTOCOLS = {0: "PLAINTEXT", 1: "SSL", 2: "SASL_PLAINTEXT", 3: "SASL_SSL"}
#: What any connection may send before its principal is checked: the version table and the SASL exchange.
_BEFORE_PRINCIPAL = frozenset({kafka_apis.API_VERSIONS, kafka_apis.SASL_HANDSHAKE, kafka_apis.SASL_AUTHENTICATE})

#: The admin APIs brokers forward (:meth:`ControllerDispatcher._admin`), answered item by item.
_ADMIN_APIS = frozenset(
    {
        kafka_apis.CREATE_TOPICS,
        kafka_apis.DELETE_TOPICS,
        kafka_apis.CREATE_PARTITIONS,
        kafka_apis.ALTER_CONFIGS,
        kafka_apis.INCREMENTAL_ALTER_CONFIGS,
        kafka_apis.ELECT_LEADERS,
        kafka_apis.ALTER_PARTITION_REASSIGNMENTS,
        kafka_apis.ALTER_USER_SCRAM_CREDENTIALS,
        kafka_apis.CREATE_ACLS,
        kafka_apis.DELETE_ACLS,
        kafka_apis.ALTER_CLIENT_QUOTAS,
        kafka_apis.UPDATE_FEATURES,
    }
)

#: The Kafka APIs a read-only dispatcher serves (they read the quorum, never write; SASL authenticates first).
_READ_ONLY_KAFKA_APIS = (
    kafka_apis.API_VERSIONS,
    kafka_apis.SASL_HANDSHAKE,
    kafka_apis.SASL_AUTHENTICATE,
    kafka_apis.DESCRIBE_QUORUM,
    kafka_apis.DESCRIBE_CLUSTER,
)


class RaftMember(Protocol):
    """What DescribeQuorum reads of the Raft member (``raft.driver.RaftDriver``)."""

    def describe(self) -> DescribeQuorumResponse: ...


class RaftInbox(Protocol):
    """Where Raft requests from peers go (``controller.rpc.transport.NetworkTransport``)."""

    async def deliver_request(self, sender: int, request: RaftRequest, timeout_s: float) -> RaftResponse | None: ...


class ServedQuorum(Protocol):
    """What the CONTROLLER listener asks of its voter (``controller.quorum.QuorumController``)."""

    @property
    def config(self) -> ServerConfig: ...

    @property
    def node_id(self) -> int: ...

    @property
    def cluster_id(self) -> str: ...

    @property
    def voters(self) -> Mapping[int, tuple[str, int]]: ...

    @property
    def transport(self) -> RaftInbox:
        """Where Raft requests from peers are delivered to the local Raft core."""
        ...

    @property
    def driver(self) -> RaftMember:
        """The Raft member, for DescribeQuorum."""
        ...

    @property
    def leader_id(self) -> int | None: ...

    @property
    def image(self) -> MetadataImage: ...

    def metadata_loaded(self) -> bool:
        """Whether the voter has applied the metadata up to the commit offset it learned from the quorum (until
        then, with an authorizer, only super users are served: ``controller.rpc.authorization``)."""
        ...

    def active_controller(self, what: str) -> Controller:
        """The `Controller` to write with; NotControllerError (naming ``what``) unless this voter is active."""
        ...

    def check_node(self, node: NodeIdentity, what: str) -> None: ...

    def dump(self) -> stream_rpcs.MetadataDump: ...

    async def register_broker(self, node_id: int, listeners: Sequence[Endpoint], rack: str | None) -> int: ...

    async def heartbeat(
        self, node_id: int, epoch: int, metadata_offset: int, *, want_fence: bool, want_shutdown: bool
    ) -> tuple[bool, bool, bool]: ...

    def record_load(self, node: NodeIdentity, partitions: Sequence[PartitionLoad], interval_ms: int = 0) -> None:
        """Keeps a broker's load report (ReportBrokerLoad) for the auto-balancer; in memory, active voter only."""
        ...

    def broker_loads(self) -> list[BrokerLoad]:
        """The reports kept, of the brokers' current registrations (DescribeBrokerLoad)."""
        ...


class ControllerProtocolError(ProtocolError):
    """The request cannot be answered at all; the server closes the connection it came on."""


class ControllerDispatcher:
    """What `wire.listener.KafkaListener` needs from a dispatcher (``dispatch`` and ``metrics``)."""

    def __init__(
        self,
        quorum: ServedQuorum,
        metrics: ServerMetrics | None = None,
        *,
        read_only: bool = False,
        sasl: SaslGate | None = None,
        authorizer: ControllerAuthorizer | None = None,
    ) -> None:
        """``sasl``: the listener is SASL_PLAINTEXT or SASL_SSL; every connection authenticates first.
        ``authorizer``: one is configured; it checks the caller of every request but ApiVersions and the SASL
        exchange (see :meth:`_refusal`)."""
        self.quorum = quorum
        self.read_only = read_only
        self.sasl = sasl
        self.authorizer = authorizer
        self._versions: Mapping[int, tuple[int, int]] = (
            {key: kafka_apis.KAFKA_API_VERSIONS[key] for key in _READ_ONLY_KAFKA_APIS}
            if read_only
            else kafka_apis.KAFKA_API_VERSIONS
        )
        self.metrics = metrics or ServerMetrics()
        timeout_ms = int(quorum.config.value("controller.quorum.request.timeout.ms"))
        self._raft_timeout_s = timeout_ms / 1000

    async def dispatch(self, frame: bytes, peer: Peer) -> bytes | None:
        try:
            api_key = api_key_of(frame)
        except StreamCodecError as exc:
            raise ControllerProtocolError(f"{exc} from {peer}") from None
        if stream_rpcs.is_stream_api(api_key):
            if self.sasl is not None:
                self.sasl.check(peer, api_key, f"stream RPC {api_key}")
            return await self._stream(frame, peer)
        prefix = codec.read_prefix(frame)
        what = f"api key {api_key} (correlation id {prefix.correlation_id})"
        if self.sasl is not None:
            self.sasl.check(peer, api_key, what)
        versions = self._kafka_api_versions().get(api_key)
        if versions is None or not versions[0] <= prefix.api_version <= versions[1]:
            if api_key == kafka_apis.API_VERSIONS:
                fallback = codec.response_class(kafka_apis.API_VERSIONS, 0)
                response = schema.build(fallback, error_code=ErrorCode.unsupported_version,
                                        api_keys=self._api_keys(fallback))
                return codec.encode_response(prefix.correlation_id, response)
            raise ControllerProtocolError(
                f"api key {api_key} v{prefix.api_version} from {peer} is not served on the controller listener"
            )
        request = codec.decode_request(frame)
        response_cls = codec.response_class(api_key, prefix.api_version)
        refusal = self._refusal(peer, api_key, what)
        if refusal is not None and api_key not in _ADMIN_APIS:
            response = _refused(response_cls, refusal, peer)
        elif api_key in RAFT_API_KEYS:
            response = await self._raft(api_key, request.body, prefix.correlation_id, peer)
        elif api_key == kafka_apis.API_VERSIONS:  # with the features, for kafka-features.sh --bootstrap-controller
            image = self.quorum.image
            features = feature_fields(response_cls, prefix.api_version, image.finalized_features(), image.offset)
            response = schema.build(response_cls, error_code=ErrorCode.none, api_keys=self._api_keys(response_cls),
                                    **features)
        elif api_key == kafka_apis.SASL_HANDSHAKE:
            response = sasl.handshake(self.sasl, peer, response_cls, request.body, prefix.api_version)
        elif api_key == kafka_apis.SASL_AUTHENTICATE:
            response = sasl.authenticate(self.sasl, peer, response_cls, request.body)
        elif api_key == kafka_apis.DESCRIBE_QUORUM:
            response = self._describe_quorum(response_cls)
        elif api_key == kafka_apis.BROKER_REGISTRATION:
            response = await self._register(response_cls, request.body)
        elif api_key == kafka_apis.BROKER_HEARTBEAT:
            response = await self._heartbeat(response_cls, request.body)
        elif api_key == kafka_apis.UNREGISTER_BROKER:
            response = await self._unregister(response_cls, request.body)
        elif api_key == kafka_apis.DESCRIBE_CLUSTER:
            response = self._describe_cluster(response_cls, request.body)
        elif api_key == kafka_apis.ALLOCATE_PRODUCER_IDS:
            response = await self._allocate_producer_ids(response_cls, request.body)
        else:
            check: item_authorization.Allowed | None = None
            if self.authorizer is not None and api_key in PER_ITEM_APIS:
                refusal, check = self.authorizer.item_check(peer, api_key, what)
            response = await self._admin(api_key, response_cls, request, refusal, check)
        return codec.encode_response(prefix.correlation_id, response)

    # ---- Raft ----------------------------------------------------------------------------------------------
    async def _raft(self, api_key: int, body: Any, correlation_id: int, peer: Peer) -> Any:
        try:
            sender, raft_request = request_from_kio(api_key, body, correlation_id)
        except RaftCodecError as exc:
            raise ControllerProtocolError(f"{exc} (from {peer})") from None
        reply = await self.quorum.transport.deliver_request(sender, raft_request, self._raft_timeout_s)
        if reply is None:
            reply = _unanswered(raft_request)
        _, entity = response_to_kio(reply)
        return entity

    def _describe_quorum(self, response_cls: type[Any]) -> Any:
        return describe_quorum_response(response_cls, self.quorum.driver.describe(), self.quorum.voters,
                                        self.quorum.config.controller_listener_names[0])

    def _describe_cluster(self, response_cls: type[Any], body: Any) -> Any:
        leader = self.quorum.leader_id
        controllers = int(getattr(body, "endpoint_type", 1)) == 2
        nodes: list[tuple[int, str, int, str | None]]
        if controllers:
            nodes = [(voter_id, host, port, None) for voter_id, (host, port) in sorted(self.quorum.voters.items())]
        else:
            nodes = []
            for broker in self.quorum.image.live_brokers():
                if broker.listeners:
                    nodes.append((broker.node_id, broker.listeners[0].host, broker.listeners[0].port, broker.rack))
        return schema.build(
            response_cls,
            error_code=ErrorCode.none,
            endpoint_type=2 if controllers else 1,
            cluster_id=self.quorum.cluster_id,
            controller_id=leader if leader is not None else -1,
            brokers=tuple(
                schema.build_nested(response_cls, "brokers", broker_id=node_id, host=host, port=port, rack=rack)
                for node_id, host, port, rack in nodes
            ),
            cluster_authorized_operations=-2147483648,
        )

    def _refusal(self, peer: Peer, api_key: int, what: str) -> str | None:
        """Why the caller (SASL user, mapped client certificate, or ``User:ANONYMOUS``) may not send this Kafka
        request, or None: with an authorizer configured it needs the right Kafka's controller asks for the API (a
        client user who can log in, or a certificate the CA signed, must not reach the quorum's writes, and one
        granted only CLUSTER_ACTION no admin API), and the embedded node's read-only listener does not answer
        whoever reaches the port. ApiVersions and the SASL exchange itself come first."""
        if self.authorizer is None or api_key in _BEFORE_PRINCIPAL or api_key in PER_ITEM_APIS:
            return None  # PER_ITEM_APIS: decided item by item in dispatch
        return self.authorizer.refusal(peer, kafka_operation(api_key), api_name(api_key), what)

    def _kafka_api_versions(self) -> Mapping[int, tuple[int, int]]:
        return self._versions

    def _api_keys(self, response_cls: type[Any]) -> tuple[Any, ...]:
        keys = [(key, low, high) for key, (low, high) in sorted(self._kafka_api_versions().items())]
        keys.extend((key, stream_rpcs.STREAM_API_VERSION, stream_rpcs.STREAM_API_VERSION) for key, request in
                    sorted(stream_rpcs.STREAM_REQUESTS.items()) if self._serves(request))
        return tuple(
            schema.build_nested(response_cls, "api_keys", api_key=key, min_version=low, max_version=high)
            for key, low, high in keys
        )

    # ---- brokers -------------------------------------------------------------------------------------------
    async def _register(self, response_cls: type[Any], body: Any) -> Any:
        if body.cluster_id != self.quorum.cluster_id:
            return schema.build(response_cls, error_code=ErrorCode.inconsistent_cluster_id, broker_epoch=-1)
        listeners = tuple(
            Endpoint(lst.name, lst.host, int(lst.port), _SECURITY_PROTOCOLS.get(int(lst.security_protocol),
                                                                                 "PLAINTEXT"))
            for lst in body.listeners
        )
        try:
            epoch = await self.quorum.register_broker(int(body.broker_id), listeners, body.rack)
        except NotControllerError as exc:
            logger.info("broker %d registration: %s", body.broker_id, exc)
            return schema.build(response_cls, error_code=ErrorCode.not_controller, broker_epoch=-1)
        return schema.build(response_cls, error_code=ErrorCode.none, broker_epoch=epoch)

    async def _heartbeat(self, response_cls: type[Any], body: Any) -> Any:
        try:
            caught_up, fenced, shut_down = await self.quorum.heartbeat(
                int(body.broker_id),
                int(body.broker_epoch),
                int(body.current_metadata_offset),
                want_fence=bool(body.want_fence),
                want_shutdown=bool(body.want_shut_down),
            )
        except NotControllerError:
            return schema.build(response_cls, error_code=ErrorCode.not_controller, is_fenced=True)
        except NodeFencedError as exc:
            logger.info("heartbeat refused: %s", exc)
            registered = int(body.broker_id) in self.quorum.image.brokers
            code = ErrorCode.stale_broker_epoch if registered else ErrorCode.broker_id_not_registered
            return schema.build(response_cls, error_code=code, is_fenced=True)
        return schema.build(
            response_cls,
            error_code=ErrorCode.none,
            is_caught_up=caught_up,
            is_fenced=fenced,
            should_shut_down=shut_down,
        )

    async def _unregister(self, response_cls: type[Any], body: Any) -> Any:
        broker_id = int(body.broker_id)
        try:
            await self.quorum.active_controller(f"unregister broker {broker_id}").unregister_broker(broker_id)
        except NotControllerError as exc:
            return schema.build(response_cls, throttle_time=0, error_code=ErrorCode.not_controller,
                               error_message=str(exc))
        except ControllerError as exc:
            logger.info("unregistering broker %d refused: %s", broker_id, exc.message)
            return schema.build(response_cls, throttle_time=0, error_code=exc.code, error_message=exc.message)
        return schema.build(response_cls, throttle_time=0, error_code=ErrorCode.none, error_message=None)

    async def _allocate_producer_ids(self, response_cls: type[Any], body: Any) -> Any:
        broker_id = int(body.broker_id)
        try:
            controller = self.quorum.active_controller(f"allocate producer ids for broker {broker_id}")
            block = await controller.allocate_producer_ids(broker_id, int(body.broker_epoch))
        except NotControllerError as exc:
            logger.info("producer ids for broker %d: %s", broker_id, exc)
            code = ErrorCode.not_controller
        except ControllerError as exc:
            logger.info("producer ids for broker %d refused: %s", broker_id, exc.message)
            code = exc.error
        else:
            return schema.build(response_cls, throttle_time=0, error_code=ErrorCode.none,
                               producer_id_start=block.start, producer_id_len=block.length)
        return schema.build(response_cls, throttle_time=0, error_code=code, producer_id_start=-1, producer_id_len=0)

    # ---- admin APIs ----------------------------------------------------------------------------------------
    async def _admin(self, api_key: int, response_cls: type[Any], request: Any, refusal: str | None,
                     check: item_authorization.Allowed | None) -> Any:
        """The admin APIs brokers forward, asked of the active controller (NOT_CONTROLLER per item elsewhere). A
        ``refusal`` (the caller lacks the right) answers every item CLUSTER_AUTHORIZATION_FAILED instead, through
        the same per-item answers; ``check``: the caller's right on each item, for the APIs decided item by item
        (its refused items are answered before the controller is asked about the others)."""
        body = request.body
        active: admin_requests.ControllerFor = self.quorum.active_controller
        if refusal is not None:
            active = _refuse_with(refusal)
        if api_key == kafka_apis.CREATE_TOPICS:
            topics = topic_wire.read_create_topics(body, request.client_id)
            if check is not None:
                topics = item_authorization.create_topics(topics, check)
            return await admin_requests.create_topics(response_cls, topics, active)
        if api_key == kafka_apis.DELETE_TOPICS:
            deletions = topic_wire.read_delete_topics(body)
            if check is not None:
                deletions = item_authorization.delete_topics(deletions, check, self.quorum.image.topics_by_id)
            return await admin_requests.delete_topics(response_cls, deletions, active)
        if api_key == kafka_apis.CREATE_PARTITIONS:
            partitions = topic_wire.read_create_partitions(body)
            if check is not None:
                partitions = item_authorization.create_partitions(partitions, check)
            return await admin_requests.create_partitions(response_cls, partitions, active)
        if api_key in (kafka_apis.ALTER_CONFIGS, kafka_apis.INCREMENTAL_ALTER_CONFIGS):
            ask = (config_wire.read_alter_configs(body) if api_key == kafka_apis.ALTER_CONFIGS
                   else config_wire.read_incremental_alter_configs(body))
            if check is not None:
                ask = item_authorization.alter_configs(ask, check)
            # The forwarding broker checked that a broker resource names itself; a request naming one broker is
            # therefore checked against that broker here (anything else against this voter's own id).
            named = {item.resource.name for item in ask.resources
                     if item.resource.type == ConfigResource.BROKER and item.resource.name.isdigit()}
            broker_id = int(named.pop()) if len(named) == 1 else self.quorum.node_id
            return await admin_requests.alter_configs(response_cls, ask, active, broker_id=broker_id)
        if api_key == kafka_apis.ELECT_LEADERS:
            return await admin_requests.elect_leaders(response_cls, topic_wire.read_elect_leaders(body), active)
        if api_key == kafka_apis.ALTER_PARTITION_REASSIGNMENTS:
            asked = topic_wire.read_alter_partition_reassignments(body)
            return await admin_requests.alter_partition_reassignments(response_cls, asked, active)
        if api_key == kafka_apis.ALTER_USER_SCRAM_CREDENTIALS:
            return await admin_requests.alter_user_scram_credentials(response_cls, body, active)
        if api_key in (kafka_apis.CREATE_ACLS, kafka_apis.DELETE_ACLS):
            answer = admin_requests.create_acls if api_key == kafka_apis.CREATE_ACLS else admin_requests.delete_acls
            return await answer(response_cls, body, active)
        if api_key == kafka_apis.ALTER_CLIENT_QUOTAS:
            return await admin_requests.alter_client_quotas(response_cls, body, active)
        if api_key == kafka_apis.UPDATE_FEATURES:
            return await admin_requests.update_features(response_cls, body, request.api_version, active)
        raise ControllerProtocolError(f"api key {api_key} is listed as served on the controller listener but has "
                                      "no answer")

    # ---- Fjord's stream RPCs -------------------------------------------------------------------------------
    async def _stream(self, frame: bytes, peer: Peer) -> bytes:
        check = None if self.authorizer is None else functools.partial(self.authorizer.check_stream, peer)
        try:  # the caller's right is checked on the header: no body is parsed for a caller who may not send it
            correlation_id, request = decode_stream_request(frame, check)
        except StreamCodecError as exc:
            raise ControllerProtocolError(f"{exc} (from {peer})") from None
        leader = self.quorum.leader_id
        try:
            result = await self._serve_stream(request)
            response = stream_rpcs.StreamResponse(RpcError.NONE, None, leader if leader is not None else -1, result)
        except StorageError as exc:
            code = error_code_for(exc)
            if isinstance(exc, NotControllerError):
                leader = exc.leader_id
            response = stream_rpcs.StreamResponse(code, str(exc), leader if leader is not None else -1)
        except (ValueError, TypeError) as exc:
            response = stream_rpcs.StreamResponse(RpcError.INVALID_REQUEST, f"{type(request).__name__}: {exc}",
                                        leader if leader is not None else -1)
        return encode_stream_response(correlation_id, response)

    def _serves(self, request: type[stream_rpcs.StreamRequest]) -> bool:
        """Whether this listener answers a stream RPC: read-only, only those that change nothing, and not the dump
        of the whole metadata (SCRAM credentials and ACLs among it, which its broker shows only to whom it
        authorizes)."""
        return not self.read_only or not (request.MUTATES or request is stream_rpcs.DescribeMetadata)

    async def _serve_stream(self, request: stream_rpcs.StreamRequest) -> Any:
        what = type(request).__name__
        if not self._serves(type(request)):
            raise ValueError(f"the CONTROLLER listener of an embedded controller (node {self.quorum.node_id}) serves "
                             "only reads of the stream metadata; its writes go through its broker")
        if isinstance(request, stream_rpcs.DescribeMetadata):
            return self.quorum.dump()
        controller = self.quorum.active_controller(f"serve {what}")
        if request.MUTATES:
            self.quorum.check_node(request.node, what)
        streams: StreamMetadata = controller.stream_metadata
        node = request.node
        match request:
            case stream_rpcs.CreateStream():
                return await streams.create_stream(node, request.tags)
            case stream_rpcs.OpenStream():
                return await streams.open_stream(node, request.stream_id, request.epoch)
            case stream_rpcs.CloseStream():
                return await streams.close_stream(node, request.stream_id, request.epoch)
            case stream_rpcs.TrimStream():
                return await streams.trim_stream(node, request.stream_id, request.epoch, request.new_start_offset)
            case stream_rpcs.DeleteStream():
                return await streams.delete_stream(node, request.stream_id, request.epoch)
            case stream_rpcs.GetStreams():
                return await streams.get_streams(request.stream_ids)
            case stream_rpcs.GetOpeningStreams():
                return await streams.get_opening_streams(node)
            case stream_rpcs.PrepareObjects():
                return await streams.prepare_objects(node, request.count, request.ttl_ms)
            case stream_rpcs.CommitStreamSetObject():
                if request.request is None or request.request.node != node:
                    raise ValueError("the commit must be present and name the calling node")
                return await streams.commit_stream_set_object(request.request)
            case stream_rpcs.CommitStreamObject():
                if request.request is None or request.request.node != node:
                    raise ValueError("the commit must be present and name the calling node")
                return await streams.commit_stream_object(request.request)
            case stream_rpcs.GetObjects():
                return await streams.get_objects(request.stream_id, request.start_offset, request.end_offset,
                                                 request.limit)
            case stream_rpcs.GetStreamSetObjects():
                return await streams.get_stream_set_objects(request.node_id)
            case stream_rpcs.GetStreamObjects():
                return await streams.get_stream_objects(request.stream_id)
            case stream_rpcs.SweepObjects():
                return await streams.sweep_objects(request.now_ms)
            case stream_rpcs.RemoveObjects():
                return await streams.remove_objects(request.object_ids)
            case stream_rpcs.GetKV():
                return await streams.get_kv(request.key)
            case stream_rpcs.PutKV():
                return await streams.put_kv(request.key, request.value)
            case stream_rpcs.DeleteKV():
                return await streams.delete_kv(request.key)
            case stream_rpcs.CompleteWALFailover():
                return await controller.complete_wal_failover(node, request.failed_node_id,
                                                              request.failed_node_epoch)
            case stream_rpcs.ReportBrokerLoad():
                return self.quorum.record_load(node, request.partitions, request.interval_ms)
            case stream_rpcs.DescribeBrokerLoad():
                return tuple(stream_rpcs.BrokerLoadReport(load.node_id, load.age_s, tuple(load.partitions.values()))
                             for load in self.quorum.broker_loads())
        raise ValueError(f"no handler for {what}")


def _refused(response_cls: type[Any], refusal: str, peer: Peer) -> Any:
    """The answer to a Kafka request its caller may not send: CLUSTER_AUTHORIZATION_FAILED in the top-level error
    code every such API the controller serves carries (the connection stays open, as in Kafka)."""
    if not schema.has_field(response_cls, "error_code"):  # not one of the controller's APIs: nothing to carry it
        raise ConnectionClosing(refusal)
    fields: dict[str, object] = {"error_code": ErrorCode.cluster_authorization_failed}
    if schema.has_field(response_cls, "error_message"):
        fields["error_message"] = refusal
    logger.debug("answering %s CLUSTER_AUTHORIZATION_FAILED: %s", peer, refusal)
    return schema.build(response_cls, **fields)


def _refuse_with(refusal: str) -> admin_requests.ControllerFor:
    """A ``controller_for`` that refuses every item of an admin request with CLUSTER_AUTHORIZATION_FAILED."""

    def refuse(_what: str) -> Controller:
        raise ControllerError(ErrorCode.cluster_authorization_failed, refusal)

    return refuse


def _unanswered(request: RaftRequest) -> RaftResponse:
    """What a peer gets when the core did not answer in time: an error it retries on its own timers."""
    error = Errors.NOT_LEADER_OR_FOLLOWER
    no_leader = LeaderIdAndEpoch(-1, -1)
    match request:
        case VoteRequest():
            return VoteResponse(error, -1, -1, False, request.correlation_id)
        case BeginQuorumEpochRequest():
            return BeginQuorumEpochResponse(error, -1, -1, request.correlation_id)
        case EndQuorumEpochRequest():
            return EndQuorumEpochResponse(error, -1, -1, request.correlation_id)
        case FetchRequest():
            return FetchResponse(error, -1, -1, no_leader, correlation_id=request.correlation_id)
        case FetchSnapshotRequest():
            return FetchSnapshotResponse(error, request.snapshot_id, no_leader, 0, 0, b"", request.correlation_id)
    raise TypeError(f"{type(request).__name__} is not answered by the Raft core")
