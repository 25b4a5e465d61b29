"""SCRAM credential changes on the wire, both ways: Kafka entities of AlterUserScramCredentials (51) to and from
the ``metadata.controller_api`` dataclasses (the credentials are metadata records, so the controller answers).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from metadata.controller_api import ScramAlterResult, ScramDeletion, ScramUpsertion
from wire import codec, schema

# The API key, here rather than from metadata.rpc.kafka_apis: that package serves this module, not the reverse.
_ALTER_USER_SCRAM_CREDENTIALS = 51
#: The version the remote client forwards in (the newest each side of the controller listener serves).
_ALTER_USER_SCRAM_CREDENTIALS_VERSION = 0


# --------------------------------------------------------------------------- AlterUserScramCredentials (51)


def read_alter_user_scram_credentials(request: Any) -> tuple[list[ScramDeletion], list[ScramUpsertion]]:
    deletions = [ScramDeletion(d.name, int(d.mechanism)) for d in request.deletions]
    upsertions = [
        ScramUpsertion(u.name, int(u.mechanism), int(u.iterations), bytes(u.salt), bytes(u.salted_password))
        for u in request.upsertions
    ]
    return deletions, upsertions


def scram_results_refused(
    deletions: Sequence[ScramDeletion], upsertions: Sequence[ScramUpsertion], code: ErrorCode, message: str
) -> list[ScramAlterResult]:
    users = dict.fromkeys([*(d.name for d in deletions), *(u.name for u in upsertions)])
    return [ScramAlterResult(user, code, message) for user in users]


def alter_user_scram_credentials_response(response_cls: type[Any], results: Sequence[ScramAlterResult]) -> Any:
    return schema.build(response_cls, throttle_time=0, results=tuple(
        schema.build_nested(response_cls, "results", user=r.user, error_code=r.error, error_message=r.message)
        for r in results
    ))


def alter_user_scram_credentials_request(
    deletions: Sequence[ScramDeletion], upsertions: Sequence[ScramUpsertion]
) -> Any:
    cls = codec.request_class(_ALTER_USER_SCRAM_CREDENTIALS, _ALTER_USER_SCRAM_CREDENTIALS_VERSION)
    return schema.build(
        cls,
        deletions=tuple(schema.build_nested(cls, "deletions", name=d.name, mechanism=d.mechanism) for d in deletions),
        upsertions=tuple(
            schema.build_nested(cls, "upsertions", name=u.name, mechanism=u.mechanism, iterations=u.iterations,
                               salt=u.salt, salted_password=u.salted_password)
            for u in upsertions
        ),
    )


def read_alter_user_scram_credentials_response(response: Any) -> list[ScramAlterResult]:
    return [ScramAlterResult(r.user, ErrorCode(int(r.error_code)), r.error_message) for r in response.results]
