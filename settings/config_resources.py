"""The resource types a config belongs to, with Kafka's numbering (``ConfigResource.Type``): what DescribeConfigs,
AlterConfigs and the metadata log's ConfigRecord name a config's owner by."""

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
