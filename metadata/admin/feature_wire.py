"""UpdateFeatures (57) on the wire, to and from ``metadata.controller_api.FeatureUpdate``.

As ``metadata.admin.quota_wire`` does for quotas: the broker's handler (any version a client sends), the CONTROLLER
listener (UpdateFeatures forwarded by brokers, or sent by ``kafka-features.sh --bootstrap-controller``) and the
broker's remote client (which forwards in one fixed version and reads the answer back) all speak it.

v0 names a downgrade with ``allow_downgrade`` (a safe downgrade, as Kafka reads it); v1 has the upgrade type and
``validate_only``. The controller applies the updates all or nothing (``controller.decisions.features``), so a
refusal is one top-level error at every version, with no per-feature rows (Kafka's QuorumController.updateFeatures
and UpdateFeaturesResponse.createWithErrors); only a success at v0-1 has a row per feature, each NONE.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from kio.schema.errors import ErrorCode

from metadata.controller_api import FeatureUpdate, FeatureUpdateResult
from wire import codec, schema

_UPDATE_FEATURES: Final = 57
#: The version the remote client forwards in (a success carries per-feature results back).
_FORWARD_VERSION: Final = 1
#: A success row's message: Kafka writes ``Errors.NONE.message()``, which for an error without an exception is the
#: error's name.
_NONE_MESSAGE: Final = "NONE"


def read_update_features(request: Any, version: int) -> tuple[list[FeatureUpdate], bool]:
    """The updates of a request, and its ``validate_only``."""
    updates = []
    for item in request.feature_updates:
        if version == 0:
            upgrade = FeatureUpdate.SAFE_DOWNGRADE if item.allow_downgrade else FeatureUpdate.UPGRADE
        else:
            upgrade = int(item.upgrade_type)
        updates.append(FeatureUpdate(item.feature, int(item.max_version_level), upgrade))
    return updates, bool(getattr(request, "validate_only", False))


def update_features_request(updates: Sequence[FeatureUpdate], validate_only: bool) -> Any:
    cls = codec.request_class(_UPDATE_FEATURES, _FORWARD_VERSION)
    return schema.build(
        cls,
        feature_updates=tuple(
            schema.build_nested(cls, "feature_updates", feature=u.feature, max_version_level=u.level,
                                upgrade_type=u.upgrade_type)
            for u in updates
        ),
        validate_only=validate_only,
    )


def read_update_features_response(response: Any, updates: Sequence[FeatureUpdate]) -> list[FeatureUpdateResult]:
    top = ErrorCode(response.error_code)
    by_name = {r.feature: FeatureUpdateResult(r.feature, ErrorCode(r.error_code), r.error_message)
               for r in response.results}
    return [by_name.get(u.feature, FeatureUpdateResult(u.feature, top, response.error_message)) for u in updates]


def update_features_refused(updates: Sequence[FeatureUpdate], code: ErrorCode, message: str | None
                            ) -> list[FeatureUpdateResult]:
    return [FeatureUpdateResult(u.feature, code, message) for u in updates]


def update_features_response(response_cls: type[Any], results: Sequence[FeatureUpdateResult]) -> Any:
    """The answer to the controller's results: its refusal, or a success (v2 has no ``results`` to fill)."""
    refused = next((r for r in results if r.error is not ErrorCode.none), None)
    if refused is not None:
        return update_features_refusal(response_cls, refused.error, refused.message)
    rows = ()
    if schema.has_field(response_cls, "results"):
        rows = tuple(schema.build_nested(response_cls, "results", feature=r.feature, error_code=ErrorCode.none,
                                         error_message=_NONE_MESSAGE) for r in results)
    return schema.build(response_cls, throttle_time=0, error_code=ErrorCode.none, error_message=None, results=rows)


def update_features_refusal(response_cls: type[Any], code: ErrorCode, message: str | None) -> Any:
    """A refused request: the one top-level error, no feature answering for itself, at every version."""
    return schema.build(response_cls, throttle_time=0, error_code=code, error_message=message)
