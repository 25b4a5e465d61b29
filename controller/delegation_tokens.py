"""The controller's delegation tokens: the three token requests decided and logged, and the expired tokens swept.

The decisions are ``controller.decisions.delegation_tokens``'s; this module holds what the controller keeps for
them (its secret key and default lifetimes) and the sweep, Kafka's expired-token remover: every
``delegation.token.expiry.check.interval.ms`` while the image holds tokens, the controller that writes removes the
tokens past their expiry (on a voter that is not active the write fails and the next one tries again).
Authentication refuses an expired token whether or not it was swept yet.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from kio.schema.errors import ErrorCode

from controller.decisions.delegation_tokens import TokenLimits, TokenPlan, plan_token_request, plan_token_sweep
from controller.reassignment_watch import Decide
from metadata.cluster_records import RemoveDelegationTokenRecord
from metadata.delegation_tokens import (
    CREATE,
    EXPIRY_CHECK_INTERVAL,
    EXPIRY_TIME,
    MAX_LIFETIME,
    TokenRequest,
    TokenResult,
    secret_key,
)
from metadata.errors import NotControllerError
from metadata.image import MetadataImage
from settings.server import ServerConfig
from storage.metadata.record_codec import MetadataRecord
from wire.log_text import untrusted

logger = logging.getLogger(__name__)


class DelegationTokens:
    """One controller's token requests and sweep, writing through ``write`` (its locked decide-and-commit)."""

    def __init__(
        self, config: ServerConfig, clock_ms: Callable[[], int], write: Callable[[Decide], Awaitable[None]]
    ) -> None:
        self._limits = TokenLimits(secret_key(config), int(config.value(MAX_LIFETIME)), int(config.value(EXPIRY_TIME)))
        self._interval_s = int(config.value(EXPIRY_CHECK_INTERVAL)) / 1000
        self._node_id = config.node_id
        self._clock_ms = clock_ms
        self._write = write
        self._task: asyncio.Task[None] | None = None

    async def change(self, request: TokenRequest) -> TokenResult:
        """Create, Renew or ExpireDelegationToken, decided and committed under the controller's write lock."""
        result = TokenResult()

        async def decide(image: MetadataImage) -> list[MetadataRecord]:
            nonlocal result
            plan = self.plan(image, request)
            result = plan.result
            return plan.records

        await self._write(decide)
        return result

    def plan(self, image: MetadataImage, request: TokenRequest) -> TokenPlan:
        """The records and the answer of one request, logged (never the HMAC)."""
        plan = plan_token_request(image, self._limits, request, self._clock_ms())
        result, token = plan.result, plan.result.token
        if result.error is not ErrorCode.none:
            logger.info("delegation token %s asked by %s refused: %s", request.kind, untrusted(request.requester),
                        result.error.name.upper())
        elif token is not None and request.kind == CREATE:
            logger.info("delegation token %s created for %s by %s (expires at %d, at most %d)", token.token_id,
                        untrusted(token.owner), untrusted(request.requester), token.expiry_ms, token.max_ms)
        elif token is not None:
            logger.info("delegation token %s of %s now expires at %d (%s by %s)", token.token_id,
                        untrusted(token.owner), token.expiry_ms, request.kind, untrusted(request.requester))
        else:
            removed = [r.token_id for r in plan.records if isinstance(r, RemoveDelegationTokenRecord)]
            logger.info("delegation token %s expired at once by %s", ", ".join(removed), untrusted(request.requester))
        return plan

    def saw(self, image: MetadataImage) -> None:
        """The image changed: sweeps run while it holds tokens."""
        if image.delegation_tokens and (self._task is None or self._task.done()):
            self._task = asyncio.get_running_loop().create_task(self._sweep(), name="delegation-token-sweep")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _sweep(self) -> None:
        left = True
        while left:
            await asyncio.sleep(self._interval_s)

            async def decide(image: MetadataImage) -> list[MetadataRecord]:
                nonlocal left
                records = plan_token_sweep(image, self._clock_ms())
                left = len(image.delegation_tokens) > len(records)
                if records:
                    logger.info("delegation tokens past their expiry removed: %s",
                                ", ".join(r.token_id for r in records if isinstance(r, RemoveDelegationTokenRecord)))
                return records

            try:
                await self._write(decide)
            except NotControllerError:
                continue
            except Exception as exc:  # a log write failed: the next sweep tries again
                logger.warning("controller %d: expired delegation tokens not removed: %s", self._node_id, exc)
