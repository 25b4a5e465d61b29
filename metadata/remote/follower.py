"""What a broker's client of the quorum needs of its local copy of the committed metadata.

The copy is either a Raft observer of the metadata log (a broker-only node) or the combined node's own voter; both
replay committed records into a controller state machine, which is the controller role's business
(``controller.metadata_replica``). The client sees only this protocol, so the shared layer never imports the
controller: the node builds the follower and hands it over.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from metadata.controller_api import ImageListener
from metadata.image import MetadataImage


class MetadataFollower(Protocol):
    """The broker's local copy of the committed metadata, wherever it comes from."""

    @property
    def image(self) -> MetadataImage: ...

    @property
    def leader_id(self) -> int | None:
        """The Raft leader this copy last heard of (where writes go first), None if none is known."""
        ...

    @property
    def applied_end(self) -> int:
        """Every committed entry below this offset is applied to :attr:`image`."""
        ...

    def subscribe(self, listener: ImageListener) -> None:
        """``listener`` is told of every image change the copy applies."""
        ...

    @property
    def kraft_version(self) -> int:
        """The quorum's KIP-853 level as this copy's log says it (1: the voters may change)."""
        ...

    def watch_voters(self, callback: Callable[[Mapping[int, tuple[str, int]]], None]) -> None:
        """``callback`` gets every voter's CONTROLLER listener whenever the voters change (KIP-853)."""
        ...

    async def wait_applied(self, end: int, timeout: float) -> None: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def failed(self) -> Exception:
        """Returns, with its error, only once the copy has stopped following for good (its log could not be
        written): the broker's metadata would stay as it is from then on."""
        ...
