"""The error every ``fjord`` option mistake raises, in a module of its own so that both the option parsing
(``options``) and the Kafka client settings check (``kafka_settings``), which ``options`` uses, can raise it."""

from __future__ import annotations

__all__ = ["OptionError"]


class OptionError(ValueError):
    """An option of the ``fjord`` source or sink is missing, unknown in its value, or contradicts another."""
