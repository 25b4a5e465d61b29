"""docker-compose.yml: valid for Debian's docker-compose, and every Fjord service runs what the local cluster runs.

Docker does not run here, so the file is checked twice over: ``docker-compose config`` must accept and normalise it,
and each controller/broker service must start ``fjord server start`` with the same config file and the same
override keys ``node.local_cluster.plan_cluster`` gives that role (the cluster tests run those), with settings
that load as a valid configuration and agree with each other (voters, node ids, bucket). Beyond the local
cluster's keys every node serves /metrics on all interfaces, and the Prometheus and Grafana services scrape each
node there and show the dashboard of config/grafana (tests/broker/test_metrics_dashboard.py checks its queries).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from node.local_cluster import BROKER_CONFIG, CONFIG_DIR, CONTROLLER_CONFIG, plan_cluster
from settings.server import ServerConfig
from storage.config import parse_bucket_url, parse_overrides, read_properties

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "docker-compose.yml"
DOCKER_COMPOSE = shutil.which("docker-compose") or "/usr/bin/docker-compose"
CONFIG_FILES = {"controller": CONTROLLER_CONFIG, "broker": BROKER_CONFIG}
#: What the compose nodes set beyond the local cluster's keys: /metrics reachable from the Prometheus container.
METRICS_OVERRIDES = {"metrics.port": "9464", "metrics.host": "0.0.0.0"}
PROMETHEUS_CONFIG = REPO / "config" / "prometheus" / "prometheus.yml"
GRAFANA = REPO / "config" / "grafana"


@pytest.fixture(scope="module")
def normalised() -> dict[str, Any]:
    if not Path(DOCKER_COMPOSE).exists():
        pytest.skip("docker-compose is not installed")
    result = subprocess.run(
        [DOCKER_COMPOSE, "-f", str(COMPOSE), "config"], check=False, capture_output=True, text=True, timeout=60,
        cwd=REPO, env={"PATH": "/usr/bin:/bin"},  # no FJORD_* variables: the defaults are what is checked
    )
    assert result.returncode == 0, f"docker-compose config rejected the file:\n{result.stderr}"
    loaded: dict[str, Any] = yaml.safe_load(result.stdout)
    return loaded


def _fjord_services(config: dict[str, Any]) -> dict[str, tuple[str, dict[str, str]]]:
    """service -> (role, overrides) for the services running ``fjord server start``."""
    out = {}
    for name, service in config["services"].items():
        command = service.get("command") or []
        if command[:2] != ["server", "start"]:
            continue
        assert command[2] == "--config", f"{name}: {command}"
        role = next((r for r, f in CONFIG_FILES.items() if command[3] == f"config/{f}"), None)
        assert role is not None, f"{name} uses {command[3]}, not one of the config/ files the local cluster uses"
        flags, values = command[4::2], command[5::2]
        assert set(flags) == {"--override"}, f"{name}: unexpected arguments {flags}"
        overrides = parse_overrides(values)
        assert len(overrides) == len(values), f"{name} overrides a key twice"
        out[name] = (role, overrides)
    return out


def test_compose_file_is_valid_and_has_the_whole_cluster(normalised: dict[str, Any]) -> None:
    services = normalised["services"]
    assert {"minio", "create-bucket"} <= set(services)
    roles = [role for role, _ in _fjord_services(normalised).values()]
    assert roles.count("controller") == 3
    assert roles.count("broker") == 3
    for name, (_, _) in _fjord_services(normalised).items():
        assert services[name]["build"]["context"] == str(REPO), f"{name} is not built from the repository"
        assert services[name]["image"] == services["controller-0"]["image"]


def test_every_service_runs_what_the_local_cluster_runs(normalised: dict[str, Any], tmp_path: Path) -> None:
    local = {spec.role: spec for spec in plan_cluster(tmp_path, controllers=1, brokers=1)}
    for name, (role, overrides) in _fjord_services(normalised).items():
        spec = local[role]
        assert spec.base_config == CONFIG_DIR / CONFIG_FILES[role]
        assert {k: overrides.pop(k, None) for k in METRICS_OVERRIDES} == METRICS_OVERRIDES, name
        assert set(overrides) == set(spec.overrides), (
            f"{name} sets {sorted(overrides)}, the local cluster's {role}s set {sorted(spec.overrides)}"
        )


def test_service_settings_load_and_agree(normalised: dict[str, Any]) -> None:
    services = _fjord_services(normalised)
    configs = {}
    for name, (role, overrides) in services.items():
        props = read_properties(CONFIG_DIR / CONFIG_FILES[role])
        props.update(overrides)
        config = ServerConfig.from_properties(props)  # raises ConfigError on anything invalid
        assert set(config.process_roles) == {role}, f"{name} runs as {config.process_roles}"
        configs[name] = config
    node_ids = [c.node_id for c in configs.values()]
    assert len(set(node_ids)) == len(node_ids), f"node ids collide: {node_ids}"
    voters = {tuple(c.voters) for c in configs.values()}
    assert len(voters) == 1, "every node must be given the same voter list"
    voter_list = voters.pop()
    controllers = {name: c for name, c in configs.items() if "controller" in c.process_roles}
    assert {(v.node_id, v.host) for v in voter_list} == {(c.node_id, name) for name, c in controllers.items()}
    for name, config in controllers.items():
        (listener,) = config.listeners
        assert (config.node_id, listener.port) in {(v.node_id, v.port) for v in voter_list}, name
    brokers = {name: c for name, c in configs.items() if "broker" in c.process_roles}
    buckets = {c.static["s3.data.buckets"] for c in brokers.values()}
    assert len(buckets) == 1, "brokers must share one object store"
    bucket = parse_bucket_url(buckets.pop())
    assert bucket.scheme == "s3" and bucket.endpoint == "http://minio:9000"
    creator = normalised["services"]["create-bucket"]
    assert creator["entrypoint"][-1] == f"local/{bucket.bucket}", "the bucket creator makes another bucket"
    for name, config in brokers.items():
        assert config.node_id not in {v.node_id for v in voter_list}, f"{name} reuses a controller's node id"
        advertised = {e.name: e for e in config.advertised_endpoints()}
        assert advertised["PLAINTEXT"].host == name, f"{name} advertises {advertised['PLAINTEXT'].host}"
        published = {int(p["published"]) for p in normalised["services"][name].get("ports", [])}
        assert advertised["EXTERNAL"].port in published, f"{name}'s EXTERNAL listener is not published"


def _mounts(service: dict[str, Any]) -> dict[str, Path]:
    """container path -> host path of a service's bind mounts (both spellings docker-compose normalises to)."""
    out = {}
    for volume in service.get("volumes", []):
        if isinstance(volume, str):
            source, target = volume.split(":")[:2]
        else:
            source, target = volume["source"], volume["target"]
        out[target] = Path(source)
    return out


def test_prometheus_scrapes_every_node_and_grafana_shows_the_dashboard(normalised: dict[str, Any]) -> None:
    services = normalised["services"]
    prometheus, grafana = services["prometheus"], services["grafana"]
    assert _mounts(prometheus)["/etc/prometheus/prometheus.yml"] == PROMETHEUS_CONFIG
    scrape = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    targets = {t for job in scrape["scrape_configs"] for c in job["static_configs"] for t in c["targets"]}
    port = METRICS_OVERRIDES["metrics.port"]
    assert targets == {f"{name}:{port}" for name in _fjord_services(normalised)}, "Prometheus misses a node"

    mounts = _mounts(grafana)
    assert mounts["/etc/grafana/provisioning"] == GRAFANA / "provisioning"
    providers = yaml.safe_load((GRAFANA / "provisioning" / "dashboards" / "fjord.yml").read_text())["providers"]
    (dashboards_dir,) = {p["options"]["path"] for p in providers}
    assert mounts[f"{dashboards_dir}/fjord-dashboard.json"] == GRAFANA / "fjord-dashboard.json"
    sources = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "prometheus.yml").read_text())
    (source,) = sources["datasources"]
    assert source["url"] == "http://prometheus:9090"
    dashboard = json.loads((GRAFANA / "fjord-dashboard.json").read_text())
    used = {p["datasource"]["uid"] for p in dashboard["panels"] if p["type"] != "row"}
    assert used == {source["uid"]}, "the dashboard's panels use a data source Grafana is not given"
