"""The dataclass methods' code kept between runs (``node.dataclass_code``): a run finds the code the last run of the
same command compiled, the classes it makes behave as compiled ones, a changed class compiles its new methods, and
a cache that cannot be read or written only costs the compile."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from node.dataclass_code import DataclassCode, cache_path
from testkit.node_process import REPO


def _define(cache: DataclassCode, monkeypatch: pytest.MonkeyPatch, *, extra_field: bool = False) -> type:
    """A frozen, slotted dataclass with a default and a default factory, its methods made through ``cache``."""
    monkeypatch.setattr(dataclasses, "exec", cache.exec, raising=False)
    try:
        namespace: dict[str, object] = {"__annotations__": {"name": str, "size": int, "tags": list[str]}}
        namespace["size"] = 3
        namespace["tags"] = dataclasses.field(default_factory=list, hash=False)
        if extra_field:
            namespace["__annotations__"]["epoch"] = int  # type: ignore[index]
            namespace["epoch"] = -1
        cls = type("Partition", (), namespace)
        return dataclasses.dataclass(frozen=True, slots=True)(cls)
    finally:
        monkeypatch.delattr(dataclasses, "exec")


def _behaves_as_compiled(cls: type) -> None:
    first, same, other = cls("a"), cls("a"), cls("b", 4, ["x"])
    assert (first.name, first.size, first.tags) == ("a", 3, [])
    assert first == same and hash(first) == hash(same) and first != other
    assert repr(other).startswith("Partition(name='b', size=4, tags=['x']")
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.size = 5
    assert first.tags is not same.tags  # the factory runs for each instance


def test_a_run_finds_the_code_the_last_run_compiled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    path = tmp_path / "fjord-server.dataclass-code"
    first_run = DataclassCode(path)
    _behaves_as_compiled(_define(first_run, monkeypatch))
    compiled = first_run.compiled
    assert compiled >= 5  # __init__, __repr__, __eq__, __hash__, __setattr__, __delattr__
    first_run.save()
    assert path.exists()

    second_run = DataclassCode(path)
    _behaves_as_compiled(_define(second_run, monkeypatch))
    assert second_run.compiled == 0
    written = path.stat().st_mtime_ns
    second_run.save()  # nothing new: the file is left as it is
    assert path.stat().st_mtime_ns == written

    # A class that changed compiles its methods again (their texts name the new field), and the file then holds
    # what this run used, not the old class's methods.
    third_run = DataclassCode(path)
    changed = _define(third_run, monkeypatch, extra_field=True)
    assert third_run.compiled == compiled
    assert changed("a").epoch == -1 and changed("a", epoch=2) != changed("a")
    third_run.save()
    assert set(DataclassCode(path).known) == set(third_run.used)
    assert not set(third_run.used) & set(second_run.used)


def test_an_unreadable_cache_is_compiled_over(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    path = tmp_path / "fjord-server.dataclass-code"
    path.write_bytes(b"\x00not marshal data")
    cache = DataclassCode(path)
    assert cache.known == {}
    _behaves_as_compiled(_define(cache, monkeypatch))
    cache.save()
    assert DataclassCode(path).known.keys() == cache.used.keys()


def test_nothing_is_written_where_python_writes_no_bytecode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "fjord-server.dataclass-code"
    cache = DataclassCode(path)
    _define(cache, monkeypatch)
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    cache.save()
    assert not path.exists()


def test_a_fjord_process_keeps_its_commands_dataclass_code_beside_its_bytecode(tmp_path: Path) -> None:
    """Two runs of ``fjord metadata --help`` with a bytecode cache directory: the first writes the command's file
    there, the second compiles nothing and so leaves it untouched."""
    env = dict(os.environ, PYTHONPYCACHEPREFIX=str(tmp_path))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    command = [sys.executable, "-m", "node.cli", "metadata", "--help"]
    subprocess.run(command, cwd=REPO, env=env, check=True, capture_output=True, timeout=60)
    written = list(tmp_path.rglob("fjord-metadata.*"))
    assert len(written) == 1, written
    relative = cache_path("metadata")
    assert relative is not None and written[0].name == relative.name
    assert len(DataclassCode(written[0]).known) > 100
    before = written[0].stat().st_mtime_ns
    subprocess.run(command, cwd=REPO, env=env, check=True, capture_output=True, timeout=60)
    assert written[0].stat().st_mtime_ns == before
    assert not list(tmp_path.rglob("*.tmp"))
