"""``fjord pipeline run PIPELINE.yaml [--dry-run] [--master URL] [--jars JAR,...] [--set KEY=VALUE] [--conf K=V]``.

Runs a declarative Spark structured-streaming pipeline (``spark_connector.pipeline``): on ``local[*]`` by default,
on a cluster with ``--master spark://HOST:7077`` (or yarn, k8s://...). A mistake in the pipeline file is one line
on stderr and exit status 2; anything the cluster, the classpath or the running query runs into is one line and
exit status 1; ``--dry-run`` prints the plan without starting Spark.

PySpark is the optional ``spark`` extra, so it is imported only when this command runs: every other command works
without it.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    group = subparsers.add_parser("pipeline", help="run Spark pipelines over Fjord topics")
    commands = group.add_subparsers(dest="pipeline_command", required=True, metavar="SUBCOMMAND")
    run = commands.add_parser(
        "run",
        help="run a pipeline file (source, decode, transform, sink, trigger)",
        description="Run a declarative Spark structured-streaming pipeline described by a YAML file.",
    )
    run.add_argument("pipeline", metavar="PIPELINE.yaml", help="the pipeline file, e.g. config/pipelines/*.yaml")
    run.add_argument("--dry-run", action="store_true", help="print the plan and exit without starting Spark")
    run.add_argument("--master", metavar="URL", help="Spark master (default: spark.master of the file, or local[*])")
    run.add_argument(
        "--jars",
        metavar="JAR[,JAR...]",
        action="append",
        default=[],
        help="jars to put on Spark's classpath instead of downloading packages (e.g. Spark's Kafka connector)",
    )
    run.add_argument(
        "--set",
        metavar="KEY.PATH=VALUE",
        action="append",
        default=[],
        dest="overrides",
        help="override a key of the file, the value read as YAML (e.g. --set source.bootstrap=host:9092)",
    )
    run.add_argument(
        "--conf",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="a Spark setting (e.g. --conf spark.log.level=WARN), on top of the file's spark.conf",
    )
    run.set_defaults(run=run_pipeline)


def run_pipeline(args: argparse.Namespace) -> int:
    # Imported here: pyspark is the optional spark extra, and the CLI's other commands must not need it.
    try:
        from spark_connector.pipeline import PipelineError, SpecError, describe, execute, load_pipeline  # noqa: PLC0415
        from spark_connector.pipeline.classpath import packages_for  # noqa: PLC0415
    except ImportError as exc:
        return _fail(
            f"pipelines need the spark extra: run `make pipelines-install` (or pip install 'fjord[spark]'): {exc}", 1
        )
    jars = tuple(jar.strip() for given in args.jars for jar in given.split(",") if jar.strip())
    conf: dict[str, str] = {}
    for item in args.conf:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            return _fail(f"--conf: expected KEY=VALUE, got {item!r}", 2)
        conf[key.strip()] = value
    try:
        pipeline = load_pipeline(args.pipeline, args.overrides)
    except SpecError as exc:
        # File-level messages (unreadable, not YAML) and --set mistakes name what they concern already.
        origin = "" if exc.key in ("", "--set") else f"{args.pipeline}: "
        return _fail(f"{origin}{exc}", 2)
    if args.dry_run:
        master = args.master or pipeline.master or "local[*]"
        shown = dataclasses.replace(pipeline, spark_conf={**pipeline.spark_conf, **conf})
        sys.stdout.write(describe(shown, master=master, packages=tuple(packages_for(pipeline)), jars=jars))
        return 0
    try:
        query = execute(pipeline, master=args.master, jars=jars, conf=conf)
    except PipelineError as exc:
        origin = f"{args.pipeline}: " if exc.exit_status == 2 else ""
        return _fail(f"{origin}{exc}", exc.exit_status)
    rows = sum(int(progress.get("numInputRows", 0)) for progress in query.recentProgress)
    print(f"pipeline {pipeline.name}: done, {rows} input rows in the last {len(query.recentProgress)} micro-batches")
    return 0


def _fail(message: str, status: int) -> int:
    sys.stdout.flush()
    print(f"fjord: {message}", file=sys.stderr)
    return status
