"""Logging for a foreground node: readable lines on stderr, one logger per module.

The level comes from ``--log-level`` or ``FJORD_LOG_LEVEL`` (default INFO). Noisy third-party loggers are kept at
WARNING so that INFO shows what happened to which partition, not HTTP chatter.
"""

from __future__ import annotations

import logging
import os
import sys

FORMAT = "%(asctime)s.%(msecs)03d %(levelname)-7s %(name)s: %(message)s"
DATE_FORMAT = "%Y-%m-%d %H:%M:%S"
_QUIET = ("aiobotocore", "botocore", "urllib3", "asyncio", "kio")


def configure_logging(level: str | None = None) -> None:
    name = (level or os.environ.get("FJORD_LOG_LEVEL") or "INFO").upper()
    numeric = logging.getLevelName(name)
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r} (use DEBUG, INFO, WARNING or ERROR)")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(FORMAT, DATE_FORMAT))
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(numeric)
    for noisy in _QUIET:
        logging.getLogger(noisy).setLevel(max(numeric, logging.WARNING))
