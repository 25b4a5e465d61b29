"""``fjord cluster up``: starts a quorum and brokers, prints them and the bootstrap servers, serves clients, and
stops every process cleanly on SIGTERM or Ctrl-C (SIGINT) with exit status 0; the same --data-dir restarts the
same cluster."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from node.local_cluster import REPO_ROOT
from tests.cluster.cluster_support import FAST, consume_all, leaders, produce, topic_name
from tests.topics import create_topic

UP_TIMEOUT_S = 90.0


class ClusterUp:
    """A running ``fjord cluster up`` and the lines it printed."""

    def __init__(self, data_dir: Path, controllers: int = 0, brokers: int = 0, combined: int = 0) -> None:
        layout = ["--combined", str(combined)] if combined else ["--controllers", str(controllers)]
        if brokers or not combined:
            layout += ["--brokers", str(brokers)]
        argv = [sys.executable, "-m", "node.cli", "cluster", "up", *layout, "--data-dir", str(data_dir),
                "--timeout", "120"]
        for key, value in FAST.items():
            argv += ["--override", f"{key}={value}"]
        self.proc = subprocess.Popen(argv, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_for_line(self, pattern: str, timeout: float) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self._queue.get(timeout=0.5)
            except queue.Empty:
                continue
            if line is None:
                break
            self.lines.append(line)
            match = re.search(pattern, line)
            if match:
                return match
        raise AssertionError(f"no line matching {pattern!r}; output:\n" + "\n".join(self.lines))

    def stop(self, signum: int) -> int:
        self.proc.send_signal(signum)
        try:
            code = self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError("cluster up did not stop within 60 s:\n" + "\n".join(self.lines)) from None
        self.wait_for_line(r"stopped cleanly|did not stop cleanly", timeout=5)
        return code

    def pids(self) -> list[int]:
        table = self.lines[self.lines.index(next(x for x in self.lines if x.startswith("ROLE"))):]
        return [int(line.split()[3]) for line in table[1:] if line.startswith(("controller", "broker", "combined"))]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_cluster_up_serves_clients_and_stops_cleanly_on_sigterm_and_ctrl_c(tmp_path: Path) -> None:
    data_dir = tmp_path / "cluster"
    up = ClusterUp(data_dir, controllers=3, brokers=2)
    try:
        bootstrap = up.wait_for_line(r"bootstrap servers: (\S+)", UP_TIMEOUT_S).group(1)
        pids = up.pids()
        assert len(pids) == 5 and all(_alive(pid) for pid in pids)
        assert len(bootstrap.split(",")) == 2
        topic = topic_name("up")
        create_topic(bootstrap, topic, 2)
        leaders(bootstrap, topic, 2)
        acked = produce(bootstrap, topic, [f"u{i}" for i in range(50)])
        assert len(acked) == 50
        assert set(consume_all(bootstrap, topic, 2, acked, timeout=30)) == acked
    finally:
        code = up.stop(signal.SIGTERM)
    assert code == 0, "\n".join(up.lines)
    assert "all nodes stopped cleanly" in up.lines
    assert not [pid for pid in pids if _alive(pid)], "node processes outlived cluster up"

    # Offline, the Raft log of a controller and the one a broker replicated as an observer both hold the topic.
    for node in ("controller-0", "broker-100"):
        shell = subprocess.run(
            [sys.executable, "-m", "node.cli", "metadata", "shell",
             "--metadata-dir", str(data_dir / node / "metadata"), "-c", "ls /topics"],
            capture_output=True, text=True, timeout=60, cwd=REPO_ROOT, check=False,
        )
        assert shell.returncode == 0, shell.stderr
        assert topic in shell.stdout, f"{node}'s metadata log has no {topic}:\n{shell.stdout}"

    # The same data directory brings back the same cluster (on new ports); Ctrl-C stops it as cleanly.
    again = ClusterUp(data_dir, controllers=3, brokers=2)
    try:
        bootstrap = again.wait_for_line(r"bootstrap servers: (\S+)", UP_TIMEOUT_S).group(1)
        assert set(consume_all(bootstrap, topic, 2, acked, timeout=30)) == acked
    finally:
        code = again.stop(signal.SIGINT)
    assert code == 0, "\n".join(again.lines)
    assert "all nodes stopped cleanly" in again.lines


def test_cluster_up_combined_runs_voters_that_are_brokers(tmp_path: Path) -> None:
    up = ClusterUp(tmp_path / "combined", combined=3)
    try:
        up.wait_for_line(r"starting 3 combined nodes in", 10)
        bootstrap = up.wait_for_line(r"bootstrap servers: (\S+)", UP_TIMEOUT_S).group(1)
        roles = [line.split()[0] for line in up.lines if line.startswith(("controller", "broker", "combined"))]
        assert roles == ["combined"] * 3, "\n".join(up.lines)
        assert len(bootstrap.split(",")) == 3
        topic = topic_name("combined-up")
        create_topic(bootstrap, topic, 3)
        assert set(leaders(bootstrap, topic, 3).values()) == {0, 1, 2}
        acked = produce(bootstrap, topic, [f"c{i}" for i in range(30)])
        assert set(consume_all(bootstrap, topic, 3, acked, timeout=30)) == acked == {f"c{i}" for i in range(30)}
    finally:
        code = up.stop(signal.SIGTERM)
    assert code == 0, "\n".join(up.lines)
    assert "all nodes stopped cleanly" in up.lines


def test_cluster_up_refuses_controllers_with_combined_nodes(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "node.cli", "cluster", "up", "--combined", "3", "--controllers", "3",
         "--data-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=60, cwd=REPO_ROOT, check=False,
    )
    assert result.returncode == 2
    assert "--combined nodes are the controllers" in result.stderr


def test_cluster_up_refuses_a_data_dir_it_cannot_use_in_one_line(tmp_path: Path) -> None:
    """A file, or a path the system refuses (a name too long for it), is one line naming --data-dir, exit 2."""
    a_file = tmp_path / "not-a-directory"
    a_file.write_text("")
    for data_dir, reason in ((a_file, "is not a directory"), (tmp_path / ("d" * 300), "File name too long")):
        result = subprocess.run(
            [sys.executable, "-m", "node.cli", "cluster", "up", "--data-dir", str(data_dir)],
            capture_output=True, text=True, timeout=60, cwd=REPO_ROOT, check=False,
        )
        assert result.returncode == 2, result.stderr
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
        assert result.stderr.startswith(f"fjord: --data-dir {data_dir}") and reason in result.stderr, result.stderr
