"""Which transactions ListTransactions answers with (``kafka-transactions.sh list``): Kafka's filters, as a pure
function of the coordinator's transactions, so the coordinator only supplies them and the clock.

v0 filters by state names (an unknown name is reported back, not an error) and producer ids; v1 (KIP-994) keeps
only transactions running longer than a duration; v2 (KIP-1152) only transactional ids a regular expression
matches whole (RE2 syntax, :mod:`broker.name_patterns`; INVALID_REGULAR_EXPRESSION for one it cannot take).
"""

from __future__ import annotations

from collections.abc import Iterable

from kio.schema.errors import ErrorCode

from broker.name_patterns import InvalidRegex, compile_regex
from broker.transactions.state import TransactionMetadata, TxnState


def select_transactions(
    transactions: Iterable[TransactionMetadata],
    *,
    state_filters: Iterable[str],
    producer_id_filters: Iterable[int],
    duration_filter_ms: int,
    transactional_id_pattern: str | None,
    now_ms: int,
) -> tuple[ErrorCode, list[TransactionMetadata], list[str]]:
    """(error, the transactions kept in id order, the unknown state names)."""
    pattern = None
    if transactional_id_pattern:
        try:
            pattern = compile_regex(transactional_id_pattern)
        except InvalidRegex:
            return ErrorCode.invalid_regular_expression, [], []
    names = list(state_filters)
    states = {s for s in (TxnState.from_display(n) for n in names) if s is not None}
    unknown = [n for n in names if TxnState.from_display(n) is None]
    pids = set(producer_id_filters)
    found = [
        m
        for m in transactions
        if m.state is not TxnState.DEAD
        and (not pids or m.producer_id in pids)
        and (not names or m.state in states)
        and (duration_filter_ms < 0 or now_ms - m.txn_start_ms > duration_filter_ms)
        and (pattern is None or pattern.fullmatch(m.transactional_id) is not None)
    ]
    return ErrorCode.none, sorted(found, key=lambda m: m.transactional_id), unknown
