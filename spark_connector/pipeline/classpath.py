"""What a pipeline needs on Spark's classpath, and whether Spark will be able to get it.

The ``fjord`` format is pure Python and needs nothing. Spark's own Kafka source and sink (``format: kafka``) and
``from_avro`` (``decode: avro``) live in separate Maven packages whose coordinate must match the running Spark and
its Scala version; Spark downloads them at start (``spark.jars.packages``) through Ivy. Without network Spark then
dies with an Ivy resolution error and a Java stack trace, so the runner checks first, from Python: a package is
obtainable when Ivy's cache already holds its jar or the repository answers for its POM. When neither holds, one
:class:`ClasspathError` line says what to do (network, ``--jars``, or ``format: fjord``).

``FJORD_SPARK_REPOSITORY`` names the Maven repository to check and to hand to Spark (``spark.jars.repositories``)
instead of Maven Central, for a mirror.
"""

from __future__ import annotations

import os
import re
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path

import pyspark

from spark_connector.pipeline.model import Pipeline

__all__ = ["REPOSITORY_ENV", "ClasspathError", "check_obtainable", "packages_for", "repository", "scala_version"]

MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
REPOSITORY_ENV = "FJORD_SPARK_REPOSITORY"
PROBE_TIMEOUT_S = 5.0
_SPARK_CORE_JAR = re.compile(r"^spark-core_(\d+\.\d+)-.*\.jar$")
_DEFAULT_SCALA = "2.13"


class ClasspathError(RuntimeError):
    """A package the pipeline needs cannot be obtained; ``str()`` is the one line to print."""


def spark_version() -> str:
    return metadata.version("pyspark")


def scala_version() -> str:
    """The Scala version of the running Spark, from its ``spark-core_<scala>`` jar (PySpark's own, or
    ``$SPARK_HOME``'s)."""
    folders = [Path(pyspark.__file__).parent / "jars"]
    if os.environ.get("SPARK_HOME"):
        folders.insert(0, Path(os.environ["SPARK_HOME"]) / "jars")
    for folder in folders:
        if folder.is_dir():
            for jar in sorted(folder.iterdir()):
                match = _SPARK_CORE_JAR.match(jar.name)
                if match:
                    return match.group(1)
    return _DEFAULT_SCALA


def packages_for(pipeline: Pipeline) -> dict[str, str]:
    """The Maven coordinates the pipeline needs, each with what needs it."""
    scala, spark = scala_version(), spark_version()
    needs: dict[str, str] = {}
    uses = [f"source.format {pipeline.source.format}", f"sink.format {pipeline.sink.format}"]
    kafka = [use for use in uses if use.endswith(" kafka")]
    if kafka:
        needs[f"org.apache.spark:spark-sql-kafka-0-10_{scala}:{spark}"] = (
            f"{' and '.join(kafka)} needs Spark's Kafka connector"
        )
    avro = [name for name, decode in (("value", pipeline.value), ("key", pipeline.key)) if decode.format == "avro"]
    if avro:
        needs[f"org.apache.spark:spark-avro_{scala}:{spark}"] = (
            f"decode.{' and decode.'.join(avro)} avro needs Spark's Avro package"
        )
    return needs


def repository() -> str:
    return os.environ.get(REPOSITORY_ENV, "").strip().rstrip("/") or MAVEN_CENTRAL


def check_obtainable(needs: Mapping[str, str], conf: Mapping[str, str], jars: Sequence[str]) -> None:
    """Raises ClasspathError unless every package in ``needs`` can be had: given as ``--jars`` (which must
    exist), in Ivy's cache, or downloadable."""
    if jars:
        for jar in jars:
            if not Path(jar).is_file():
                raise ClasspathError(f"--jars: {jar} is not a file")
        return
    for coordinate, why in needs.items():
        if _cached(coordinate, conf):
            continue
        problem = _probe(coordinate)
        if problem is not None:
            fallback = (
                "use source.format/sink.format fjord, which needs nothing on the classpath"
                if "Kafka" in why
                else "decode with json or csv instead"
            )
            raise ClasspathError(
                f"{why} {coordinate}, which is not in Ivy's cache and cannot be downloaded from {repository()} "
                f"({problem}): run once where that repository is reachable (Ivy keeps it), pass the jars with "
                f"--jars, or {fallback}"
            )


def _cached(coordinate: str, conf: Mapping[str, str]) -> bool:
    group, artifact, version = coordinate.split(":")
    homes = (
        [Path(conf["spark.jars.ivy"])]
        if conf.get("spark.jars.ivy")
        else [Path.home() / ".ivy2.5.2", Path.home() / ".ivy2"]
    )
    return any((home / "jars" / f"{group}_{artifact}-{version}.jar").is_file() for home in homes)


def _probe(coordinate: str) -> str | None:
    """None when the repository has the package's POM, else why not."""
    group, artifact, version = coordinate.split(":")
    url = f"{repository()}/{group.replace('.', '/')}/{artifact}/{version}/{artifact}-{version}.pom"
    request = urllib.request.Request(url, method="HEAD")
    try:
        with urllib.request.urlopen(request, timeout=PROBE_TIMEOUT_S):
            return None
    except urllib.error.HTTPError as exc:
        return f"HTTP {exc.code} for {url}"
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", None) or exc
        return f"unreachable: {reason}"
