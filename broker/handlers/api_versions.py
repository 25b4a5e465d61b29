"""ApiVersions (key 18) v0-4, including the KIP-511 v0 fallback for versions newer than ours, and the KIP-584
features (v3+) that Java clients and Kafka's tools read."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from broker.handlers.context import RequestContext
from wire import codec, schema
from wire.api_versions import API_VERSIONS_KEY, VersionRange, feature_fields

# KIP-511: client software name and version must look like this, else INVALID_REQUEST.
_SOFTWARE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


def _api_keys(response_cls: type[Any], versions: Mapping[int, VersionRange]) -> tuple[Any, ...]:
    return tuple(
        schema.build_nested(response_cls, "api_keys", api_key=key, min_version=v.min_version, max_version=v.max_version)
        for key, v in versions.items()
    )


def unsupported_version_response(versions: Mapping[int, VersionRange]) -> Any:
    """The v0 response a client gets when it asks with an ApiVersions version we do not serve: it carries
    UNSUPPORTED_VERSION and our key list, from which the client picks a version and asks again."""
    cls = codec.response_class(API_VERSIONS_KEY, 0)
    return schema.build(cls, error_code=ErrorCode.unsupported_version, api_keys=_api_keys(cls, versions))


async def handle_api_versions(ctx: RequestContext, request: Any) -> Any:
    cls = ctx.response_class
    versions = ctx.api_versions
    if ctx.api_version >= 3 and not (
        _SOFTWARE.fullmatch(request.client_software_name or "")
        and _SOFTWARE.fullmatch(request.client_software_version or "")
    ):
        return ctx.build(error_code=ErrorCode.invalid_request, api_keys=_api_keys(cls, versions))
    if ctx.api_version >= 3:
        ctx.connection.client_software = (request.client_software_name, request.client_software_version)
    image = ctx.broker.controller.image
    features = feature_fields(cls, ctx.api_version, image.finalized_features(), image.offset)
    return ctx.build(error_code=ErrorCode.none, api_keys=_api_keys(cls, versions), **features)
