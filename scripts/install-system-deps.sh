#!/usr/bin/env bash
# Installs what the test suite needs beyond PyPI, from Debian's packages and the npm registry.
# Idempotent: skips what is already present. Needs root (as on the project's machines) or sudo.
# With --java, only Java (what `make pipelines-install` needs for Spark).
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi

if [ "${1:-}" = "--java" ]; then
  if ! command -v java >/dev/null 2>&1; then
    echo "installing Java for Spark"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq openjdk-17-jre-headless >/dev/null
  fi
  exit 0
fi

need_apt=()
command -v kcat >/dev/null 2>&1 || need_apt+=(kcat)
command -v java >/dev/null 2>&1 || need_apt+=(openjdk-17-jre-headless)
command -v node >/dev/null 2>&1 || need_apt+=(nodejs npm)
command -v docker-compose >/dev/null 2>&1 || need_apt+=(docker-compose)
# Build dependencies of librdkafka's test suite (scripts/build-librdkafka-tests.sh).
for pkg in build-essential libssl-dev zlib1g-dev rapidjson-dev; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "installing Debian packages: ${need_apt[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if [ ! -d tests/js/node_modules/kafkajs ]; then
  echo "installing kafkajs from npm"
  (cd tests/js && npm install --no-audit --no-fund --silent)
fi
