"""The package layers of README's Layout, as ``make lint`` enforces them: each planted violation must fail.

``lint-imports`` runs on a copy of the project's packages and its contracts (``pyproject.toml``), with one module
added that breaks a rule: the broker importing the controller (they are siblings), the controller importing the
broker, a shared layer importing a role (an upward import), and two modules of one package importing each other.
The unchanged copy passes, so each failure is the planted import's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("node", "broker", "spark_connector", "controller", "metadata", "settings", "raft", "wire", "storage")
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    copy = tmp_path_factory.mktemp("layers")
    for package in PACKAGES:
        shutil.copytree(ROOT / package, copy / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(ROOT / "pyproject.toml", copy / "pyproject.toml")
    return copy


def _lint(project: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(project)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"], cwd=project, env=env, capture_output=True, text=True, timeout=120,
        check=False,
    )


def _planted(project: Path, module: str, source: str) -> Path:
    path = project / (module.replace(".", "/") + ".py")
    path.write_text(f'"""Planted by tests/test_layers.py."""\n\n{source}\n')
    return path


def test_the_unchanged_packages_keep_every_contract(project: Path) -> None:
    result = _lint(project)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "BROKEN" not in result.stdout


@pytest.mark.parametrize(
    ("module", "source", "complaint"),
    [
        ("broker.planted", "import controller.controller", "broker is not allowed to import controller"),
        ("controller.planted", "import broker.broker", "controller is not allowed to import broker"),
        ("metadata.planted", "import broker.broker", "metadata is not allowed to import broker"),
        ("settings.planted", "import metadata.image", "settings is not allowed to import metadata"),
        ("spark_connector.planted", "import controller.controller",
         "spark_connector is not allowed to import controller"),
        ("storage.planted", "import wire.codec", "storage is not allowed to import wire"),
    ],
)
def test_a_planted_import_across_the_layers_fails(project: Path, module: str, source: str, complaint: str) -> None:
    planted = _planted(project, module, source)
    try:
        result = _lint(project)
    finally:
        planted.unlink()
    assert result.returncode != 0
    assert complaint in result.stdout, result.stdout


def test_a_planted_circle_between_two_modules_of_one_package_fails(project: Path) -> None:
    first = _planted(project, "metadata.planted_a", "import metadata.planted_b")
    second = _planted(project, "metadata.planted_b", "import metadata.planted_a")
    try:
        result = _lint(project)
    finally:
        first.unlink()
        second.unlink()
    assert result.returncode != 0
    assert "No import circles" in result.stdout and "BROKEN" in result.stdout, result.stdout
