"""Deployment files parse and reference only settings the processes actually read."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml

from pipeline.config.settings import ENVIRONMENT

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "deploy" / "k8s"
KUBERNETES_VERSION = "1.33"  # a release still supported upstream; the manifests use only stable APIs


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def test_only_the_settings_loader_reads_the_environment() -> None:
    readers = re.compile(r"os\.environ\.get|os\.environ\[|os\.getenv|environ\.get\(")
    for path in (REPO / "pipeline").rglob("*.py"):
        if path.parent.name != "config":
            assert not readers.search(path.read_text()), f"{path} reads the environment itself"
    assert {"DPM_BOOTSTRAP", "DPM_KAFKA_CONFIG", "DPM_BACKEND", "ANTHROPIC_API_KEY", "DPM_METRICS_PORT"} <= set(
        ENVIRONMENT
    )
    assert all(ENVIRONMENT.values()), "every variable is documented"


def test_manifests_parse_and_use_known_settings() -> None:
    kinds: dict[str, dict[str, Any]] = {}
    for path in sorted(K8S.glob("*.yaml")):
        if path.name != "kustomization.yaml":
            for doc in _docs(path):
                kinds[f"{doc['kind']}/{doc['metadata']['name']}"] = doc
    assert set(kinds) == {"ConfigMap/dpm-settings", "Secret/dpm-secrets", "PersistentVolumeClaim/dpm-keys",
                          "Deployment/dpm-worker", "Deployment/dpm-baseline", "ScaledObject/dpm-worker",
                          "Deployment/dpm-ui", "Service/dpm-ui", "Secret/dpm-ui-tokens", "Secret/dpm-kafka-worker",
                          "Secret/dpm-kafka-baseline", "Secret/dpm-kafka-auditor", "Secret/dpm-kafka-producer",
                          "Deployment/dpm-api", "Service/dpm-api", "Secret/dpm-api-keys"}  # fmt: skip
    config = kinds["ConfigMap/dpm-settings"]["data"]
    secret = kinds["Secret/dpm-secrets"]["stringData"]
    assert set(config) | set(secret) <= set(ENVIRONMENT)
    for name in ("Deployment/dpm-worker", "Deployment/dpm-baseline"):
        pod = kinds[name]["spec"]["template"]["spec"]
        container = pod["containers"][0]
        refs = {next(iter(r.values()))["name"] for r in container["envFrom"]}
        assert refs == {"dpm-settings", "dpm-secrets"}
        assert container["readinessProbe"]["httpGet"]["path"] == "/metrics"
        assert container["resources"]["requests"]["cpu"]
        assert container["resources"]["limits"]["cpu"]
        assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        mounts = {m["mountPath"] for m in container["volumeMounts"]}
        assert {"/var/lib/dpm", "/tmp"} <= mounts
        assert pod["securityContext"]["runAsNonRoot"] is True
    _check_ui(kinds)
    _check_principals(kinds)
    scaled = kinds["ScaledObject/dpm-worker"]["spec"]
    assert scaled["scaleTargetRef"]["name"] == "dpm-worker"
    trigger = scaled["triggers"][0]["metadata"]
    assert (trigger["consumerGroup"], trigger["topic"]) == ("dpm-projection", "dpm.triggers")
    listed = yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"]
    assert sorted(listed) == sorted(p.name for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml")


def test_manifests_are_valid_objects_of_the_kubernetes_api() -> None:
    """Every manifest but the custom resources validates, strictly (no unknown field), against Kubernetes' schemas.

    No cluster runs here, so `kubectl apply --dry-run=server` cannot; kubernetes-validate carries the
    API's published schemas. KEDA's ScaledObject and kustomize's Kustomization are not Kubernetes API
    objects: their fields are checked above.
    """
    custom = {"ScaledObject", "Kustomization"}
    checked = []
    for path in sorted(K8S.glob("*.yaml")):
        for doc in _docs(path):
            if doc["kind"] not in custom:
                kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
                checked.append(f"{doc['kind']}/{doc['metadata']['name']}")
    assert len(checked) == 15


def _check_principals(kinds: dict[str, dict[str, Any]]) -> None:
    """Each Deployment connects as its own role's principal, from a Secret mounted read-only, never a literal."""
    for deployment, role in (("dpm-worker", "worker"), ("dpm-baseline", "baseline"), ("dpm-ui", "auditor"),
                             ("dpm-api", "producer")):  # fmt: skip
        pod = kinds[f"Deployment/{deployment}"]["spec"]["template"]["spec"]
        container = pod["containers"][0]
        config = next(e["value"] for e in container["env"] if e["name"] == "DPM_KAFKA_CONFIG")
        assert ((K8S / f"{deployment.removeprefix('dpm-')}-deployment.yaml").read_text().count("\n          env:")
                == 1), "one env list per container (YAML keeps the last of two silently)"  # fmt: skip
        mount = next(m for m in container["volumeMounts"] if m["name"] == "kafka-credentials")
        assert mount["readOnly"] is True
        assert config == f"{mount['mountPath']}/client.properties"
        volume = next(v for v in pod["volumes"] if v["name"] == "kafka-credentials")
        secret = kinds[f"Secret/{volume['secret']['secretName']}"]["stringData"]
        properties = dict(line.split("=", 1) for line in secret["client.properties"].splitlines())
        assert properties["sasl.username"] == role
        assert properties["sasl.password"] == "replace-me"  # a placeholder, never a real credential
        assert properties["ssl.ca.location"] == f"{mount['mountPath']}/ca.crt"


def test_the_api_runs_as_three_doors_each_announcing_its_pod_s_address() -> None:
    kinds = {f"{d['kind']}/{d['metadata']['name']}": d for d in _docs(K8S / "api-deployment.yaml")}
    deployment = kinds["Deployment/dpm-api"]["spec"]
    assert deployment["replicas"] == 3
    env = {e["name"]: e for e in deployment["template"]["spec"]["containers"][0]["env"]}
    assert env["POD_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert env["DPM_DOOR_URL"]["value"] == "http://$(POD_IP):8088"  # the other replicas forward appends there
    assert kinds["Service/dpm-api"]["spec"]["type"] == "ClusterIP"


def _check_ui(kinds: dict[str, dict[str, Any]]) -> None:
    """The UI runs with no token unless one is filled in (it then refuses to start), inside the cluster only."""
    tokens = kinds["Secret/dpm-ui-tokens"]["stringData"]
    assert set(tokens) == {"DPM_UI_TOKENS", "DPM_UI_ADMIN_TOKEN"}
    assert not any(tokens.values())
    assert kinds["Service/dpm-ui"]["spec"]["type"] == "ClusterIP"
    container = kinds["Deployment/dpm-ui"]["spec"]["template"]["spec"]["containers"][0]
    assert container["args"] == ["ui"]
    assert {e["name"] for e in container["env"]} <= set(ENVIRONMENT)
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert next(m for m in container["volumeMounts"] if m["name"] == "keys")["readOnly"] is True


def test_compose_uses_known_settings_and_wires_monitoring() -> None:
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    for service in ("topic-init", "worker", "baseline"):  # the image's entrypoint is already `dpm`
        assert compose["services"][service]["command"][0] in {"topics", "worker", "baseline"}
    env = compose["x-dpm-env"]
    assert set(env) <= set(ENVIRONMENT)
    ui = compose["services"]["ui"]
    assert ui["command"] == ["ui"]
    assert set(ui["environment"]) <= set(ENVIRONMENT)
    assert ui["ports"] == ["127.0.0.1:8080:8080"]  # published on this machine's loopback only
    api = compose["services"]["api"]
    assert api["command"] == ["api"]
    assert set(api["environment"]) <= set(ENVIRONMENT)
    assert "ports" not in api  # replicas (--scale api=N): the balancer publishes the port
    doors = compose["services"]["doors"]
    assert doors["ports"] == ["127.0.0.1:8088:8088"]
    conf = (REPO / "deploy" / "nginx" / "doors.conf").read_text()
    assert "proxy_pass $doors;" in conf  # resolved again: replicas scaled in take requests
    assert "set $doors http://api:8088;" in conf
    volumes = " ".join(compose["services"]["prometheus"]["volumes"] + compose["services"]["grafana"]["volumes"])
    assert "deploy/prometheus" in volumes
    assert "deploy/grafana/dashboards" in volumes


def test_dashboard_and_alerts_cover_the_operator_signals() -> None:
    dashboard = json.loads((REPO / "deploy" / "grafana" / "dashboards" / "dpm.json").read_text())
    exprs = " ".join(t["expr"] for p in dashboard["panels"] for t in p["targets"])
    for metric in (
        "dpm_decisions_total",
        "dpm_consumer_lag",
        "dpm_end_to_end_seconds_bucket",
        "dpm_model_cost_usd_total",
        "dpm_replay_results_total",
        "dpm_dead_letters_total",
        "dpm_isolation_violations_total",
    ):
        assert metric in exprs
    rules = yaml.safe_load((REPO / "deploy" / "prometheus" / "alerts.yml").read_text())["groups"][0]["rules"]
    assert {r["alert"] for r in rules} == {"DpmConsumerLagGrowing", "DpmDeadLetterRate", "DpmIsolationViolation",
                                           "DpmReplayDrift"}  # fmt: skip
    prometheus = yaml.safe_load((REPO / "deploy" / "prometheus" / "prometheus.yml").read_text())
    assert prometheus["rule_files"] == ["/etc/prometheus/alerts.yml"]


def test_dockerfile_runs_unprivileged_from_a_slim_image() -> None:
    dockerfile = (REPO / "deploy" / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11-slim$", dockerfile, re.M)
    assert re.search(r"^USER 10001", dockerfile, re.M)
    assert 'ENTRYPOINT ["dpm"]' in dockerfile
