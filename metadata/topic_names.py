"""Kafka's rules for a topic's name (``Topic.validate``), in one place for both roles: the controller refuses to
create a topic so named, and a broker answers a Metadata request for one it will not create with
INVALID_TOPIC_EXCEPTION rather than UNKNOWN_TOPIC_OR_PARTITION (a client then fails at once instead of waiting for
a topic that can never exist)."""

from __future__ import annotations

import re

from kio.schema.errors import ErrorCode

from metadata.errors import ControllerError

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")


def validate_topic_name(name: str) -> None:
    """Raises :class:`ControllerError` (INVALID_TOPIC_EXCEPTION, with Kafka's message) for an illegal name."""
    if not name:
        raise ControllerError(ErrorCode.invalid_topic_exception, "Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise ControllerError(ErrorCode.invalid_topic_exception, 'Topic name cannot be "." or ".."')
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise ControllerError(
            ErrorCode.invalid_topic_exception,
            f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters, topic name: {name}",
        )
    if not _LEGAL_TOPIC_NAME.fullmatch(name):
        raise ControllerError(
            ErrorCode.invalid_topic_exception,
            f"Topic name \"{name}\" is illegal, it contains a character other than ASCII alphanumerics, '.', '_' "
            "and '-'",
        )


def is_legal_topic_name(name: str) -> bool:
    """Whether some topic could have ``name`` (:func:`validate_topic_name` passes)."""
    try:
        validate_topic_name(name)
    except ControllerError:
        return False
    return True
