"""The one record of a control batch: a transaction marker (COMMIT or ABORT), as Kafka's ControlRecordType and
EndTransactionMarker encode it.

A control batch (attributes bit 5) carries exactly one record whose key is ``version i16 | type i16`` and, for a
transaction marker, whose value is ``version i16 | coordinator epoch i32``. Readers of a partition (the group
coordinator replaying ``__consumer_offsets``, read_committed consumers, the log cleaner) learn from it whether the
producer's open transaction on that partition ended in a commit or an abort.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

_KEY = struct.Struct(">hh")
_MARKER_VALUE = struct.Struct(">hi")
_CURRENT_VERSION = 0


class ControlRecordError(ValueError):
    """A control record whose key or value does not decode."""


class ControlType(enum.IntEnum):
    ABORT = 0
    COMMIT = 1


@dataclass(frozen=True, slots=True)
class TxnMarker:
    commit: bool
    coordinator_epoch: int

    @property
    def control_type(self) -> ControlType:
        return ControlType.COMMIT if self.commit else ControlType.ABORT


def encode_marker_key(commit: bool) -> bytes:
    return _KEY.pack(_CURRENT_VERSION, ControlType.COMMIT if commit else ControlType.ABORT)


def encode_marker_value(coordinator_epoch: int) -> bytes:
    return _MARKER_VALUE.pack(_CURRENT_VERSION, coordinator_epoch)


def control_type(key: bytes | None) -> ControlType | None:
    """The type named by a control record's key; None for a type this broker does not know (Kafka skips those:
    later versions may add control records that are not transaction markers)."""
    if key is None or len(key) < _KEY.size:
        raise ControlRecordError(f"control record key of {0 if key is None else len(key)} bytes is too short")
    _version, type_id = _KEY.unpack_from(key)
    try:
        return ControlType(type_id)
    except ValueError:
        return None


def decode_marker(key: bytes | None, value: bytes | None) -> TxnMarker | None:
    """The transaction marker a control record holds, or None when it is another kind of control record."""
    kind = control_type(key)
    if kind is None:
        return None
    if value is None or len(value) < _MARKER_VALUE.size:
        raise ControlRecordError("transaction marker value is too short")
    _version, epoch = _MARKER_VALUE.unpack_from(value)
    return TxnMarker(kind is ControlType.COMMIT, epoch)
