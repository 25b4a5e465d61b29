"""ApiVersions (key 18) v0-4, including the KIP-511 v0 fallback for versions newer than ours, and the KIP-584
features (v3+) that Java clients and Kafka's tools read."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from broker.handlers.context import RequestContext
from wire import codec, schema
from wire.api_versions import API_VERSIONS_KEY, FEATURES, VersionRange

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


def _features(ctx: RequestContext) -> dict[str, object]:
    """The tagged feature fields of v3+: the ranges this broker supports and the cluster's finalized levels (from
    the metadata image, features at level 0 left out, as Kafka does). Before v4 a supported range starting at 0 is
    left out too (KAFKA-17492: older Java clients refuse such a range). The finalized epoch is the metadata log
    offset the answer reflects, as in KRaft, so a client can tell a newer answer from an older one."""
    if ctx.api_version < 3:
        return {}
    cls = ctx.response_class
    image = ctx.broker.controller.image
    return {
        "supported_features": tuple(
            schema.build_nested(cls, "supported_features", name=f.name, min_version=f.min_version,
                               max_version=f.max_version)
            for f in FEATURES
            if f.min_version > 0 or ctx.api_version >= 4
        ),
        "finalized_features_epoch": max(image.offset, 0),
        "finalized_features": tuple(
            schema.build_nested(cls, "finalized_features", name=name, max_version_level=level,
                               min_version_level=level)
            for name, level in image.finalized_features().items()
        ),
        "zk_migration_ready": False,
    }


async def handle_api_versions(ctx: RequestContext, request: Any) -> Any:
    cls = ctx.response_class
    versions = ctx.api_versions
    if ctx.api_version >= 3 and not (
        _SOFTWARE.fullmatch(request.client_software_name or "")
        and _SOFTWARE.fullmatch(request.client_software_version or "")
    ):
        return ctx.build(error_code=ErrorCode.invalid_request, api_keys=_api_keys(cls, versions))
    return ctx.build(error_code=ErrorCode.none, api_keys=_api_keys(cls, versions), **_features(ctx))
