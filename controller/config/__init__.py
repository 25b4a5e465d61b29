"""Server configuration, split by idea; import from the module that holds the idea, not from this package:

- :mod:`controller.config.keys`: the one catalogue of keys (broker keys, topic configs) with Kafka's names, types,
  defaults and validators, and the checks of values clients set;
- :mod:`controller.config.server`: :class:`~controller.config.server.ServerConfig`, a node's parsed and validated
  properties (listeners, quorum voters, roles);
- :mod:`controller.config.security`: the TLS settings of SSL listeners, and the SASL, ACL and quota keys that stop
  a node at start;
- :mod:`controller.config.describe`: DescribeConfigs entries with their sources and synonyms, and the effective
  topic configs partitions enforce;
- :mod:`controller.config.meta_properties`: a data directory's ``meta.properties``.
"""
