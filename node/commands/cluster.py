"""``fjord cluster up``: a whole cluster (controller quorum + brokers) on 127.0.0.1, in the foreground.

The processes are the ones ``node.local_cluster`` plans (a generated properties file and a data directory per
node); this module is the terminal front end: it waits until the cluster is usable, prints the processes and the
bootstrap servers, reports a node that dies, and on Ctrl-C or SIGTERM stops brokers then controllers cleanly and
exits 0 (1 when a node had to be killed or failed). The cluster id is kept in the data directory, so ``cluster up``
on the same ``--data-dir`` restarts the same cluster (on new ports).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType

from node.commands import cluster_drain
from node.local_cluster import ClusterNotReadyError, LocalCluster, plan_cluster, wait_ready
from settings.kafka_uuid import new_kafka_uuid
from storage.config import ConfigError, parse_bucket_url, parse_overrides

logger = logging.getLogger(__name__)

CLUSTER_ID_FILE = "cluster.id"
_POLL_S = 0.2


class _StopRequested(Exception):
    """Raised from the signal handler so a stop also interrupts the start-up wait."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cluster = subparsers.add_parser("cluster", help="run a local multi-process cluster")
    actions = cluster.add_subparsers(dest="cluster_command", required=True, metavar="ACTION")
    up = actions.add_parser(
        "up", help="start controllers and brokers on 127.0.0.1 and run until Ctrl-C / SIGTERM",
        description="Starts a controller quorum and brokers as separate processes on free 127.0.0.1 ports, prints "
                    "the bootstrap servers, and stops everything cleanly on Ctrl-C or SIGTERM.",
    )
    up.add_argument("--controllers", type=int, default=None, metavar="N",
                    help="controller quorum size (default 3; none with --combined)")
    up.add_argument("--brokers", type=int, default=None, metavar="N",
                    help="number of broker-only nodes (default 3; 0 with --combined)")
    up.add_argument("--combined", type=int, default=0, metavar="N",
                    help="N combined nodes (process.roles=broker,controller): each is a voter of the quorum and "
                         "a broker, as KRaft's combined mode; replaces --controllers")
    up.add_argument("--object-store", metavar="URL",
                    help="s3.data.buckets URL shared by the brokers, e.g. 0@s3://bucket?endpoint=http://...&"
                         "pathStyle=true (default: a directory under --data-dir)")
    up.add_argument("--wal", choices=("file", "s3"), default="file",
                    help="file: a WAL directory per broker (default); s3: WAL objects in the object store")
    up.add_argument("--data-dir", metavar="DIR",
                    help="where the nodes keep their data (default: a temporary directory removed on exit)")
    up.add_argument("--override", metavar="KEY=VALUE", action="append", default=[],
                    help="a setting for every node (repeatable)")
    up.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS",
                    help="how long to wait for the cluster to be ready (default 60)")
    up.set_defaults(run=run_up)
    cluster_drain.register(actions)


def _cluster_id(data_dir: Path) -> str:
    """The cluster id stored in ``data_dir`` (a new one for a new directory): the voter addresses change from
    one ``cluster up`` to the next, so the id cannot be derived from them as a fixed quorum's is."""
    path = data_dir / CLUSTER_ID_FILE
    if path.exists():
        return path.read_text(encoding="utf-8").strip()
    cluster_id = new_kafka_uuid()
    path.write_text(cluster_id + "\n", encoding="utf-8")
    return cluster_id


def run_up(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    combined: int = args.combined
    if combined < 0:
        print("fjord: --combined must not be negative", file=sys.stderr)
        return 2
    if combined and args.controllers:
        print("fjord: --combined nodes are the controllers; --controllers cannot be given with it", file=sys.stderr)
        return 2
    controllers: int = 0 if combined else (3 if args.controllers is None else args.controllers)
    brokers: int = (0 if combined else 3) if args.brokers is None else args.brokers
    if not combined and (controllers < 1 or brokers < 1):
        print("fjord: --controllers and --brokers must be at least 1", file=sys.stderr)
        return 2
    if brokers < 0:
        print("fjord: --brokers must not be negative", file=sys.stderr)
        return 2
    try:
        extra = parse_overrides(args.override)
        if args.object_store:
            parse_bucket_url(args.object_store, "--object-store")
    except (ConfigError, ValueError) as exc:
        print(f"fjord: {exc}", file=sys.stderr)
        return 2
    temporary = args.data_dir is None
    data_dir = Path(tempfile.mkdtemp(prefix="fjord-cluster-") if temporary else args.data_dir).resolve()
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        extra.setdefault("cluster.id", _cluster_id(data_dir))
    except OSError as exc:  # a file, or a place the user may not write: one line naming the option
        reason = " is not a directory" if isinstance(exc, FileExistsError) else f": {exc.strerror or exc}"
        print(f"fjord: --data-dir {data_dir}{reason}", file=sys.stderr)
        return 2
    try:
        specs = plan_cluster(data_dir, controllers=controllers, brokers=brokers, combined=combined,
                             object_store=args.object_store, wal=args.wal, extra=extra)
    except ValueError as exc:
        print(f"fjord: {exc}", file=sys.stderr)
        return 2
    cluster = LocalCluster(specs)
    stopping = False

    def request_stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        if not stopping:
            stopping = True
            raise _StopRequested(signal.Signals(signum).name)

    previous = {s: signal.signal(s, request_stop) for s in (signal.SIGINT, signal.SIGTERM)}
    status = 0
    try:
        layout = f"{combined} combined nodes" if combined else f"{controllers} controllers"
        if brokers or not combined:
            layout += f" and {brokers} brokers"
        print(f"starting {layout} in {data_dir} ...", flush=True)
        cluster.start_all()
        started = time.monotonic()
        leader = asyncio.run(wait_ready(cluster, args.timeout))
        print(f"cluster ready in {time.monotonic() - started:.1f} s (active controller: node {leader})\n")
        print(cluster.table())
        print(f"\nbootstrap servers: {cluster.bootstrap_servers}")
        print("press Ctrl-C to stop", flush=True)
        reported: set[int] = set()
        while True:
            for node in cluster.exited():
                if node.spec.node_id not in reported and node.proc is not None:
                    reported.add(node.spec.node_id)
                    print(f"warning: {node.spec.role} {node.spec.node_id} exited with status "
                          f"{node.proc.returncode} (log: {node.logs[-1]})", file=sys.stderr, flush=True)
            time.sleep(_POLL_S)
    except _StopRequested as stop:
        print(f"\n{stop}: stopping the cluster ...", flush=True)
    except ClusterNotReadyError as exc:
        print(f"fjord: {exc}\n{cluster.logs(2000)}", file=sys.stderr)
        status = 1
    finally:
        stopping = True
        for signum, handler in previous.items():
            signal.signal(signum, signal.SIG_IGN if handler is None else handler)
        codes = cluster.stop_all()
        failed = {node_id: code for node_id, code in codes.items() if code != 0}
        if failed:
            print("nodes that did not stop cleanly: "
                  + ", ".join(f"{node_id} (exit {code})" for node_id, code in sorted(failed.items())),
                  file=sys.stderr)
            status = 1
        elif status == 0:
            print("all nodes stopped cleanly")
        if temporary and status == 0:
            shutil.rmtree(data_dir, ignore_errors=True)
    return status
