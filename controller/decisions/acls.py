"""CreateAcls and DeleteAcls — the controller's decisions, sans-I/O: which records a request becomes.

Kafka's rules (AclControlManager): each creation is validated on its own (an invalid one gets INVALID_REQUEST and
does not stop the others); a binding identical to an existing one (or to an earlier one of the same request) is a
success that writes nothing; each new binding gets a fresh id. Each deletion filter deletes every binding it
matches (none is no error); a filter with an UNKNOWN code is refused with INVALID_REQUEST; a binding matched by two
filters is deleted once, reported by both.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from metadata.acl.binding import AclBinding, AclBindingFilter, invalid_binding
from metadata.cluster_records import AccessControlEntryRecord, RemoveAccessControlEntryRecord
from metadata.controller_api import AclCreateResult, AclDeleteResult
from storage.metadata.record_codec import MetadataRecord


@dataclass(frozen=True, slots=True)
class AclCreatePlan:
    records: list[MetadataRecord]
    results: list[AclCreateResult]


@dataclass(frozen=True, slots=True)
class AclDeletePlan:
    records: list[MetadataRecord]
    results: list[AclDeleteResult]


def binding_record(acl_id: str, binding: AclBinding) -> AccessControlEntryRecord:
    return AccessControlEntryRecord(
        acl_id,
        int(binding.resource_type),
        binding.resource_name,
        int(binding.pattern_type),
        binding.principal,
        binding.host,
        int(binding.operation),
        int(binding.permission),
    )


def plan_create_acls(
    existing: Mapping[str, AclBinding],
    bindings: Sequence[AclBinding],
    new_id: Callable[[], str] = lambda: str(uuid.uuid4()),
) -> AclCreatePlan:
    present = set(existing.values())
    records: list[MetadataRecord] = []
    results: list[AclCreateResult] = []
    for binding in bindings:
        reason = invalid_binding(binding)
        if reason is not None:
            results.append(AclCreateResult(ErrorCode.invalid_request, reason))
            continue
        if binding not in present:
            present.add(binding)
            records.append(binding_record(new_id(), binding))
        results.append(AclCreateResult())
    return AclCreatePlan(records, results)


def plan_delete_acls(existing: Mapping[str, AclBinding], filters: Sequence[AclBindingFilter]) -> AclDeletePlan:
    records: list[MetadataRecord] = []
    results: list[AclDeleteResult] = []
    removed: set[str] = set()
    for acl_filter in filters:
        reason = acl_filter.unknown()
        if reason is not None:
            results.append(AclDeleteResult(ErrorCode.invalid_request, reason))
            continue
        matched = sorted((acl_id for acl_id, binding in existing.items() if acl_filter.matches(binding)))
        for acl_id in matched:
            if acl_id not in removed:
                removed.add(acl_id)
                records.append(RemoveAccessControlEntryRecord(acl_id))
        results.append(AclDeleteResult(deleted=tuple(existing[acl_id] for acl_id in matched)))
    return AclDeletePlan(records, results)
