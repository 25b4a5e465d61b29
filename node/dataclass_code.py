"""The compiled methods of ``@dataclass`` classes, kept between runs of a ``fjord`` command as bytecode is.

``dataclasses`` writes each class's ``__init__``, ``__repr__``, ``__eq__``, ``__hash__`` and frozen ``__setattr__`` /
``__delattr__`` as source text and compiles it with ``exec`` when the class is defined. Python caches the bytecode of
modules (``__pycache__``), not of that text, so every process compiles it again: a node's start defines about 400
dataclasses (the project's and kio's), about 1,900 methods, and compiling them was 0.30 s of the 0.69 s its imports
took (2026-12-01, this 2-core machine), the largest single part of a restart after kill -9 before the node serves
(issue 25). CPython 3.13 compiles a class's methods in one ``exec``, which cuts the cost but does not remove it.

:func:`install` has this module's ``dataclasses`` look up the code compiled from each text in a cache file, compiling
only texts it has not seen, and :func:`save` writes the texts the process used with their code back, so the next run
of the same command finds all of them. The cache is keyed by the whole source text, so a changed class compiles its
new text, and a class created from the same text gets the same code object a compile would have made (the code
does not depend on the class: defaults, types and the class itself are passed to it as arguments). The file lives
beside ``node/cli.py``'s own bytecode (``PYTHONPYCACHEPREFIX`` and ``__pycache__`` as Python chooses), is named for
the command and the interpreter's cache tag (code objects are not portable between Python versions), is not
written where Python writes no bytecode (``PYTHONDONTWRITEBYTECODE``), and one that cannot be read is ignored: the
cache only ever saves time.

The hook is the name ``exec`` in the ``dataclasses`` module's globals, which its method builder calls (CPython 3.11
to 3.13): a module-level name there shadows the built-in for that module alone. Only a process of its own
(``node.cli.main`` run as ``fjord``) installs it; nothing is installed in a process that calls ``main`` in-process.
"""

from __future__ import annotations

import atexit
import builtins
import contextlib
import dataclasses
import importlib.util
import logging
import marshal
import os
import sys
import threading
from pathlib import Path
from types import CodeType
from typing import Any

logger = logging.getLogger(__name__)

#: Written into the file name: a change of the file's layout only makes older files unread.
FORMAT = 1


class DataclassCode:
    """One process's cache: ``known`` loaded from ``path``, ``used`` the texts this process compiled or found."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.known = _load(path)
        self.used: dict[str, CodeType] = {}
        self.compiled = 0  # texts not found in the file (the next run finds them once saved)
        self._saved_compiled = 0  # what ``compiled`` was at the last save

    def exec(self, source: Any, globals: Any = None, locals: Any = None, /) -> None:
        """``exec`` as ``dataclasses`` calls it: the source text's code from the cache, or compiled and kept."""
        if type(source) is not str:
            builtins.exec(source, globals, locals)
            return
        code = self.used.get(source) or self.known.get(source)
        if code is None:
            # As exec compiles a string: file "<string>", and no future flags (dataclasses has none to inherit).
            code = compile(source, "<string>", "exec", dont_inherit=True)
            self.compiled += 1
        self.used[source] = code
        builtins.exec(code, globals, locals)

    def save(self) -> None:
        """Writes the texts this process used, if it compiled any since it last saved (a class changed, or the first
        run): the file then holds what this command defines, and nothing a removed class once did. Atomic: two
        processes saving at once leave one whole file. A failure is logged at debug level and changes nothing."""
        compiled = self.compiled
        if compiled == self._saved_compiled or sys.dont_write_bytecode:
            return
        self._saved_compiled = compiled
        temporary = self.path.with_name(f"{self.path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            data = marshal.dumps(dict(self.used))  # a copy: a thread may define a class meanwhile
            self.path.parent.mkdir(parents=True, exist_ok=True)
            temporary.write_bytes(data)
            os.replace(temporary, self.path)
        except (OSError, ValueError) as exc:
            logger.debug("dataclass code cache %s not written: %s", self.path, exc)
            with contextlib.suppress(OSError):
                temporary.unlink()
            return
        logger.debug("dataclass code cache %s: %d methods written, %d of them compiled by this process",
                     self.path, len(self.used), self.compiled)


def _load(path: Path) -> dict[str, CodeType]:
    try:
        loaded = marshal.loads(path.read_bytes())
    except (OSError, EOFError, ValueError, TypeError):
        return {}
    if not isinstance(loaded, dict):
        return {}
    return {text: code for text, code in loaded.items() if type(text) is str and type(code) is CodeType}


def cache_path(command: str) -> Path | None:
    """Where the cache of ``command`` is kept: beside the bytecode of this package, named for the command and the
    interpreter. None where the interpreter keeps no bytecode cache (no cache tag)."""
    try:
        bytecode = importlib.util.cache_from_source(__file__)
    except NotImplementedError:
        return None
    tag = sys.implementation.cache_tag
    return Path(bytecode).parent / f"fjord-{command}.{tag}.dataclass-code-{FORMAT}"


_installed: DataclassCode | None = None


def install(command: str) -> DataclassCode | None:
    """Has every ``@dataclass`` defined from now on in this process take its methods' code from the cache of
    ``command``; the code it compiles is written by :func:`save` (called at exit, and by a node once it serves).
    Installing again keeps the first cache."""
    global _installed  # one per process, as the dataclasses module it hooks
    if _installed is not None:
        return _installed
    path = cache_path(command)
    if path is None:
        return None
    _installed = DataclassCode(path)
    atexit.register(save)
    dataclasses.exec = _installed.exec  # type: ignore[attr-defined]  # shadows the built-in for dataclasses alone
    return _installed


def save() -> None:
    """Writes the installed cache if this process compiled something it did not hold (else does nothing)."""
    if _installed is not None:
        _installed.save()

