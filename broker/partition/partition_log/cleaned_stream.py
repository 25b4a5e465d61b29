"""The LOG meta entry's bookkeeping for the log cleaner's streams (broker/partition/cleaner.py, DESIGN.md §10).

LOG names the cleaned stream (``cleaned``, -1 without one), the cleaner offset (``co``), the cleaned stream's bytes
(``cb``), when its oldest kept tombstone or transaction marker expires (``th``) and the ``doomed`` streams: a round's
output stream is named doomed before it is written, so a crash or a leadership change at any point leaves either the
old layout or the new one plus streams the next open deletes. Installing a round's output is one LOG record that
names the new stream and dooms the one it replaces. These functions compute those records; :mod:`.cleaner_switch` writes
them under the partition's lock and trims or deletes the streams they make obsolete.
"""

from __future__ import annotations

from typing import Any


def doomed_ids(log_info: dict[str, Any]) -> list[int]:
    """The streams LOG names as left behind by cleaner rounds (to delete)."""
    doomed = log_info.get("doomed")
    return [int(x) for x in doomed] if isinstance(doomed, list) else []


def switched_log_info(
    log_info: dict[str, Any],
    *,
    stream_id: int,
    cleaner_offset: int,
    written_bytes: int,
    tombstone_horizon_ms: int | None,
    replaced: int | None,
) -> dict[str, Any]:
    """The LOG entry after a round's switch to stream ``stream_id`` (no longer doomed), which holds the compacted
    prefix up to ``cleaner_offset`` in ``written_bytes``; the ``replaced`` cleaned stream, if any, becomes doomed
    until it is deleted."""
    doomed = [x for x in doomed_ids(log_info) if x != stream_id]
    if replaced is not None:
        doomed.append(replaced)
    return dict(
        log_info,
        cleaned=stream_id,
        co=cleaner_offset,
        cb=written_bytes,
        th=tombstone_horizon_ms,
        doomed=doomed,
    )
