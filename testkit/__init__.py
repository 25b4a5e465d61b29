"""Harnesses shared by the test suite and the benchmarks: a node process runner and raw Kafka wire client
(``node_process``), a controller quorum of real processes (``quorum_cluster``), TLS certificates (``tls_certs``),
polling waits (``waiting``), the fault-injecting S3 proxy (``s3_fault_proxy``), a service manager passing listening
sockets (``service_manager``) and Spark clusters (``spark_standalone``, ``spark_connect``); free ports are
``wire.ports``.

The rule: ``tests/`` and ``bench/`` import ``testkit``; ``testkit`` imports neither of them (only Fjord's packages
and third-party libraries), and no Fjord package imports ``testkit``. It is not shipped (not in pyproject's
``[tool.setuptools.packages.find]``).
"""
