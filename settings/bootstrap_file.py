"""``bootstrap.properties``: what ``fjord storage format`` leaves in a node's metadata directory besides
``meta.properties``, as Kafka's ``kafka-storage format`` leaves its bootstrap checkpoints.

Its presence says the directory was formatted on purpose, with a cluster id the operator chose (``-t``): that id
then stands at every start, where an unformatted quorum node derives its id from the voters as written
(``settings.meta_properties``). A controller's file also names the quorum's voters it was formatted with
(``--initial-controllers``, or itself alone for ``--standalone``): with Kafka 4's files, which name only
``controller.quorum.bootstrap.servers``, they are the voters (``settings.quorum_voters``). Fjord serves no later
voter change (KIP-853's AddRaftVoter), so these stay the voters for the directory's life, as a static
``controller.quorum.voters`` would.

A broker's or combined node's file may also hold what the format's ``--add-scram`` and ``--feature`` asked for a new
cluster (Kafka writes them as records of its bootstrap checkpoint). The node applies them at its first start as it
applies ``fjord server start``'s options of the same names (``node.process``), then rewrites the file without them:
a user deleted later does not come back at the next restart, and the salted passwords do not stay on disk. The file
is written readable by its owner alone while it holds them.

A leaf of ``settings``: :mod:`settings.server` reads it while it resolves the voters, before any node runs.
"""

from __future__ import annotations

import base64
import binascii
import os
from dataclasses import dataclass, replace
from pathlib import Path

from settings.quorum_voters import QuorumVoter, parse_voters
from settings.scram_option import AddScram, check_iterations
from storage.config import ConfigError, read_properties
from storage.durable import write_atomically
from wire.sasl.scram import MECHANISMS

BOOTSTRAP_PROPERTIES = "bootstrap.properties"
#: The directory's identity beside it (``settings.meta_properties`` reads and writes it): named here, in the leaf,
#: so that ``settings.server`` can tell a directory a node has run from without importing that module.
META_PROPERTIES = "meta.properties"
_CLUSTER_ID = "cluster.id"
_VOTERS = "initial.controllers"
_SCRAM = "add.scram."  # + an index: MECHANISM,ITERATIONS,base64(name),base64(salt),base64(salted password)
_FEATURE = "feature."  # + the feature's name: its level


@dataclass(frozen=True, slots=True)
class Bootstrap:
    """A formatted directory's bootstrap: its cluster id, and the voters a controller was formatted with (empty for
    a broker-only node, which finds them through its bootstrap servers)."""

    cluster_id: str
    voters: tuple[QuorumVoter, ...] = ()
    #: ``--add-scram`` and ``--feature`` (``name=level``, as the option takes it) not yet applied.
    scram: tuple[AddScram, ...] = ()
    features: tuple[str, ...] = ()

    def applied(self) -> Bootstrap:
        """This bootstrap once the node applied its SCRAM users and feature levels."""
        return replace(self, scram=(), features=())


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
    scram = tuple(_read_scram(path, key, props[key]) for key in sorted(props) if key.startswith(_SCRAM))
    features = tuple(f"{key.removeprefix(_FEATURE)}={props[key]}" for key in sorted(props) if key.startswith(_FEATURE))
    return Bootstrap(cluster_id, voters, scram, features)


def write_bootstrap(directory: str | os.PathLike[str], bootstrap: Bootstrap) -> Path:
    """Atomically, as ``meta.properties`` is written; returns the file's path."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    voters = ",".join(f"{v.node_id}@{_host(v.host)}:{v.port}" for v in bootstrap.voters)
    lines = ["# written by fjord storage format", f"{_CLUSTER_ID}={bootstrap.cluster_id}", f"{_VOTERS}={voters}"]
    lines += [f"{_SCRAM}{i}={_scram_text(c)}" for i, c in enumerate(bootstrap.scram)]
    lines += [f"{_FEATURE}{name}={level}" for name, _, level in (f.partition("=") for f in bootstrap.features)]
    path = folder / BOOTSTRAP_PROPERTIES
    write_atomically(path, "\n".join([*lines, ""]).encode("utf-8"), mode=0o600 if bootstrap.scram else 0o666)
    return path


def _scram_text(credential: AddScram) -> str:
    encoded = (base64.b64encode(b).decode() for b in (credential.name.encode(), credential.salt,
                                                      credential.salted_password))
    return ",".join((credential.mechanism.name, str(credential.iterations), *encoded))


def _read_scram(path: Path, key: str, text: str) -> AddScram:
    """One credential back; ConfigError names the file and the key, never the value."""
    parts = text.split(",")
    mechanism = MECHANISMS.get(parts[0]) if len(parts) == 5 else None
    try:
        if mechanism is None or not parts[1].isdigit():
            raise ValueError
        name, salt, salted = (base64.b64decode(p, validate=True) for p in parts[2:])
        credential = AddScram(mechanism, name.decode("utf-8"), int(parts[1]), salt, salted)
    except (ValueError, binascii.Error):
        raise ConfigError(f"{path}: {key} is not a credential fjord storage format wrote") from None
    try:
        check_iterations(credential.iterations, credential.name)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {key}: {exc}") from None
    return credential


def _host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
