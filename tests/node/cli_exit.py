"""Running ``fjord`` to its exit, and checking that it failed with one ``fjord:`` line and no traceback."""

from __future__ import annotations

import subprocess

from testkit.node_process import REPO


def run_to_exit(args: list[str], timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, check=False, cwd=REPO, capture_output=True, text=True, timeout=timeout)


def assert_one_line_error(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert result.returncode == 1, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip() and " WARNING " not in line]
    errors = [line for line in lines if line.startswith("fjord:")]
    assert len(errors) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in errors[0], errors[0]
