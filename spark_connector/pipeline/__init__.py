"""Declarative structured-streaming pipelines over Fjord: ``fjord pipeline run PIPELINE.yaml`` and
``spark_connector.run(spec, spark)``.

``model`` is what a checked pipeline is, ``spec`` reads and checks a pipeline file into it, ``plan`` prints it
(``--dry-run``), ``classpath`` and ``preflight`` check what Spark and the cluster must provide before anything starts,
and ``run`` builds and runs the query.
"""

from __future__ import annotations

from spark_connector.pipeline.model import Pipeline
from spark_connector.pipeline.plan import describe
from spark_connector.pipeline.run import PipelineError, execute, run
from spark_connector.pipeline.spec import SpecError, load_pipeline, parse_pipeline

__all__ = ["Pipeline", "PipelineError", "SpecError", "describe", "execute", "load_pipeline", "parse_pipeline", "run"]
