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
exchange come before that check, which reads the request's header alone: a refused Kafka request is answered
CLUSTER_AUTHORIZATION_FAILED without its body being decoded (an admin request on each item, as Kafka's error
responses are, from a body read up to a bound: ``authorization.refused_request``), and the connection stays open; a
refused stream RPC closes it.

This module routes a request and checks its caller; what answers it lives in a module per kind of request:
``controller.rpc.raft_requests`` (Raft and DescribeQuorum), ``broker_lifecycle`` (registration, heartbeats,
unregistration, producer ids), ``forwarded_admin`` (the admin APIs brokers forward, through ``metadata.admin``'s
translations) and ``stream_service`` (Fjord's stream RPCs). Each sees the voter through
``controller.rpc.served_quorum.ServedQuorum``, the few things they ask of it; the quorum module builds the server
and hands itself in, so the dependency runs one way (quorum → rpc).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from controller.rpc import broker_lifecycle, item_authorization, raft_requests, sasl, stream_service, voter_changes
from controller.rpc.authorization import PER_ITEM_APIS, ControllerAuthorizer, kafka_operation, refused_request
from controller.rpc.forwarded_admin import ADMIN_APIS as _ADMIN_APIS
from controller.rpc.forwarded_admin import answer_admin
from controller.rpc.protocol_error import ControllerProtocolError
from controller.rpc.sasl import SaslGate
from controller.rpc.served_quorum import ServedQuorum
from metadata.rpc import kafka_apis, stream_rpcs
from metadata.rpc.raft_codec import RAFT_API_KEYS
from metadata.rpc.stream_codec import StreamCodecError, api_key_of
from wire import codec, schema
from wire.api_versions import api_name, feature_fields, with_kraft_version
from wire.dispatch import ConnectionClosing
from wire.log_text import LOG_TEXT_MAX, untrusted
from wire.metrics import ServerMetrics

if TYPE_CHECKING:
    from wire.dispatch import Peer

logger = logging.getLogger(__name__)

__all__ = ["ControllerDispatcher", "ControllerProtocolError", "ServedQuorum"]

#: What any connection may send before its principal is checked: the version table and the SASL exchange.
_BEFORE_PRINCIPAL = frozenset({kafka_apis.API_VERSIONS, kafka_apis.SASL_HANDSHAKE, kafka_apis.SASL_AUTHENTICATE})

#: The Kafka APIs a read-only dispatcher serves (they read the quorum, never write; SASL authenticates first).
_READ_ONLY_KAFKA_APIS = (
    kafka_apis.API_VERSIONS,
    kafka_apis.SASL_HANDSHAKE,
    kafka_apis.SASL_AUTHENTICATE,
    kafka_apis.DESCRIBE_QUORUM,
    kafka_apis.DESCRIBE_CLUSTER,
)


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
        header = codec.decode_header(frame)  # the caller is checked before a byte of the body is decoded
        response_cls = codec.response_class(api_key, prefix.api_version)
        refusal = self._refusal(peer, api_key, what)
        check: item_authorization.Allowed | None = None
        quiet: item_authorization.Allowed | None = None
        if self.authorizer is not None and api_key in PER_ITEM_APIS:
            refusal, check = self.authorizer.item_check(peer, api_key, what)
            quiet = self.authorizer.quiet_check(peer)
        if refusal is not None and api_key not in _ADMIN_APIS:
            return codec.encode_response(prefix.correlation_id, _refused(response_cls, refusal, peer))
        request = codec.decode_request(frame, header) if refusal is None else refused_request(frame, header, refusal)
        if api_key in RAFT_API_KEYS:
            response = await self._raft(api_key, request.body, prefix.correlation_id, peer)
        elif api_key == kafka_apis.API_VERSIONS:  # with the features, for kafka-features.sh --bootstrap-controller
            image = self.quorum.image
            finalized = with_kraft_version(image.finalized_features(), self.quorum.kraft_version)
            features = feature_fields(response_cls, prefix.api_version, finalized, image.offset)
            response = schema.build(response_cls, error_code=ErrorCode.none, api_keys=self._api_keys(response_cls),
                                    **features)
        elif api_key == kafka_apis.SASL_HANDSHAKE:
            response = sasl.handshake(self.sasl, peer, response_cls, request.body, prefix.api_version)
        elif api_key == kafka_apis.SASL_AUTHENTICATE:
            response = sasl.authenticate(self.sasl, peer, response_cls, request.body)
        elif api_key == kafka_apis.DESCRIBE_QUORUM:
            response = self._describe_quorum(response_cls, request.body)
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
        elif api_key == kafka_apis.ADD_RAFT_VOTER:
            response = await voter_changes.add_raft_voter(self.quorum, response_cls, request.body)
        elif api_key == kafka_apis.REMOVE_RAFT_VOTER:
            response = await voter_changes.remove_raft_voter(self.quorum, response_cls, request.body)
        elif api_key == kafka_apis.UPDATE_RAFT_VOTER:
            response = await voter_changes.update_raft_voter(self.quorum, response_cls, request.body)
        else:
            response = await self._admin(api_key, response_cls, request, refusal, check=check, quiet=quiet)
        return codec.encode_response(prefix.correlation_id, response)

    # ---- Raft ----------------------------------------------------------------------------------------------
    # ---- Raft ----------------------------------------------------------------------------------------------
    async def _raft(self, api_key: int, body: Any, correlation_id: int, peer: Peer) -> Any:
        return await raft_requests.answer_raft(self.quorum, api_key, body, correlation_id, peer,
                                               timeout_s=self._raft_timeout_s)

    def _describe_quorum(self, response_cls: type[Any], body: Any) -> Any:
        return raft_requests.describe_quorum(self.quorum, response_cls, body)

    def _describe_cluster(self, response_cls: type[Any], body: Any) -> Any:
        """The controllers, as Kafka's controller answers DescribeCluster: asked for the brokers (the endpoint type
        v0 implies), MISMATCHED_ENDPOINT_TYPE, the brokers being a known type this listener does not serve; an
        unknown type, UNSUPPORTED_ENDPOINT_TYPE (AuthHelper.computeDescribeClusterResponse)."""
        leader = self.quorum.leader_id
        endpoint_type = int(getattr(body, "endpoint_type", 1))
        if endpoint_type != 2:
            unknown = endpoint_type != 1
            return schema.build(
                response_cls,
                error_code=ErrorCode.unsupported_endpoint_type if unknown else ErrorCode.mismatched_endpoint_type,
                error_message=f"Unsupported endpoint type {endpoint_type}" if unknown else (
                    "The request was sent to an endpoint of type CONTROLLER, but we wanted an endpoint of type BROKER"
                ),
            )
        nodes = [(voter_id, host, port) for voter_id, (host, port) in sorted(self.quorum.voters.items())]
        return schema.build(
            response_cls,
            error_code=ErrorCode.none,
            endpoint_type=2,
            cluster_id=self.quorum.cluster_id,
            controller_id=leader if leader is not None else -1,
            brokers=tuple(
                schema.build_nested(response_cls, "brokers", broker_id=node_id, host=host, port=port, rack=None)
                for node_id, host, port in nodes
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

    # ---- brokers (controller.rpc.broker_lifecycle) ---------------------------------------------------------
    async def _register(self, response_cls: type[Any], body: Any) -> Any:
        return await broker_lifecycle.register(self.quorum, response_cls, body)

    async def _heartbeat(self, response_cls: type[Any], body: Any) -> Any:
        return await broker_lifecycle.heartbeat(self.quorum, response_cls, body)

    async def _unregister(self, response_cls: type[Any], body: Any) -> Any:
        return await broker_lifecycle.unregister(self.quorum, response_cls, body)

    async def _allocate_producer_ids(self, response_cls: type[Any], body: Any) -> Any:
        return await broker_lifecycle.allocate_producer_ids(self.quorum, response_cls, body)

    # ---- admin APIs (controller.rpc.forwarded_admin) and stream RPCs (controller.rpc.stream_service) ---------
    async def _admin(self, api_key: int, response_cls: type[Any], request: Any, refusal: str | None, *,
                     check: item_authorization.Allowed | None, quiet: item_authorization.Allowed | None) -> Any:
        return await answer_admin(self.quorum, api_key, response_cls, request, refusal=refusal, check=check,
                                  quiet=quiet)

    async def _stream(self, frame: bytes, peer: Peer) -> bytes:
        return await stream_service.answer_stream(self.quorum, frame, peer, self.authorizer, read_only=self.read_only)

    def _serves(self, request: type[stream_rpcs.StreamRequest]) -> bool:
        return stream_service.serves(request, read_only=self.read_only)


def _refused(response_cls: type[Any], refusal: str, peer: Peer) -> Any:
    """The answer to a Kafka request its caller may not send: CLUSTER_AUTHORIZATION_FAILED in the top-level error
    code every such API the controller serves carries (the connection stays open, as in Kafka)."""
    if not schema.has_field(response_cls, "error_code"):  # not one of the controller's APIs: nothing to carry it
        raise ConnectionClosing(refusal)
    fields: dict[str, object] = {"error_code": ErrorCode.cluster_authorization_failed}
    if schema.has_field(response_cls, "error_message"):
        fields["error_message"] = refusal
    # The refusal names the caller's principal (a SASL user name, a certificate's subject): client text, escaped.
    logger.debug("answering %s CLUSTER_AUTHORIZATION_FAILED: %s", peer, untrusted(refusal, 4 * LOG_TEXT_MAX))
    return schema.build(response_cls, **fields)

