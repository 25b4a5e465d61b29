"""Fjord's own stream RPCs on the CONTROLLER listener: the stream and object metadata (s3stream's), the KV entries,
the WAL failover and the brokers' load reports, answered by the active controller's ``StreamMetadata``.

The caller's right is checked on the request's header, before its body is parsed
(``metadata.rpc.stream_codec.decode_stream_request``); a caller who may not send it has its connection closed. A
*read-only* listener (the embedded node's) answers only the RPCs that change nothing, and not DescribeMetadata.
An error the storage layer names is answered with its code and the active controller's id, so a node retries at
the right voter.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from controller.rpc.authorization import ControllerAuthorizer
from controller.rpc.protocol_error import ControllerProtocolError
from controller.rpc.served_quorum import ServedQuorum
from metadata.errors import NotControllerError
from metadata.rpc import stream_rpcs
from metadata.rpc.error_codes import RpcError, error_code_for
from metadata.rpc.stream_codec import StreamCodecError, decode_stream_request, encode_stream_response
from storage.errors import StorageError
from storage.metadata.api import StreamMetadata

if TYPE_CHECKING:
    from wire.dispatch import Peer


async def answer_stream(
    quorum: ServedQuorum, frame: bytes, peer: Peer, authorizer: ControllerAuthorizer | None, *, read_only: bool
) -> bytes:
    check = None if authorizer is None else functools.partial(authorizer.check_stream, peer)
    try:  # the caller's right is checked on the header: no body is parsed for a caller who may not send it
        correlation_id, request = decode_stream_request(frame, check)
    except StreamCodecError as exc:
        raise ControllerProtocolError(f"{exc} (from {peer})") from None
    leader = quorum.leader_id
    try:
        result = await _serve(quorum, request, read_only=read_only)
        response = stream_rpcs.StreamResponse(RpcError.NONE, None, leader if leader is not None else -1, result)
    except StorageError as exc:
        code = error_code_for(exc)
        if isinstance(exc, NotControllerError):
            leader = exc.leader_id
        response = stream_rpcs.StreamResponse(code, str(exc), leader if leader is not None else -1)
    except (ValueError, TypeError) as exc:
        response = stream_rpcs.StreamResponse(
            RpcError.INVALID_REQUEST, f"{type(request).__name__}: {exc}", leader if leader is not None else -1
        )
    return encode_stream_response(correlation_id, response)


def serves(request: type[stream_rpcs.StreamRequest], *, read_only: bool) -> bool:
    """Whether this listener answers a stream RPC: read-only, only those that change nothing, and not the dump
    of the whole metadata (SCRAM credentials and ACLs among it, which its broker shows only to whom it
    authorizes)."""
    return not read_only or not (request.MUTATES or request is stream_rpcs.DescribeMetadata)


async def _serve(quorum: ServedQuorum, request: stream_rpcs.StreamRequest, *, read_only: bool) -> Any:
    what = type(request).__name__
    if not serves(type(request), read_only=read_only) and isinstance(request, stream_rpcs.DescribeMetadata):
        # What asks for it is `fjord metadata shell --bootstrap/--controllers`: point it at what works here.
        raise ValueError(
            f"the CONTROLLER listener of an embedded controller (node {quorum.node_id}) does not hand out the whole "
            "metadata (SCRAM credentials and ACLs among it); read it from the node's metadata directory instead: "
            f"fjord metadata shell --metadata-dir {quorum.config.metadata_dir}"
        )
    if not serves(type(request), read_only=read_only):
        raise ValueError(
            f"the CONTROLLER listener of an embedded controller (node {quorum.node_id}) serves "
            "only reads of the stream metadata; its writes go through its broker"
        )
    if isinstance(request, stream_rpcs.DescribeMetadata):
        return quorum.dump()
    controller = quorum.active_controller(f"serve {what}")
    if request.MUTATES:
        quorum.check_node(request.node, what)
    streams: StreamMetadata = controller.stream_metadata
    node = request.node
    match request:
        case stream_rpcs.CreateStream():
            return await streams.create_stream(node, request.tags)
        case stream_rpcs.OpenStream():
            return await streams.open_stream(node, request.stream_id, request.epoch)
        case stream_rpcs.CloseStream():
            return await streams.close_stream(node, request.stream_id, request.epoch)
        case stream_rpcs.CloseStreams():
            return await streams.close_streams(node, request.streams)
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
        case stream_rpcs.CommitStreamSetObjects():
            if any(r.node != node for r in request.requests):
                raise ValueError("every commit must name the calling node")
            return await streams.commit_stream_set_objects(request.requests)
        case stream_rpcs.CommitStreamObject():
            if request.request is None or request.request.node != node:
                raise ValueError("the commit must be present and name the calling node")
            return await streams.commit_stream_object(request.request)
        case stream_rpcs.GetObjects():
            return await streams.get_objects(request.stream_id, request.start_offset, request.end_offset, request.limit)
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
        case stream_rpcs.PutKVIfAbsent():
            return await streams.put_kv_if_absent(request.key, request.value)
        case stream_rpcs.DeleteKV():
            return await streams.delete_kv(request.key)
        case stream_rpcs.CompleteWALFailover():
            return await controller.complete_wal_failover(node, request.failed_node_id, request.failed_node_epoch)
        case stream_rpcs.ReportBrokerLoad():
            return quorum.record_load(node, request.partitions, request.interval_ms)
        case stream_rpcs.ChangeDelegationToken(request=change) if change is not None:
            return await controller.change_delegation_token(change)
        case stream_rpcs.DescribeBrokerLoad():
            return tuple(
                stream_rpcs.BrokerLoadReport(load.node_id, load.age_s, tuple(load.partitions.values()))
                for load in quorum.broker_loads()
            )
    raise ValueError(f"no handler for {what}")
