"""AlterUserScramCredentials — the controller's decisions, sans-I/O: which credential records a request becomes.

Kafka's rules, per user (the response has one result per user, and a user whose alterations are not all valid gets
none of them): a mechanism must be SCRAM-SHA-256 or SCRAM-SHA-512, iterations between 4096 and 16384, salt and
salted password non-empty, a user/mechanism pair at most once per request, and a deletion must name a credential
that exists. Upsertions become :class:`UserScramCredentialRecord`s holding StoredKey and ServerKey derived from the
salted password, so nothing a client could log in with is ever written to the metadata log.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from metadata.cluster_records import RemoveUserScramCredentialRecord, UserScramCredentialRecord
from metadata.controller_api import ScramAlterResult, ScramDeletion, ScramUpsertion
from metadata.image import MetadataImage
from storage.metadata.record_codec import MetadataRecord
from wire.sasl.scram import MAX_ITERATIONS, MECHANISMS_BY_ID, MIN_ITERATIONS, credential_from_salted


@dataclass(frozen=True, slots=True)
class ScramPlan:
    records: list[MetadataRecord]
    results: list[ScramAlterResult]


def _refusal(
    image: MetadataImage, alteration: ScramDeletion | ScramUpsertion, duplicates: set[tuple[str, int]]
) -> tuple[ErrorCode, str] | None:
    name, mechanism = alteration.name, alteration.mechanism
    if not name:
        return ErrorCode.unacceptable_credential, "Username must not be empty"
    if mechanism not in MECHANISMS_BY_ID:
        return ErrorCode.unsupported_sasl_mechanism, f"Unknown SCRAM mechanism {mechanism}"
    if (name, mechanism) in duplicates:
        return ErrorCode.duplicate_resource, "A user credential cannot be altered twice in the same request"
    if isinstance(alteration, ScramDeletion):
        if image.scram_credential(name, mechanism) is None:
            return ErrorCode.resource_not_found, "Attempt to delete a user credential that does not exist"
        return None
    if not MIN_ITERATIONS <= alteration.iterations <= MAX_ITERATIONS:
        return (
            ErrorCode.unacceptable_credential,
            f"Iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}, got {alteration.iterations}",
        )
    if not alteration.salt:
        return ErrorCode.unacceptable_credential, "Salt must not be empty"
    if not alteration.salted_password:
        return ErrorCode.unacceptable_credential, "Salted password must not be empty"
    return None


def plan_scram_alterations(
    image: MetadataImage, deletions: Sequence[ScramDeletion], upsertions: Sequence[ScramUpsertion]
) -> ScramPlan:
    alterations: list[ScramDeletion | ScramUpsertion] = [*deletions, *upsertions]
    counts = Counter((a.name, a.mechanism) for a in alterations)
    duplicates = {pair for pair, n in counts.items() if n > 1}
    users = list(dict.fromkeys(a.name for a in alterations))
    refused: dict[str, tuple[ErrorCode, str]] = {}
    for alteration in alterations:
        reason = _refusal(image, alteration, duplicates)
        if reason is not None and alteration.name not in refused:
            refused[alteration.name] = reason
    records: list[MetadataRecord] = []
    for alteration in alterations:
        if alteration.name in refused:
            continue
        if isinstance(alteration, ScramDeletion):
            records.append(RemoveUserScramCredentialRecord(alteration.name, alteration.mechanism))
        else:
            mechanism = MECHANISMS_BY_ID[alteration.mechanism]
            credential = credential_from_salted(
                mechanism, alteration.salted_password, alteration.salt, alteration.iterations
            )
            records.append(
                UserScramCredentialRecord(
                    alteration.name,
                    alteration.mechanism,
                    credential.salt,
                    credential.stored_key,
                    credential.server_key,
                    credential.iterations,
                )
            )
    results = [ScramAlterResult(user, *refused[user]) if user in refused else ScramAlterResult(user) for user in users]
    return ScramPlan(records, results)
