"""The ``fjord`` command table: each command is registered by the module :data:`node.cli.COMMANDS` names, so
running a command imports only that module, and ``fjord server start`` does not import the operator tools."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import subprocess
import sys

import node.commands
from node.cli import COMMANDS
from testkit.node_process import REPO


def _registered_by(module_name: str) -> set[str]:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    register = getattr(importlib.import_module(f"node.commands.{module_name}"), "register", None)
    if register is not None:
        register(sub)
    return set(sub.choices)


def test_every_command_is_listed_with_the_module_registering_it() -> None:
    for command, module_name in COMMANDS.items():
        assert _registered_by(module_name) == {command}, module_name
    listed = set(COMMANDS.values())
    # A module with commands of its own that is not listed is registered by a listed one (cluster -> drain).
    for info in pkgutil.iter_modules(node.commands.__path__):
        if info.name not in listed and _registered_by(info.name):
            assert any(info.name in (REPO / "node" / "commands" / f"{m}.py").read_text() for m in listed), info.name


def test_server_start_does_not_import_the_operator_tools() -> None:
    probe = (
        "import sys\n"
        "from node.cli import build_parser\n"
        "build_parser('server').parse_args(['server', 'start', '--help'])\n"
    )
    result = subprocess.run([sys.executable, "-c", probe.replace("'--help'", "'--log-level', 'INFO'") +
                             "print(sorted(m for m in sys.modules if m.startswith(('node.commands.', "
                             "'controller.shell', 'node.local_cluster', 'node.admin_client', 'storage.tools'))))"],
                            cwd=REPO, capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.strip() == "['node.commands.server']", result.stdout
