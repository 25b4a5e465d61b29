"""The BROKER_LOGGER config resource (type 8): this process's loggers and their levels, read and changed at run
time through DescribeConfigs and IncrementalAlterConfigs, as Kafka's brokers expose their log4j loggers.

The loggers are Fjord's own (every logger under its packages, named by module as ``logging.getLogger(__name__)``
makes them, and the packages themselves) and ``root``. Levels use Kafka's names, mapped to Python's: TRACE is
below DEBUG (Python has none, so it enables everything DEBUG does and more), FATAL is CRITICAL. A logger is
described with its effective level (its own, else its nearest ancestor's, as Kafka reports a logger without one).
SET gives a logger a level; DELETE unsets it so it inherits again (root's cannot be removed, Kafka's rule). Nothing
is persisted: a restart starts from the logging configuration, as in Kafka.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Final

from kio.schema.errors import ErrorCode

from metadata.controller_api import IncrementalOp
from settings.config_key import ConfigType
from settings.describe import ConfigEntry, ConfigSource, ConfigSynonym

ROOT_LOGGER: Final = "root"
#: The top-level packages whose loggers are Fjord's (pyproject's packages).
FJORD_PACKAGES: Final = ("node", "broker", "spark_connector", "controller", "wire", "storage")
#: Kafka's level names (LogLevelConfig.VALID_LOG_LEVELS) and the Python level each one sets.
LEVELS: Final[Mapping[str, int]] = {
    "TRACE": 5,
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARN": logging.WARNING,
    "ERROR": logging.ERROR,
    "FATAL": logging.CRITICAL,
}


class LoggerConfigError(Exception):
    """A logger change refused: ``code`` and the message are what the client sees for the resource."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def level_name(level: int) -> str:
    """Kafka's name for a Python level: the most verbose Kafka level that the Python level still lets through."""
    for name, value in LEVELS.items():
        if level <= value:
            return name
    return "FATAL"


def logger_names() -> list[str]:
    """``root`` then every Fjord logger of this process, sorted."""
    existing = logging.root.manager.loggerDict
    names = {name for name in existing if name.split(".", 1)[0] in FJORD_PACKAGES}
    names.update(FJORD_PACKAGES)
    return [ROOT_LOGGER, *sorted(names)]


def _logger(name: str) -> logging.Logger:
    return logging.getLogger() if name == ROOT_LOGGER else logging.getLogger(name)


def describe_loggers(names: Iterable[str] | None = None) -> list[ConfigEntry]:
    """DescribeConfigs of the BROKER_LOGGER resource: every logger (or those of ``names`` that exist)."""
    known = logger_names()
    wanted = known if names is None else [n for n in dict.fromkeys(names) if n in set(known)]
    out = []
    for name in wanted:
        level = level_name(_logger(name).getEffectiveLevel())
        source = ConfigSource.DYNAMIC_BROKER_LOGGER_CONFIG
        out.append(
            ConfigEntry(
                name, level, source, config_type=ConfigType.STRING, synonyms=(ConfigSynonym(name, level, source),)
            )
        )
    return out


def _check(name: str, op: int, value: str | None, known: set[str]) -> None:
    """Kafka's checks of one logger operation (ConfigAdminManager.validateLogLevelConfigs)."""
    if op == IncrementalOp.SET:
        if name not in known:
            raise LoggerConfigError(ErrorCode.invalid_config, f"Logger {name} does not exist!")
        if value not in LEVELS:
            raise LoggerConfigError(
                ErrorCode.invalid_config,
                f"Cannot set the log level of {name} to {value} as it is not a supported log level. "
                f"Valid log levels are {', '.join(LEVELS)}",
            )
    elif op == IncrementalOp.DELETE:
        if name not in known:
            raise LoggerConfigError(ErrorCode.invalid_config, f"Logger {name} does not exist!")
        if name == ROOT_LOGGER:
            raise LoggerConfigError(
                ErrorCode.invalid_request, f"Removing the log level of the {ROOT_LOGGER} logger is not allowed"
            )
    elif op in (IncrementalOp.APPEND, IncrementalOp.SUBTRACT):
        kind = "APPEND" if op == IncrementalOp.APPEND else "SUBTRACT"
        raise LoggerConfigError(
            ErrorCode.invalid_request, f"{kind} operation is not allowed for the BROKER_LOGGER resource"
        )
    else:
        raise LoggerConfigError(
            ErrorCode.invalid_request, f"Unknown operation type {op} is not allowed for the BROKER_LOGGER resource"
        )


def alter_loggers(
    changes: Mapping[str, str | None], ops: Mapping[str, int], *, validate_only: bool
) -> list[tuple[str, str | None]]:
    """Applies IncrementalAlterConfigs operations to this process's loggers, all or none: every operation is
    checked before any is applied. Returns (logger, new Kafka level or None when unset), for the caller's log;
    raises :class:`LoggerConfigError` when one is refused."""
    known = set(logger_names())
    for name, value in changes.items():
        _check(name, ops.get(name, IncrementalOp.SET), value, known)
    if validate_only:
        return []
    applied: list[tuple[str, str | None]] = []
    for name, value in changes.items():
        if ops.get(name, IncrementalOp.SET) == IncrementalOp.SET and value is not None:
            _logger(name).setLevel(LEVELS[value])
            applied.append((name, value))
        else:
            _logger(name).setLevel(logging.NOTSET)
            applied.append((name, None))
    return applied
