"""What brokers send the CONTROLLER listener about themselves: BrokerRegistration, BrokerHeartbeat,
UnregisterBroker and AllocateProducerIds, each asked of the voter and answered with Kafka's error codes
(NOT_CONTROLLER on a voter that is not active, which a broker reads as "try the next voter").
"""

from __future__ import annotations

import logging
from typing import Any

from kio.schema.errors import ErrorCode

from controller.rpc.served_quorum import ServedQuorum
from metadata.errors import ControllerError, NodeFencedError, NotControllerError
from settings.endpoint import Endpoint
from wire import schema

logger = logging.getLogger(__name__)

_SECURITY_PROTOCOLS = {0: "PLAINTEXT", 1: "SSL", 2: "SASL_PLAINTEXT", 3: "SASL_SSL"}


async def register(quorum: ServedQuorum, response_cls: type[Any], body: Any) -> Any:
    if body.cluster_id != quorum.cluster_id:
        return schema.build(response_cls, error_code=ErrorCode.inconsistent_cluster_id, broker_epoch=-1)
    if int(body.broker_id) < 0:  # -1 is "no broker" to every client: such a broker could never lead a partition
        logger.info("broker registration refused: broker id %d is negative", body.broker_id)
        return schema.build(response_cls, error_code=ErrorCode.invalid_registration, broker_epoch=-1)
    listeners = tuple(
        Endpoint(lst.name, lst.host, int(lst.port), _SECURITY_PROTOCOLS.get(int(lst.security_protocol), "PLAINTEXT"))
        for lst in body.listeners
    )
    directories = tuple(getattr(body, "log_dirs", ()) or ())  # BrokerRegistration v2+
    try:
        epoch = await quorum.register_broker(int(body.broker_id), listeners, body.rack, directories)
    except NotControllerError as exc:
        logger.info("broker %d registration: %s", body.broker_id, exc)
        return schema.build(response_cls, error_code=ErrorCode.not_controller, broker_epoch=-1)
    except ControllerError as exc:
        logger.info("broker %d registration refused: %s", body.broker_id, exc.message)
        return schema.build(response_cls, error_code=exc.code, broker_epoch=-1)
    return schema.build(response_cls, error_code=ErrorCode.none, broker_epoch=epoch)


async def heartbeat(quorum: ServedQuorum, response_cls: type[Any], body: Any) -> Any:
    try:
        caught_up, fenced, shut_down = await quorum.heartbeat(
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
        registered = int(body.broker_id) in quorum.image.brokers
        code = ErrorCode.stale_broker_epoch if registered else ErrorCode.broker_id_not_registered
        return schema.build(response_cls, error_code=code, is_fenced=True)
    return schema.build(
        response_cls,
        error_code=ErrorCode.none,
        is_caught_up=caught_up,
        is_fenced=fenced,
        should_shut_down=shut_down,
    )


async def unregister(quorum: ServedQuorum, response_cls: type[Any], body: Any) -> Any:
    broker_id = int(body.broker_id)
    try:
        await quorum.active_controller(f"unregister broker {broker_id}").unregister_broker(broker_id)
    except NotControllerError as exc:
        return schema.build(response_cls, throttle_time=0, error_code=ErrorCode.not_controller, error_message=str(exc))
    except ControllerError as exc:
        logger.info("unregistering broker %d refused: %s", broker_id, exc.message)
        return schema.build(response_cls, throttle_time=0, error_code=exc.code, error_message=exc.message)
    return schema.build(response_cls, throttle_time=0, error_code=ErrorCode.none, error_message=None)


async def allocate_producer_ids(quorum: ServedQuorum, response_cls: type[Any], body: Any) -> Any:
    broker_id = int(body.broker_id)
    try:
        controller = quorum.active_controller(f"allocate producer ids for broker {broker_id}")
        block = await controller.allocate_producer_ids(broker_id, int(body.broker_epoch))
    except NotControllerError as exc:
        logger.info("producer ids for broker %d: %s", broker_id, exc)
        code = ErrorCode.not_controller
    except ControllerError as exc:
        logger.info("producer ids for broker %d refused: %s", broker_id, exc.message)
        code = exc.error
    else:
        return schema.build(
            response_cls,
            throttle_time=0,
            error_code=ErrorCode.none,
            producer_id_start=block.start,
            producer_id_len=block.length,
        )
    return schema.build(response_cls, throttle_time=0, error_code=code, producer_id_start=-1, producer_id_len=0)
