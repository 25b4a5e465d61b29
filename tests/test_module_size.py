"""``scripts/check_module_size.py`` (run by ``make lint``) on a planted tree: a module past the limit fails the check
until pyproject.toml lists it with its reason, and an entry that is no longer needed fails it too; the tests, the
benchmarks, the testkit and the scripts are held to the limit as the packages are."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "check_module_size.py"


def _tree(root: Path, exceptions: dict[str, str] | None = None, *, lines: int = 601) -> None:
    (root / "broker").mkdir()
    (root / "broker" / "big.py").write_text("x = 1\n" * lines)
    (root / "broker" / "small.py").write_text("x = 1\n" * 600)
    _tree_exceptions(root, exceptions or {})


def _tree_exceptions(root: Path, exceptions: dict[str, str]) -> None:
    """Writes the tree's pyproject.toml with these exceptions."""
    entries = "".join(f'"{path}" = "{reason}"\n' for path, reason in exceptions.items())
    (root / "pyproject.toml").write_text(
        f"[tool.fjord.module-size]\nlimit = 600\n\n[tool.fjord.module-size.exceptions]\n{entries}"
    )


def _check(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--root", str(root)], capture_output=True, text=True, timeout=60, check=False
    )


def test_a_module_over_the_limit_fails_with_one_line_naming_it(tmp_path: Path) -> None:
    _tree(tmp_path)
    result = _check(tmp_path)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "broker/big.py: 601 lines, over the limit of 600 (split it by what it does)"
    ]


def test_a_module_listed_as_an_exception_passes(tmp_path: Path) -> None:
    _tree(tmp_path, {"broker/big.py": "one state machine by design"})
    result = _check(tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""


def test_an_exception_back_under_the_limit_fails(tmp_path: Path) -> None:
    _tree(tmp_path, {"broker/big.py": "one state machine by design"}, lines=600)
    result = _check(tmp_path)
    assert result.returncode == 1
    assert "broker/big.py: listed as an exception" in result.stderr
    assert "600 lines, within the limit of 600" in result.stderr


def test_an_exception_naming_a_missing_file_fails(tmp_path: Path) -> None:
    _tree(tmp_path, {"broker/big.py": "one state machine by design", "wire/gone.py": "was long"})
    result = _check(tmp_path)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "wire/gone.py: listed as an exception in [tool.fjord.module-size] but does not exist; remove the entry"
    ]


def test_an_exception_without_a_reason_is_refused(tmp_path: Path) -> None:
    _tree(tmp_path, {"broker/big.py": " "})
    result = _check(tmp_path)
    assert result.returncode == 2
    assert "needs its reason" in result.stderr


@pytest.mark.parametrize("folder", ["tests/broker", "bench", "testkit", "scripts"])
def test_a_long_module_beside_the_packages_fails_and_may_be_an_exception(tmp_path: Path, folder: str) -> None:
    _tree(tmp_path, {"broker/big.py": "one state machine by design"})
    (tmp_path / folder).mkdir(parents=True)
    (tmp_path / folder / "long.py").write_text("x = 1\n" * 601)
    result = _check(tmp_path)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"{folder}/long.py: 601 lines, over the limit of 600 (split it by what it does)"
    ]
    _tree_exceptions(tmp_path, {"broker/big.py": "one state machine by design", f"{folder}/long.py": "one table"})
    assert _check(tmp_path).returncode == 0


def test_a_long_file_elsewhere_is_not_checked(tmp_path: Path) -> None:
    _tree(tmp_path, {"broker/big.py": "one state machine by design"})
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "generated.py").write_text("x = 1\n" * 601)
    assert _check(tmp_path).returncode == 0
