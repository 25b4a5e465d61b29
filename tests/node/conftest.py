"""Fixtures of the node tests: ``broker_factory`` starts ``fjord server start`` processes
(tests/broker/broker_fixtures.py)."""

from __future__ import annotations

from tests.broker.broker_fixtures import broker_factory

__all__ = ["broker_factory"]
