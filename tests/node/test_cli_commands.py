"""The ``fjord`` command table: each command is registered by the module :data:`node.cli.COMMANDS` names, so
running a command imports only that module, and ``fjord server start`` does not import the operator tools."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import subprocess
import sys

import pytest

import node.commands
from node.cli import COMMANDS
from testkit.node_process import REPO
from tests.node.cli_exit import run_to_exit


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


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["features", "--bootstrap-server", "127.0.0.1:99999", "describe"], "--bootstrap-server"),
        (["features", "--bootstrap-controller", "127.0.0.1:65536", "describe"], "--bootstrap-controller"),
        (["metadata-quorum", "--bootstrap-controller", "127.0.0.1:70000", "describe", "--status"],
         "--bootstrap-controller"),
        (["share-groups", "--bootstrap-server", "127.0.0.1:99999", "--list"], "--bootstrap-server"),
        (["metadata", "shell", "--controllers", "1@127.0.0.1:99999", "-c", "ls"], "--controllers"),
        (["metadata", "shell", "--bootstrap", "127.0.0.1:99999", "-c", "ls"], "--bootstrap"),
        (["cluster", "drain", "--bootstrap-server", "127.0.0.1:99999", "--node", "1"], "--bootstrap-server"),
    ],
)
def test_an_address_with_a_port_past_65535_is_named_not_a_traceback(args: list[str], option: str) -> None:
    """Every operator command that connects takes its addresses through one parser, which refuses a port the
    socket layer would (before, the socket's OverflowError reached the terminal as a traceback)."""
    result = run_to_exit([sys.executable, "-m", "node.cli", *args])
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.strip()]
    assert line.startswith("fjord") and f"{option}: " in line and "a port from 0 to 65535" in line, line
