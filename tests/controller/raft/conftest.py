"""Make ``controller.raft`` importable from these tests.

pytest's default (prepend) import mode puts ``tests/`` on ``sys.path``; ``tests/controller/raft`` then looks like a
namespace portion of the real ``controller.raft`` package and hides it. Putting the repository root first makes the
regular package win; a namespace stand-in imported earlier in the session is replaced. (A ``pythonpath = ["."]``
pytest setting would make this unnecessary.)
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[3])
if sys.path[:1] != [ROOT]:
    sys.path.insert(0, ROOT)
for name in ("controller.raft", "controller"):
    module = sys.modules.get(name)
    if module is not None and getattr(module, "__file__", None) is None:
        del sys.modules[name]
importlib.import_module("controller.raft")
