"""The quorum's voters as the log says them (KIP-853): a voter set, its changes as log entries, and its history.

A static quorum's voters are fixed by configuration until it writes them to the log (``kraft.version`` 1: the
first VOTERS entry repeats them). A dynamic one's are whatever the last VOTERS entry of the log says, committed or
not, as in KRaft: a leader appends the new set and counts its majority from that entry on, one change at a time (the
next waits until this one is committed, so any two consecutive sets share a majority). A follower that truncates a
VOTERS entry away goes back to the set before it. The set in effect where a snapshot ends
travels in the snapshot (:func:`wrap_snapshot`), so a log trimmed below its last change, or a replica that installs the
snapshot, still knows its voters.

A voter is its node id, the id of its metadata directory (KIP-853 tells a re-formatted disk of the same node apart;
None where the quorum was formed without them) and its CONTROLLER listener endpoints, which is how the transports of
the other voters and of the brokers reach a voter added after they started.
"""

from __future__ import annotations

import json
import struct
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from wire.log_text import untrusted


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A listener of a voter: its name (a CONTROLLER listener's), host and port."""

    name: str
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class Voter:
    node_id: int
    directory_id: uuid.UUID | None = None
    endpoints: tuple[Endpoint, ...] = ()

    def matches(self, node_id: int, directory_id: uuid.UUID | None) -> bool:
        """Is this the replica Kafka's ReplicaKey ``(node_id, directory_id)`` names? An unknown directory id on
        either side matches any, as for a quorum formed without directory ids."""
        if node_id != self.node_id:
            return False
        return directory_id is None or self.directory_id is None or directory_id == self.directory_id

    def describe(self) -> str:
        """For log lines: the endpoints are what an AddRaftVoter or UpdateRaftVoter request said."""
        where = untrusted(",".join(f"{e.host}:{e.port}" for e in self.endpoints)) or "no endpoint"
        directory = f", directory {self.directory_id}" if self.directory_id is not None else ""
        return f"{self.node_id}@{where}{directory}"


@dataclass(frozen=True, slots=True)
class VoterSet:
    voters: tuple[Voter, ...]

    @classmethod
    def of(cls, voters: Iterable[Voter | int]) -> VoterSet:
        """A set from voters, or bare node ids (a quorum that knows its peers' addresses elsewhere)."""
        items = [v if isinstance(v, Voter) else Voter(v) for v in voters]
        if len({v.node_id for v in items}) != len(items):
            raise ValueError("a voter set names a node twice")
        return cls(tuple(sorted(items, key=lambda v: v.node_id)))

    @property
    def ids(self) -> frozenset[int]:
        return frozenset(v.node_id for v in self.voters)

    def get(self, node_id: int) -> Voter | None:
        return next((v for v in self.voters if v.node_id == node_id), None)

    def with_voter(self, voter: Voter) -> VoterSet:
        return VoterSet.of([*self.voters, voter])

    def without(self, node_id: int) -> VoterSet:
        return VoterSet.of(v for v in self.voters if v.node_id != node_id)

    def addresses(self, listener: str | None = None) -> dict[int, tuple[str, int]]:
        """Each voter's endpoint of ``listener`` (the quorum's CONTROLLER listener), else its first, for a
        transport."""
        out: dict[int, tuple[str, int]] = {}
        for voter in self.voters:
            named = [e for e in voter.endpoints if e.name == listener] or list(voter.endpoints[:1])
            if named:
                out[voter.node_id] = (named[0].host, named[0].port)
        return out

    def describe(self) -> str:
        return ", ".join(v.describe() for v in self.voters)


def encode_voters(voters: VoterSet) -> bytes:
    """A VOTERS entry's data (the wire carries it as Kafka's control record type 6)."""
    return json.dumps(
        [
            {
                "id": v.node_id,
                "directory": str(v.directory_id) if v.directory_id is not None else None,
                "endpoints": [[e.name, e.host, e.port] for e in v.endpoints],
            }
            for v in voters.voters
        ],
        separators=(",", ":"),
    ).encode()


def decode_voters(data: bytes) -> VoterSet:
    """Inverse of :func:`encode_voters`; raises ValueError for anything else."""
    try:
        items = json.loads(data)
        return VoterSet.of(
            Voter(
                int(item["id"]),
                uuid.UUID(item["directory"]) if item["directory"] is not None else None,
                tuple(Endpoint(str(name), str(host), int(port)) for name, host, port in item["endpoints"]),
            )
            for item in items
        )
    except (ValueError, TypeError, KeyError) as exc:
        raise ValueError(f"not a voter set: {exc}") from exc


_SNAPSHOT_MAGIC: Final = b"\xffRVS"
"""Starts a snapshot that carries its voter set. No state machine's snapshot of Fjord starts with 0xFF: the
metadata snapshot's first bytes are a frame length, and 0xFF... would be one of 4 GiB or more."""
_HEADER_LENGTH: Final = struct.Struct(">I")


def wrap_snapshot(voters: VoterSet | None, data: bytes) -> bytes:
    """The snapshot Raft keeps and ships: the state machine's ``data``, after the voter set in effect where it ends
    when that set came from the log (None: the configured voters still stand, and the data is kept as it is)."""
    if voters is None:
        return data
    header = encode_voters(voters)
    return _SNAPSHOT_MAGIC + _HEADER_LENGTH.pack(len(header)) + header + data


def unwrap_snapshot(stored: bytes) -> tuple[VoterSet | None, bytes]:
    """Inverse of :func:`wrap_snapshot`: the voter set (None if the snapshot carries none) and the state's data."""
    if not stored.startswith(_SNAPSHOT_MAGIC):
        return None, stored
    start = len(_SNAPSHOT_MAGIC) + _HEADER_LENGTH.size
    (length,) = _HEADER_LENGTH.unpack_from(stored, len(_SNAPSHOT_MAGIC))
    return decode_voters(stored[start : start + length]), stored[start + length :]


class VoterHistory:
    """The voter sets of one log: the configured set (``offset`` -1), or a snapshot's at its last offset, then one
    per VOTERS entry at that entry's offset. The latest is the set in effect."""

    def __init__(self, base: VoterSet, offset: int = -1, *, from_log: bool = False) -> None:
        self._sets: list[tuple[int, VoterSet, bool]] = [(offset, base, from_log)]

    @property
    def latest(self) -> VoterSet:
        return self._sets[-1][1]

    @property
    def latest_offset(self) -> int:
        """The offset of the entry that set the voters in effect (-1: the configured ones)."""
        return self._sets[-1][0]

    @property
    def latest_from_log(self) -> bool:
        """Whether the log (a VOTERS entry, or a snapshot's set) made the voters in effect, not the configuration."""
        return self._sets[-1][2]

    def append(self, offset: int, voters: VoterSet) -> None:
        self._sets.append((offset, voters, True))

    def truncate(self, end: int) -> None:
        """The log lost its entries from ``end`` on: the sets they made are gone (never the base)."""
        while len(self._sets) > 1 and self._sets[-1][0] >= end:
            self._sets.pop()

    def at(self, offset: int) -> tuple[VoterSet, bool]:
        """The set in effect at ``offset`` (the last entry at or below it) and whether the log made it."""
        found = self._sets[0]
        for item in self._sets:
            if item[0] > offset:
                break
            found = item
        return found[1], found[2]

    def trim_prefix(self, start: int) -> None:
        """The log now starts at ``start`` (a snapshot covers the rest): keep the set in effect at ``start - 1``."""
        voters, from_log = self.at(start - 1)
        self._sets = [(start - 1 if from_log else -1, voters, from_log)] + [s for s in self._sets if s[0] >= start]

    def reset(self, voters: VoterSet | None, offset: int, configured: VoterSet) -> None:
        """A snapshot ending at ``offset + 1`` replaced the log: its voters, or the configured ones if it has none."""
        self._sets = [(offset, voters, True)] if voters is not None else [(-1, configured, False)]

    def snapshot_voters(self, end_offset: int) -> VoterSet | None:
        """What a snapshot ending at ``end_offset`` carries (:func:`wrap_snapshot`)."""
        voters, from_log = self.at(end_offset - 1)
        return voters if from_log else None

