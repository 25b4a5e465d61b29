"""``bootstrap.properties``: what ``fjord storage format`` leaves in a node's metadata directory besides
``meta.properties``, as Kafka's ``kafka-storage format`` leaves its bootstrap checkpoints.

Its presence says the directory was formatted on purpose, with a cluster id the operator chose (``-t``): that id
then stands at every start, where an unformatted quorum node derives its id from the voters as written
(``settings.meta_properties``). A controller's file also names the quorum's voters it was formatted with
(``--initial-controllers``, or itself alone for ``--standalone``): with Kafka 4's files, which name only
``controller.quorum.bootstrap.servers``, they are the voters (``settings.quorum_voters``). Fjord serves no later
voter change (KIP-853's AddRaftVoter), so these stay the voters for the directory's life, as a static
``controller.quorum.voters`` would.

A leaf of ``settings``: :mod:`settings.server` reads it while it resolves the voters, before any node runs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from settings.quorum_voters import QuorumVoter, parse_voters
from storage.config import ConfigError, read_properties
from storage.durable import write_atomically

BOOTSTRAP_PROPERTIES = "bootstrap.properties"
#: The directory's identity beside it (``settings.meta_properties`` reads and writes it): named here, in the leaf,
#: so that ``settings.server`` can tell a directory a node has run from without importing that module.
META_PROPERTIES = "meta.properties"
_CLUSTER_ID = "cluster.id"
_VOTERS = "initial.controllers"


@dataclass(frozen=True, slots=True)
class Bootstrap:
    """A formatted directory's bootstrap: its cluster id, and the voters a controller was formatted with (empty for
    a broker-only node, which finds them through its bootstrap servers)."""

    cluster_id: str
    voters: tuple[QuorumVoter, ...] = ()


def read_bootstrap(directory: str | os.PathLike[str]) -> Bootstrap | None:
    """The directory's bootstrap, None if ``fjord storage format`` never formatted it. ConfigError names the file."""
    path = Path(directory) / BOOTSTRAP_PROPERTIES
    if not path.exists():
        return None
    props = read_properties(path)
    cluster_id = props.get(_CLUSTER_ID, "")
    if not cluster_id:
        raise ConfigError(f"{path}: {_CLUSTER_ID} is missing")
    text = props.get(_VOTERS, "")
    try:
        voters = parse_voters([item for item in text.split(",") if item.strip()], f"{path}: {_VOTERS}")
    except ConfigError as exc:
        raise ConfigError(str(exc)) from None
    return Bootstrap(cluster_id, voters)


def write_bootstrap(directory: str | os.PathLike[str], bootstrap: Bootstrap) -> Path:
    """Atomically, as ``meta.properties`` is written; returns the file's path."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    voters = ",".join(f"{v.node_id}@{_host(v.host)}:{v.port}" for v in bootstrap.voters)
    text = f"# written by fjord storage format\n{_CLUSTER_ID}={bootstrap.cluster_id}\n{_VOTERS}={voters}\n"
    path = folder / BOOTSTRAP_PROPERTIES
    write_atomically(path, text.encode("utf-8"))
    return path


def _host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
