# Fjord node image: one image for controllers and brokers; the role comes from the config file the command names
# (config/controller.properties or config/broker.properties, see docker-compose.yml).
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /opt/fjord

# Dependencies first, so a source change does not reinstall them.
COPY pyproject.toml README.md ./
COPY broker ./broker
COPY controller ./controller
COPY storage ./storage
COPY spark_connector ./spark_connector
RUN pip install . \
    && useradd --system --uid 1000 --home-dir /var/lib/fjord fjord \
    && mkdir -p /var/lib/fjord \
    && chown fjord /var/lib/fjord

COPY config ./config

USER fjord
VOLUME ["/var/lib/fjord"]
EXPOSE 9092 9093

ENTRYPOINT ["fjord"]
CMD ["server", "start", "--config", "config/server.properties"]
