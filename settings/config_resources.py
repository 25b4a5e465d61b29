"""The resource types a config belongs to, with Kafka's numbering (``ConfigResource.Type``): what DescribeConfigs,
AlterConfigs and the metadata log's ConfigRecord name a config's owner by."""

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
#: A KIP-714 client-metrics subscription (``kafka-client-metrics.sh``): named by the operator, holding
#: ``metrics``, ``interval.ms`` and ``match`` (``settings.client_metrics``).
RESOURCE_CLIENT_METRICS = 16
#: A group's dynamic configs (``kafka-configs.sh --entity-type groups``): ``consumer.*`` and ``share.*`` keys a
#: group runs with instead of the broker's (``settings.group_configs``).
RESOURCE_GROUP = 32
