"""DescribeUserScramCredentials (key 50) v0 and AlterUserScramCredentials (key 51) v0: SCRAM users, as
``kafka-configs.sh --entity-type users`` and the admin clients manage them.

Alterations go to the controller (``metadata.admin.requests``, forwarded to the active controller in a quorum),
which keeps the credentials as metadata records; descriptions are read from this broker's metadata image, as a
KRaft broker answers from its metadata cache. Only mechanisms and iteration counts are ever described.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Final

from kio.schema.errors import ErrorCode

from broker.handlers.context import Handler, RequestContext
from broker.handlers.guards import CLUSTER_DENIED, Guard, cluster
from metadata.acl.binding import CLUSTER_NAME, AclOperation, ResourceType
from metadata.admin import requests as admin_requests
from metadata.admin.requests import always
from metadata.image import MetadataImage
from wire import schema


async def handle_alter_user_scram_credentials(ctx: RequestContext, request: Any) -> Any:
    return await admin_requests.alter_user_scram_credentials(ctx.response_class, request, always(ctx.broker.controller))


def _describe_user(ctx: RequestContext, image: MetadataImage, user: str, duplicated: bool) -> Any:
    credentials = image.scram_credentials.get(user)
    result_cls = schema.field_entity(ctx.response_class, "results")
    code: ErrorCode
    message: str | None
    if duplicated:
        code = ErrorCode.duplicate_resource
        message = f"Cannot describe SCRAM credentials for the same user twice in a single request: {user}"
    elif not credentials:
        code = ErrorCode.resource_not_found
        message = f"Attempt to describe a user credential that does not exist: {user}"
    else:
        code, message = ErrorCode.none, None
    infos = (
        ()
        if code is not ErrorCode.none or credentials is None
        else tuple(
            schema.build_nested(result_cls, "credential_infos", mechanism=mechanism, iterations=credential.iterations)
            for mechanism, credential in sorted(credentials.items())
        )
    )
    return schema.build(result_cls, user=user, error_code=code, error_message=message, credential_infos=infos)


async def handle_describe_user_scram_credentials(ctx: RequestContext, request: Any) -> Any:
    image = ctx.broker.controller.image
    if not request.users:  # null or empty: every user, as Kafka answers
        users = sorted(image.scram_credentials)
        counts: Counter[str] = Counter()
    else:
        names = [u.name for u in request.users]
        counts = Counter(names)
        users = list(dict.fromkeys(names))
    results = tuple(_describe_user(ctx, image, user, counts[user] > 1) for user in users)
    return ctx.build(throttle_time=0, error_code=ErrorCode.none, error_message=None, results=results)


#: CLUSTER DESCRIBE, as Kafka checks.
authorize_describe_user_scram_credentials: Final[Guard] = cluster(AclOperation.DESCRIBE)


async def authorize_alter_user_scram_credentials(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    """CLUSTER ALTER, as Kafka checks; a refusal answers every user the request names."""
    if ctx.allowed(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        return await handler(ctx, request)
    users = dict.fromkeys([*(d.name for d in request.deletions), *(u.name for u in request.upsertions)])
    return ctx.build(
        results=tuple(
            schema.build_nested(ctx.response_class, "results", user=user, error_code=CLUSTER_DENIED) for user in users
        )
    )
