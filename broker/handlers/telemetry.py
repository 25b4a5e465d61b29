"""GetTelemetrySubscriptions (key 71) v0 and PushTelemetry (key 72) v0: KIP-714 client metrics.

The decisions are ``broker.telemetry.manager``'s (Kafka's ``ClientMetricsManager`` rules); the subscriptions are
the client-metrics config resources of the metadata image, read at each request. A push's payload is read by
``broker.telemetry.otlp`` and its points kept for ``/metrics`` (``broker.telemetry.exported``); a client whose
subscriptions match nothing is told to push no metric, so with no subscription nothing is ever pushed.

Kafka needs no ACL for either API (any authenticated client may push its own metrics), so neither has a guard.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.constants import uuid_zero

from broker.handlers.context import RequestContext
from broker.telemetry.manager import ACCEPTED_COMPRESSION, ClientAttributes
from broker.telemetry.otlp import OtlpError, OtlpTooLarge, read_push
from wire.compression import Compression
from wire.log_text import LOG_TEXT_MAX, untrusted

logger = logging.getLogger(__name__)


def _attributes(ctx: RequestContext) -> ClientAttributes:
    software = ctx.connection.client_software
    return ClientAttributes(
        client_id=ctx.client_id or "",
        software_name=software[0] if software is not None else None,
        software_version=software[1] if software is not None else None,
        source_address=ctx.client_host,
        source_port=ctx.client_port,
    )


async def handle_get_telemetry_subscriptions(ctx: RequestContext, request: Any) -> Any:
    telemetry = ctx.broker.telemetry
    now = telemetry.now_ms()
    telemetry.sweep(now)
    telemetry.manager.update_subscriptions(ctx.broker.controller.image.client_metrics)
    answer = telemetry.manager.get_subscriptions(request.client_instance_id, _attributes(ctx), now)
    instance = answer.instance
    if answer.error != ErrorCode.none or instance is None:
        return ctx.build(throttle_time=0, error_code=answer.error, client_instance_id=uuid_zero)
    telemetry.spoke(instance.instance_id, ctx.connection)
    return ctx.build(
        throttle_time=0,
        error_code=ErrorCode.none,
        client_instance_id=instance.instance_id,
        subscription_id=instance.subscription_id,
        accepted_compression_types=tuple(int(c) for c in ACCEPTED_COMPRESSION),
        push_interval=instance.push_interval_ms,
        telemetry_max_bytes=telemetry.max_bytes,
        delta_temporality=True,
        requested_metrics=instance.metrics,
    )


async def handle_push_telemetry(ctx: RequestContext, request: Any) -> Any:
    telemetry = ctx.broker.telemetry
    now = telemetry.now_ms()
    telemetry.sweep(now)
    telemetry.manager.update_subscriptions(ctx.broker.controller.image.client_metrics)
    payload = bytes(request.metrics or b"")
    answer = telemetry.manager.check_push(
        request.client_instance_id, _attributes(ctx), subscription=int(request.subscription_id),
        terminating=bool(request.terminating), compression=int(request.compression_type), size=len(payload),
        now_ms=now,
    )
    instance = answer.instance
    if answer.error != ErrorCode.none or instance is None:
        logger.debug("telemetry push refused with %s: %s (%s)", answer.error.name,
                     untrusted(answer.message or "", 4 * LOG_TEXT_MAX), ctx.describe())
        return ctx.build(throttle_time=0, error_code=answer.error)
    telemetry.spoke(instance.instance_id, ctx.connection)
    if payload:
        try:
            # Off the event loop: a hostile payload may take a good part of a second to decompress and walk.
            points = await asyncio.to_thread(read_push, Compression(int(request.compression_type)), payload,
                                             telemetry.max_uncompressed)
        except OtlpError as exc:
            # Too large is retried at the client's next interval; unreadable stops a Java client pushing for good.
            error = ErrorCode.telemetry_too_large if isinstance(exc, OtlpTooLarge) else ErrorCode.invalid_record
            telemetry.manager.payload_refused(instance, error)
            logger.info("telemetry push of client instance %s refused with %s: %s (%s)", instance.instance_id,
                        error.name, exc, ctx.describe())
            return ctx.build(throttle_time=0, error_code=error)
        telemetry.pushed.record(instance.instance_id, ctx.client_id or "", points, instance.push_interval_ms, now)
    if request.terminating:
        telemetry.pushed.forget(instance.instance_id)
    return ctx.build(throttle_time=0, error_code=ErrorCode.none)
