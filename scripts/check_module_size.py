"""Fails when a module of Fjord is longer than the limit: past it a module usually holds two ideas.

It checks the shipped packages and the code beside them that is read and changed as often: the tests, the
benchmarks, the testkit they share and these scripts (``ROOTS``). A test module past the limit holds two
behaviours as surely as a package module holds two ideas, and is as hard to find one's way in.

The limit and the modules allowed past it, each with the reason, are ``[tool.fjord.module-size]`` in
``pyproject.toml``::

    [tool.fjord.module-size]
    limit = 600
    exceptions = { "raft/core.py" = "one sans-I/O Raft state machine by design" }

An exception must still be needed: one that names a missing file or a module back under the limit fails the check
too, so the list never outlives its reasons. Run by ``make lint``; ``--root`` checks another tree (the tests do).
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The package folders ``make lint`` checks (pyproject.toml's ``[tool.setuptools.packages.find]``).
PACKAGES: tuple[str, ...] = (
    "node",
    "broker",
    "spark_connector",
    "controller",
    "metadata",
    "settings",
    "raft",
    "wire",
    "storage",
)
#: What ``make lint`` checks besides the packages: code that is not shipped but is read as much (a deliberate
#: choice, noted in pyproject.toml's table too).
SUPPORT: tuple[str, ...] = ("tests", "bench", "testkit", "scripts")
ROOTS: tuple[str, ...] = PACKAGES + SUPPORT
TABLE = "[tool.fjord.module-size]"


class ConfigError(Exception):
    """The table in pyproject.toml is missing or malformed."""


@dataclass(frozen=True, slots=True)
class Policy:
    limit: int
    #: Path relative to the root (``raft/core.py``) -> why it may be longer.
    exceptions: Mapping[str, str]


def load_policy(pyproject: Path) -> Policy:
    try:
        with pyproject.open("rb") as f:
            document = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{pyproject}: cannot read it: {exc}") from None
    table: Any = document.get("tool", {}).get("fjord", {}).get("module-size")
    if not isinstance(table, dict):
        raise ConfigError(f"{pyproject}: no {TABLE} table")
    limit = table.get("limit")
    if not isinstance(limit, int) or isinstance(limit, bool) or limit <= 0:
        raise ConfigError(f"{pyproject}: {TABLE} limit must be a positive integer, got {limit!r}")
    exceptions = table.get("exceptions", {})
    if not isinstance(exceptions, dict):
        raise ConfigError(f"{pyproject}: {TABLE} exceptions must be a table of path = reason")
    for path, reason in exceptions.items():
        if not isinstance(reason, str) or not reason.strip():
            raise ConfigError(f"{pyproject}: {TABLE} exception {path!r} needs its reason")
    return Policy(limit, dict(exceptions))


def line_count(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def modules(root: Path, folders: Sequence[str]) -> Iterator[Path]:
    """Every ``.py`` file under the folders that exist, sorted."""
    for name in folders:
        folder = root / name
        if folder.is_dir():
            yield from sorted(folder.rglob("*.py"))


def problems(root: Path, policy: Policy, folders: Sequence[str] = ROOTS) -> list[str]:
    """One line per module over the limit that is not an exception, and per exception that is no longer needed."""
    found: list[str] = []
    for path in modules(root, folders):
        name = path.relative_to(root).as_posix()
        lines = line_count(path)
        if lines > policy.limit and name not in policy.exceptions:
            found.append(f"{name}: {lines} lines, over the limit of {policy.limit} (split it by what it does)")
    for name in sorted(policy.exceptions):
        path = root / name
        if not path.is_file():
            found.append(f"{name}: listed as an exception in {TABLE} but does not exist; remove the entry")
            continue
        lines = line_count(path)
        if lines <= policy.limit:
            found.append(
                f"{name}: listed as an exception in {TABLE} but has {lines} lines, within the limit of "
                f"{policy.limit}; remove the entry"
            )
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--root", type=Path, default=Path(__file__).resolve().parent.parent, help="the tree to check (the repository)"
    )
    args = parser.parse_args(argv)
    root: Path = args.root
    try:
        policy = load_policy(root / "pyproject.toml")
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    found = problems(root, policy)
    for line in found:
        print(line, file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
