"""Who the quorum's voters are, for one node: the configured ones, then what the log says (KIP-853).

The Raft core keeps the voter set and its history (``raft.voter_set``); this module is the node's side of it (a
controller's, and a broker's metadata replica's, which must reach a controller added after it started):

* the set a controller starts from: its configured voters (``controller.quorum.voters``, or the ones
  ``fjord storage format`` wrote), each with its CONTROLLER listener, so that a voter added later learns from the log
  where every voter is, and the others learn where it is;
* a joining controller (formatted with ``--no-initial-controllers``) knows no voter: until its log names them it asks
  its ``controller.quorum.bootstrap.servers`` with DescribeQuorum, as a broker does, and observes the quorum;
* when the set changes the transport reaches the new voters and DescribeQuorum and DescribeCluster name them;
* AddRaftVoter and RemoveRaftVoter (``controller.rpc.voter_changes``) become one VOTERS entry each, answered once it
  is committed. A static quorum (``controller.quorum.voters``, ``kraft.version`` 0) refuses them, as Kafka does,
  until UpdateFeatures upgrades it to ``kraft.version`` 1 (Kafka 4.1's ``kafka-features upgrade --feature
  kraft.version=1``): its configured voters are written to the log as one VOTERS entry, and from then on every node,
  restarted or not, takes the voters from the log and ignores ``controller.quorum.voters``'s list, as Kafka's do.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable, Mapping

from kio.schema.errors import ErrorCode

from controller.auto_join import auto_join_enabled, join_quorum
from controller.voter_endpoint import announce_endpoint
from metadata.errors import ControllerError
from metadata.remote.discovery import QuorumDiscoveryError, quorum_voters
from raft.core import AddVoter, RemoveVoter, UpdateVoter, VoterChange, WriteVoters
from raft.driver import NotLeaderError, RaftDriver, VoterChangeError
from raft.effects import Role
from raft.messages import Errors
from raft.voter_set import Endpoint, Voter, VoterSet
from settings.quorum_voters import BOOTSTRAP_KEY, VOTERS_KEY, parse_bootstrap_servers
from settings.server import ServerConfig
from wire.api_versions import kraft_version_level

logger = logging.getLogger(__name__)

PeersCallback = Callable[[Mapping[int, tuple[str, int]]], None]

#: Between rounds of asking the bootstrap servers, while a joining controller finds the quorum.
_DISCOVERY_BACKOFF_S = 1.0
#: How long a leader waits for the commit of its own moved listener (Kafka's UpdateRaftVoter default).
_OWN_UPDATE_TIMEOUT_S = 30.0


def _refused(error: Errors | ErrorCode | int, message: str) -> ControllerError:
    """An AddRaftVoter or RemoveRaftVoter that was not done, with Kafka's code for the reason."""
    return ControllerError(ErrorCode(int(error)), message)


def quorum_listener(config: ServerConfig) -> str:
    """The name of the listener voters reach each other on (the first of ``controller.listener.names``)."""
    return config.controller_listener_names[0] if config.controller_listener_names else "CONTROLLER"


def configured_voters(config: ServerConfig) -> VoterSet:
    """The voters a node starts from, with their CONTROLLER listener (none for a joining controller)."""
    listener = quorum_listener(config)
    return VoterSet.of(Voter(v.node_id, None, (Endpoint(listener, v.host, v.port),)) for v in config.voters)


class QuorumMembership:
    """One node's view of the voters: the addresses its transport, its answers and its channel use, kept current."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.node_id = config.node_id
        self._listener = quorum_listener(config)
        self.initial = configured_voters(config)
        self.addresses: dict[int, tuple[str, int]] = self.initial.addresses(self._listener)
        self.voter_set = self.initial
        self._driver: RaftDriver | None = None
        self._peers_changed: list[PeersCallback] = []
        self._tasks: list[asyncio.Task[None]] = []  # finding the quorum, joining it, announcing a moved listener
        self._voters_moved = asyncio.Event()

    def attach(self, driver: RaftDriver, peers_changed: PeersCallback) -> None:
        """``peers_changed(addresses)`` runs whenever a voter is added or moves (the transport's update)."""
        self._driver = driver
        self.watch(peers_changed)

    def watch(self, callback: PeersCallback) -> None:
        """``callback(addresses)`` runs whenever the voters change (a broker's channel to the active controller)."""
        self._peers_changed.append(callback)

    @property
    def kraft_version(self) -> int:
        """KIP-853's level: 1 when the voters may change (a dynamic quorum's configuration, or a log that names
        them since a static quorum was upgraded), else 0."""
        dynamic = self.config.dynamic_quorum or (self._driver is not None and self._driver.node.voters_from_log)
        return kraft_version_level(dynamic)

    # ---- the set changes ------------------------------------------------------------------------------------
    def voters_changed(self, voters: VoterSet) -> None:
        """The driver's ``on_voters``: at start with the log's set, then at every change the log makes."""
        self.voter_set = voters
        self._voters_moved.set()
        # A voter the set names without an endpoint (a static quorum's) keeps its configured address.
        self.addresses = {**{i: a for i, a in self.addresses.items() if i in voters.ids},
                          **voters.addresses(self._listener)}
        for callback in self._peers_changed:
            callback(self.addresses)

    # ---- a joining controller -------------------------------------------------------------------------------
    def start(self, directory_id: uuid.UUID | None = None) -> None:
        """A controller that knows no voter (formatted to be added later) starts asking where the quorum is; one
        with ``controller.quorum.auto.join.enable`` adds itself (``controller.auto_join``), as the voter of its
        metadata directory ``directory_id``; every voter of a dynamic quorum (or of an upgraded static one) announces
        a CONTROLLER listener that moved and a directory the set does not name (``controller.voter_endpoint``)."""
        if not self.voter_set.voters and self.config.joins_quorum:
            self._tasks.append(asyncio.create_task(self._discover(), name=f"controller-{self.node_id}-find-quorum"))
        if self.config.dynamic_quorum and auto_join_enabled(self.config):
            joining = join_quorum(self.config, directory_id, lambda: self.voter_set, lambda: self.addresses)
            self._tasks.append(asyncio.create_task(joining, name=f"controller-{self.node_id}-auto-join"))
        announcing = announce_endpoint(self.config, directory_id, lambda: self.voter_set, lambda: self.addresses,
                                       from_log=lambda: self.kraft_version >= 1, changed=self._voters_moved,
                                       update_if_leading=self._update_if_leading)
        self._tasks.append(asyncio.create_task(announcing, name=f"controller-{self.node_id}-announce-endpoint"))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()

    async def _discover(self) -> None:
        servers = list(parse_bootstrap_servers(self.config.value(BOOTSTRAP_KEY)))
        timeout_s = int(self.config.value("controller.quorum.request.timeout.ms")) / 1000
        attempts = 0
        listener = self._listener
        while self._driver is not None and not self.voter_set.voters:
            attempts += 1
            try:
                found = await quorum_voters(
                    servers, timeout_s, f"controller-{self.node_id}", tls=self.config.controller_client_tls(),
                    sasl=self.config.controller_client_sasl(),
                )
            except QuorumDiscoveryError as exc:
                if attempts in (1, 10) or attempts % 100 == 0:
                    logger.info("controller %d (joining): %s: %s; asking again", self.node_id, BOOTSTRAP_KEY, exc)
                await asyncio.sleep(_DISCOVERY_BACKOFF_S)
                continue
            found.pop(self.node_id, None)
            if not found:
                await asyncio.sleep(_DISCOVERY_BACKOFF_S)
                continue
            voters = VoterSet.of(Voter(i, None, (Endpoint(listener, h, p),)) for i, (h, p) in found.items())
            if self._driver.learn_voters(voters):
                logger.info("controller %d (joining) found the quorum through %s: voters %s; it observes until "
                            "an AddRaftVoter adds it", self.node_id, BOOTSTRAP_KEY, voters.describe())
            return

    # ---- AddRaftVoter and RemoveRaftVoter ----------------------------------------------------------------------
    def _check_dynamic(self, what: str) -> RaftDriver:
        if not self.kraft_version:
            raise _refused(
                ErrorCode.unsupported_version,
                f"Cluster doesn't support {what} because the kraft.version feature is 0: the voters are fixed by "
                f"{VOTERS_KEY} (upgrade kraft.version to 1 to change them, or start a dynamic quorum, which names "
                f"{BOOTSTRAP_KEY} and is formatted with fjord storage format)",
            )
        if self._driver is None:
            raise _refused(Errors.NOT_LEADER_OR_FOLLOWER, f"controller {self.node_id} is not started")
        return self._driver

    async def add(self, voter: Voter, timeout_s: float) -> None:
        """Adds ``voter`` (it must be fetching and caught up); returns once the new set is committed."""
        driver = self._check_dynamic("adding voter")
        self._check_listener(voter)
        await self._change(driver, AddVoter(voter), timeout_s, f"add voter {voter.describe()}")

    async def remove(self, node_id: int, directory_id: uuid.UUID | None, timeout_s: float) -> None:
        driver = self._check_dynamic("removing voter")
        await self._change(driver, RemoveVoter(node_id, directory_id), timeout_s, f"remove voter {node_id}")

    async def update(self, voter: Voter, leader_epoch: int, timeout_s: float) -> None:
        """A voter's new endpoints (UpdateRaftVoter), which must include the quorum's listener."""
        driver = self._check_dynamic("updating voter")
        self._check_listener(voter)
        await self._change(driver, UpdateVoter(voter, leader_epoch), timeout_s, f"update voter {voter.describe()}")

    async def write_voters(self, validate_only: bool, timeout_s: float) -> None:
        """``kraft.version`` 0 -> 1: the configured voters written to the log (a no-op once the log names them);
        returns once that entry is committed. Raises ControllerError with Kafka's code when it cannot be done."""
        if self._driver is None:
            raise _refused(Errors.NOT_LEADER_OR_FOLLOWER, f"controller {self.node_id} is not started")
        written = self._driver.node.voters_from_log
        await self._change(self._driver, WriteVoters(validate_only), timeout_s,
                           f"write voters {self.voter_set.describe()} to the log (kraft.version 1)", announce=False)
        if not (validate_only or written):
            logger.info("controller %d: kraft.version upgraded to 1: the voters (%s) are the log's from now on, and "
                        "every node ignores the list in %s", self.node_id, self.voter_set.describe(), VOTERS_KEY)

    async def _update_if_leading(self, voter: Voter) -> bool:
        """This node's own moved listener, when it leads (``controller.voter_endpoint``); False: it does not."""
        if self._driver is None or self._driver.role is not Role.LEADER:
            return False
        await self.update(voter, -1, _OWN_UPDATE_TIMEOUT_S)
        return True

    def _check_listener(self, voter: Voter) -> None:
        if not any(e.name == self._listener for e in voter.endpoints):
            named = ", ".join(e.name for e in voter.endpoints) or "none"
            raise _refused(Errors.INVALID_REQUEST, f"voter {voter.node_id}'s listeners ({named}) do not include "
                           f"the quorum's {self._listener} listener")

    async def _change(self, driver: RaftDriver, change: VoterChange, timeout_s: float, what: str, *,
                      announce: bool = True) -> None:
        try:
            async with asyncio.timeout(timeout_s):
                offset = await driver.change_voters(change)
        except NotLeaderError as exc:
            raise _refused(Errors.NOT_LEADER_OR_FOLLOWER, f"cannot {what}: {exc}") from None
        except VoterChangeError as exc:
            raise _refused(exc.error_code, f"cannot {what}: {exc}") from None
        except TimeoutError:
            raise _refused(Errors.REQUEST_TIMED_OUT, f"cannot {what}: not committed within {timeout_s:.1f} s") from None
        if announce:
            logger.info("controller %d: %s committed at offset %d; voters now %s", self.node_id,
                        what[0].upper() + what[1:], offset, self.voter_set.describe())

