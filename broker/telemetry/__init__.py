"""KIP-714 client telemetry: subscriptions and client instances (``manager``), the pushed OTLP payload (``otlp``),
and the pushed metrics exported on ``/metrics`` (``exported``), held together for a broker by ``service``."""
