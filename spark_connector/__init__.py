"""spark_connector package."""
