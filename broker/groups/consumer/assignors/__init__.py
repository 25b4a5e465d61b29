"""The server-side assignors a KIP-848 consumer group can use, by the name ``group.consumer.assignors`` and a
client's ``group.remote.assignor`` give them.

Each is a pure function of the group's members and topics (``broker/groups/consumer/assignment.py``), so the group
state machine calls whichever is configured without knowing it.
"""

from __future__ import annotations

from collections.abc import Mapping

from broker.groups.consumer.assignment import Assignor
from broker.groups.consumer.assignors.range import RangeAssignor
from broker.groups.consumer.assignors.uniform import UniformAssignor
from settings.consumer_groups import ASSIGNOR_NAMES

#: Every built-in assignor by name.
ASSIGNORS: Mapping[str, Assignor] = {a.name: a for a in (UniformAssignor(), RangeAssignor())}

#: Kafka's default ``group.consumer.assignors`` (the catalogue's, ``settings.consumer_groups``): the first is the
#: group's assignor when a member names none.
DEFAULT_ASSIGNOR_NAMES: tuple[str, ...] = ASSIGNOR_NAMES


def assignor_named(name: str) -> Assignor | None:
    """The built-in assignor called ``name``, or None (the coordinator answers UNSUPPORTED_ASSIGNOR)."""
    return ASSIGNORS.get(name)
