"""The settings every role reads from ``server.properties`` (a layer under the broker, the controller and the
metadata layer), split by idea; import from the module that holds the idea, not from this package:

- :mod:`settings.keys`: the one catalogue of keys (broker keys, topic configs) with Kafka's names, types,
  defaults and validators, and the checks of values clients set;
- :mod:`settings.server`: :class:`~settings.server.ServerConfig`, a node's parsed and validated
  properties (listeners, quorum voters, roles);
- :mod:`settings.security`: the TLS settings of SSL listeners, and the SASL, ACL and quota keys that stop
  a node at start;
- :mod:`settings.describe`: DescribeConfigs entries with their sources and synonyms, and the effective
  topic configs partitions enforce;
- :mod:`settings.meta_properties`: a data directory's ``meta.properties``.
"""
