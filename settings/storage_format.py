"""``fjord storage format``: Kafka's ``kafka-storage format``, for the scripts and guides that run it before a node's
first start.

Fjord needs no format step (a node formats its directory on its first start, ``settings.meta_properties``), but a
Kafka 4 cluster's files name only ``controller.quorum.bootstrap.servers``, and their voters exist only once a format
has written them: ``--standalone`` (this controller alone) or ``--initial-controllers`` (a list given the same to
every controller). The format writes ``meta.properties`` with the operator's cluster id (``-t``) in each log
directory and ``bootstrap.properties`` (``settings.bootstrap_file``) in the metadata directory, as Kafka writes its
bootstrap checkpoint there. A controller formatted to join the quorum later (``--no-initial-controllers``) gets a
``bootstrap.properties`` naming no voter: it starts as an observer until ``fjord metadata-quorum add-controller``
adds it. Kafka's rules for which flags a node takes are kept, with one more: ``--add-scram`` and ``--feature``,
which Kafka's controllers apply, are a broker's or combined node's here (its first start applies them, as
``fjord server start``'s options of the same names), so a controller-only node refuses them rather than keep them
unused.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from settings.bootstrap_file import META_PROPERTIES, Bootstrap, write_bootstrap
from settings.config_key import ConfigValueError
from settings.kafka_uuid import is_kafka_uuid, new_kafka_uuid
from settings.keys import BROKER_KEYS
from settings.meta_properties import MetaProperties, read_meta_properties, write_meta_properties
from settings.quorum_voters import BOOTSTRAP_KEY, VOTERS_KEY, QuorumVoter, parse_initial_controllers
from settings.scram_option import AddScram
from settings.server import ServerConfig
from storage.config import ConfigError, parse_overrides, read_properties


@dataclass(frozen=True, slots=True)
class FormatRequest:
    """``kafka-storage format``'s options; ``scram`` and ``features`` are ``--add-scram`` salted and ``--feature``
    (``name=level``) validated by the caller (the feature levels a release supports are the wire layer's)."""

    cluster_id: str
    config: str | None = None
    overrides: tuple[str, ...] = ()
    standalone: bool = False
    initial_controllers: str | None = None
    no_initial_controllers: bool = False
    ignore_formatted: bool = False
    scram: tuple[AddScram, ...] = ()
    features: tuple[str, ...] = ()
    #: ``--release-version`` as given (its levels are in ``features``), for the messages that name the option.
    release_version: str | None = None


def format_storage(request: FormatRequest) -> list[str]:
    """Formats the node's directories; returns the lines to print, one per directory. Raises ConfigError with the
    one-line reason, as ``kafka-storage format`` fails, before anything is written."""
    if not is_kafka_uuid(request.cluster_id):
        raise ConfigError(f"--cluster-id: {request.cluster_id!r} is not a 22-character base64url UUID "
                          "(fjord storage random-uuid prints one)")
    modes = [flag for flag, given in (("--standalone", request.standalone),
                                      ("--initial-controllers", request.initial_controllers is not None),
                                      ("--no-initial-controllers", request.no_initial_controllers)) if given]
    if len(modes) > 1:
        raise ConfigError(f"{' and '.join(modes)}: give only one of them")
    props = read_properties(request.config) if request.config is not None else {}
    props.update(parse_overrides(request.overrides))
    controller = "controller" in _value(props, "process.roles")
    dynamic = VOTERS_KEY not in props and bool(_value(props, BOOTSTRAP_KEY))
    voter_flags = [flag for flag in modes if flag != "--no-initial-controllers"]  # -N: Kafka takes it anywhere
    if voter_flags and not dynamic:
        raise ConfigError(f"{voter_flags[0]}: the quorum's voters are given by {VOTERS_KEY} (a static quorum), or "
                          f"no {BOOTSTRAP_KEY} is named: format without {voter_flags[0]}")
    formatting: tuple[QuorumVoter, ...] | Literal["standalone", "joining"] | None = None
    directory_ids: dict[int, str] = {}
    if controller and dynamic:
        if not modes:
            raise ConfigError(f"Because {VOTERS_KEY} is not set on this controller, you must specify one of the "
                              "following: --standalone, --initial-controllers, or --no-initial-controllers.")
        if request.no_initial_controllers:
            formatting = "joining"
        elif request.standalone:
            formatting = "standalone"
        else:
            formatting, directory_ids = _initial(request.initial_controllers or "", props)
    elif request.standalone:
        raise ConfigError("--standalone: this node is not a controller (process.roles)")
    names = [text.partition("=")[0] for text in request.features]
    if len(set(names)) < len(names):
        raise ConfigError(f"--feature: {next(n for n in names if names.count(n) > 1)} is given twice")
    request = replace(request, features=_kraft_version_checked(request.features, dynamic_flags=bool(modes)))
    if "broker" not in _value(props, "process.roles"):
        given = "--add-scram" if request.scram else "--release-version" if request.release_version else (
            "--feature" if request.features else None)
        if given is not None:
            raise ConfigError(f"{given}: give it to a broker's or combined node's format, whose first start applies "
                              "it (this node is a controller only)")
    config = ServerConfig.from_properties(props, formatting=formatting)
    voters = config.voters if controller and dynamic else ()
    directory_id = directory_ids.get(config.node_id)
    return _write(config, request, voters, directory_id)


#: KIP-853's feature (``wire.api_versions.KRAFT_VERSION``, named here so that formatting needs no wire import).
KRAFT_VERSION_FEATURE = "kraft.version"
_DYNAMIC_FLAGS = "one of the flags --standalone, --initial-controllers, or --no-initial-controllers is used"


def _kraft_version_checked(features: tuple[str, ...], *, dynamic_flags: bool) -> tuple[str, ...]:
    """The other ``--feature`` levels, once a ``kraft.version`` among them is checked by Kafka's format rule: 1
    only with the flags that make a dynamic quorum, 0 only without them. The level is the quorum's, which those
    flags decide, so nothing of it is written."""
    for text in features:
        name, _, level = text.partition("=")
        if name != KRAFT_VERSION_FEATURE:
            continue
        if int(level) == 0 and dynamic_flags:
            raise ConfigError(f"Cannot set kraft.version to 0 if controller.quorum.voters is empty and "
                              f"{_DYNAMIC_FLAGS}. For dynamic controllers support, try removing the --feature flag "
                              "for kraft.version.")
        if int(level) > 0 and not dynamic_flags:
            raise ConfigError(f"Cannot set kraft.version to {level} unless controller.quorum.voters is empty and "
                              f"{_DYNAMIC_FLAGS}. For a static quorum, try removing the --feature flag for "
                              "kraft.version.")
    return tuple(text for text in features if text.partition("=")[0] != KRAFT_VERSION_FEATURE)


def _value(props: dict[str, str], name: str) -> Any:
    """A key as the node will read it: the file's value parsed, else the catalogue's default (``process.roles``
    and ``node.id`` have Fjord's embedded defaults)."""
    key = BROKER_KEYS[name]
    if name not in props:
        return key.default
    try:
        return key.parse(props[name])
    except ConfigValueError as exc:
        raise ConfigError(str(exc)) from None


def _initial(text: str, props: dict[str, str]) -> tuple[tuple[QuorumVoter, ...], dict[int, str]]:
    voters, directory_ids = parse_initial_controllers(text)
    node_id = _value(props, "node.id")
    if node_id not in {v.node_id for v in voters}:
        raise ConfigError(f"--initial-controllers: this controller (node.id {node_id}) is not among them: format it "
                          "with --no-initial-controllers to add it to the running quorum later "
                          "(fjord metadata-quorum add-controller)")
    return voters, directory_ids


def _write(
    config: ServerConfig, request: FormatRequest, voters: tuple[QuorumVoter, ...], directory_id: str | None
) -> list[str]:
    """``directory_id``: the metadata directory's, as ``--initial-controllers`` gave it for this node."""
    directories = _unique([*config.log_dirs, config.metadata_dir])
    formatted = [d for d in directories if (d / META_PROPERTIES).exists()]
    if formatted and not request.ignore_formatted:
        raise ConfigError(f"Log directory {formatted[0]} is already formatted. Use --ignore-formatted to ignore "
                          "this directory and format the others.")
    for directory in formatted:
        existing = read_meta_properties(directory)
        if existing is not None and existing.cluster_id != request.cluster_id:
            raise ConfigError(f"Log directory {directory} is formatted with cluster id {existing.cluster_id}, not "
                              f"{request.cluster_id}: a node's directories belong to one cluster")
    if config.metadata_dir in formatted and (request.scram or request.features):
        given = "--add-scram" if request.scram else "--release-version" if request.release_version else "--feature"
        raise ConfigError(f"{given}: the metadata directory {config.metadata_dir} is formatted already, so it would "
                          f"not be applied: give it to fjord server start")
    todo = [d for d in directories if d not in formatted]
    if not todo:
        return ["All of the log directories are already formatted."]
    lines = []
    for directory in todo:
        try:
            metadata = directory == config.metadata_dir
            if metadata:  # first: meta.properties alone would read as formatted
                write_bootstrap(directory, Bootstrap(request.cluster_id, voters, request.scram, request.features))
            own_id = directory_id if metadata else None
            meta = MetaProperties(config.node_id, request.cluster_id, directory_id=own_id or new_kafka_uuid())
            write_meta_properties(directory, meta)
        except OSError as exc:
            raise ConfigError(f"formatting {directory}: {exc.strerror or exc}") from None
        if directory != config.metadata_dir:
            lines.append(f"Formatting data directory {directory} with cluster id {request.cluster_id}")
        elif voters:
            named = ",".join(f"{v.node_id}@{v.host}:{v.port}" for v in voters)
            lines.append(f"Formatting dynamic metadata voter directory {directory} with cluster id "
                         f"{request.cluster_id} and voters {named}{_first_start(request)}")
        elif config.joins_quorum:
            lines.append(f"Formatting metadata directory {directory} with cluster id {request.cluster_id}: this "
                         f"controller observes the quorum until fjord metadata-quorum add-controller adds it")
        else:
            lines.append(f"Formatting metadata directory {directory} with cluster id {request.cluster_id}"
                         f"{_first_start(request)}")
    return lines


def _first_start(request: FormatRequest) -> str:
    """What the node's first start will apply, for the metadata directory's line (names, never passwords)."""
    what = [f"SCRAM credentials of {', '.join(sorted({c.name for c in request.scram}))}"] if request.scram else []
    what += [f"feature levels {', '.join(request.features)}"] if request.features else []
    return f"; its first start applies {' and '.join(what)}" if what else ""


def _unique(paths: Iterable[Path]) -> list[Path]:
    out: list[Path] = []
    for path in paths:
        if path not in out:
            out.append(path)
    return out
