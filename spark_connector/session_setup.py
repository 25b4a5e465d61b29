"""What ``register`` prepares on a session besides the format: the Python its workers run, and, on Spark Connect,
a client that survives the end of a Declarative Pipelines run.

**The workers' Python (classic sessions).** Spark starts its Python workers with ``PYSPARK_PYTHON``, and without it
with ``python3`` from ``PATH``, not with the interpreter that created the session. A script run as
``.venv/bin/python job.py`` without the venv activated then gets workers from another Python, without this package
(``No module named 'spark_connector'``, deep inside a task). When neither ``PYSPARK_PYTHON`` nor
``spark.pyspark.python`` says otherwise and the master is local, so that the workers run on this machine,
``register`` gives them this interpreter. On a cluster the executors' Python is the cluster's to say
(``PYSPARK_PYTHON`` or ``spark.pyspark.python``): this machine's path means nothing there.

**Spark Connect.** Every Python worker reports two profiler accumulators, empty unless profiling is on, and the
Connect server forwards what it collected as an ``__python_accumulator__`` observed-metrics response at the end of
the command that ran them. PySpark (4.1 to 4.3) reads those on queries, but its ``execute_command_as_iterator``, the
call ``spark-pipelines`` streams a run's events through, takes any response that is not a dict for an unknown one:
a pipeline whose flows ran Python (a Python data source such as ``fjord``, or any UDF) computes its tables and then
ends in ``[UNKNOWN_RESPONSE] Unknown response: Plan observed(__python_accumulator__=...)`` and exit status 1.
``register`` gives the session's client a version of that call that passes over metrics responses (the client has
already fed their profiler part to its profiler) and still refuses anything else it does not know.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, TypeAlias

from pyspark.errors import PySparkValueError
from pyspark.sql import SparkSession
from pyspark.sql.metrics import ObservedMetrics, PlanMetrics

# Only for type checking: importing pyspark.sql.connect checks for grpc and pandas, which Python workers (which
# import this package to run the format) need not have.
if TYPE_CHECKING:
    from pyspark.sql.connect.session import SparkSession as ConnectSession

__all__ = ["AnySession", "prepare"]

AnySession: TypeAlias = "SparkSession | ConnectSession"

#: Marks a Connect client already given the event-stream fix, so that registering twice wraps nothing twice.
_FIXED = "_fjord_tolerates_metrics"


def prepare(spark: AnySession) -> None:
    """Readies ``spark`` for the ``fjord`` format: see the module's docstring."""
    if is_connect(spark):
        tolerate_metrics_in_command_streams(spark.client)
    else:
        assert isinstance(spark, SparkSession)
        choose_worker_python(spark)


def is_connect(spark: AnySession) -> bool:
    """A Spark Connect session (``SparkSession.builder.remote``, SDP), told apart without importing Connect."""
    return type(spark).__module__.startswith("pyspark.sql.connect.")


def choose_worker_python(spark: SparkSession) -> None:
    """Local masters: the workers run this interpreter unless ``PYSPARK_PYTHON`` or ``spark.pyspark.python`` names
    another (the conf is honoured too: PySpark reads only the environment when the session starts)."""
    context = spark.sparkContext
    configured = context.getConf().get("spark.pyspark.python")
    if os.environ.get("PYSPARK_PYTHON"):
        return
    if configured:
        context.pythonExec = configured
    elif (context.master or "").startswith("local"):
        context.pythonExec = sys.executable


def tolerate_metrics_in_command_streams(client: Any) -> None:
    """Replaces ``client.execute_command_as_iterator`` (this client only) with one that passes over metrics and
    observed-metrics responses instead of failing on them."""
    if getattr(client, _FIXED, False):
        return

    def execute_command_as_iterator(command: Any, observations: dict[str, Any] | None = None) -> Iterator[Any]:
        request = client._execute_plan_request_with_metadata()
        client._set_command_in_plan(request.plan, command)
        for response in client._execute_and_fetch_as_iterator(request, observations or {}):
            if isinstance(response, dict):
                yield response
            elif not isinstance(response, PlanMetrics | ObservedMetrics):
                raise PySparkValueError(errorClass="UNKNOWN_RESPONSE", messageParameters={"response": str(response)})

    client.execute_command_as_iterator = execute_command_as_iterator
    setattr(client, _FIXED, True)
