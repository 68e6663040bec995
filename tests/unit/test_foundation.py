"""The foundation: settings, broker config rendering, the core's purity rule, deploy files."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pipeline.config.settings import Settings, SettingsError, read_properties
from pipeline.kafka.cluster.topics import TopicNames, pipeline_topics
from pipeline.kafka.local.local_broker import ClusterLayout, _write_node_config

REPO = Path(__file__).resolve().parents[2]


def test_settings_read_environment_and_clientread_properties(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    props = tmp_path / "client.properties"
    props.write_text("# SASL for an existing cluster\nsecurity.protocol=SASL_SSL\n\nsasl.mechanism = PLAIN\n")
    monkeypatch.setenv("DPM_BOOTSTRAP", "kafka-1:9093,kafka-2:9093")
    monkeypatch.setenv("DPM_TOPIC_PREFIX", "prod")
    monkeypatch.setenv("DPM_KAFKA_CONFIG", str(props))
    settings = Settings.from_env()
    assert settings.kafka.client_config() == {
        "bootstrap.servers": "kafka-1:9093,kafka-2:9093",
        "reconnect.backoff.ms": "20",  # the product's default, which the file may override
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
    }
    assert settings.kafka.bootstrap_configured
    assert TopicNames(settings.kafka.topic_prefix).events == "prod.events"


def test_secrets_are_masked_and_bad_values_are_one_line_errors(tmp_path: Path) -> None:
    props = tmp_path / "client.properties"
    props.write_text("sasl.username=svc\nsasl.password=hunter2\n")
    settings = Settings.from_env({"ANTHROPIC_API_KEY": "sk-ant-secret", "DPM_KAFKA_CONFIG": str(props)})
    shown = repr(settings) + str(settings)
    assert "sk-ant-secret" not in shown
    assert "hunter2" not in shown
    assert "sasl.password" in shown  # the key is shown, its value is not
    assert settings.kafka.client_config()["sasl.password"] == "hunter2"
    with pytest.raises(SettingsError, match=r"^DPM_METRICS_PORT: .*integer.*'nine'"):
        Settings.from_env({"DPM_METRICS_PORT": "nine"})


def test_command_line_choices_override_the_environment() -> None:
    settings = Settings.from_env({"DPM_BACKEND": "anthropic", "DPM_METRICS_PORT": "9500", "DPM_METRICS_TENANTS": "a,b"})
    chosen = settings.with_choices(backend="extractive", metrics_port=-1)
    assert (chosen.model.backend, chosen.metrics.port, chosen.metrics.tenants) == ("extractive", -1, ("a", "b"))
    assert settings.with_choices() == settings


def test_malformed_client_properties_name_the_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    props = tmp_path / "bad.properties"
    props.write_text("security.protocol=SSL\njust-a-word\n")
    monkeypatch.setenv("DPM_KAFKA_CONFIG", str(props))
    with pytest.raises(SettingsError, match=r"bad\.properties:2: expected key=value"):
        Settings.from_env()


def test_three_node_config_is_kraft_on_loopback_with_rf3_min_isr2(tmp_path: Path) -> None:
    layout = ClusterLayout(tmp_path, nodes=3, port=19092)
    rendered = _write_node_config(layout, 2)
    assert not re.search(r"@[A-Z_]+@", rendered.read_text()), "a template placeholder was left unfilled"
    props = read_properties(rendered)
    assert props["process.roles"] == "broker,controller"
    assert props["node.id"] == "2"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:19192,2@127.0.0.1:19193,3@127.0.0.1:19194"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:19093,CONTROLLER://127.0.0.1:19193"
    assert props["default.replication.factor"] == "3"
    assert props["min.insync.replicas"] == "2"
    assert props["transaction.state.log.min.isr"] == "2"
    assert layout.bootstrap == "127.0.0.1:19092,127.0.0.1:19093,127.0.0.1:19094"


def test_single_node_config_replicates_once(tmp_path: Path) -> None:
    props = read_properties(_write_node_config(ClusterLayout(tmp_path, nodes=1, port=9092), 1))
    assert props["offsets.topic.replication.factor"] == "1"
    assert props["min.insync.replicas"] == "1"
    assert props["listeners"].count("127.0.0.1") == 2


def test_events_topic_spec_is_compacted_forever() -> None:
    events = pipeline_topics(TopicNames("x"))[0]
    assert events.name == "x.events"
    assert events.configs["cleanup.policy"] == "compact"
    assert events.configs["retention.ms"] == "-1"


@pytest.mark.parametrize(
    "source",
    [
        "import confluent_kafka\n",
        "from faust import App\n",
        "import aiokafka\n",
        "from anthropic import Anthropic\n",
        "import httpx\n",
        "import aiohttp\n",
        "from prometheus_client import Counter\n",
        "from pydantic import BaseModel\n",
    ],
)
def test_lint_rejects_adapter_imports_in_core(source: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--stdin-filename", "pipeline/core/probe.py", "-"],
        input=source,
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    assert result.returncode == 1
    assert "TID251" in result.stdout


def _lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(Path(sys.executable).parent / "lint-imports"), "--no-cache"], capture_output=True,
                          text=True, cwd=root, env={**os.environ, "PYTHONPATH": str(root)}, check=False)  # fmt: skip


def test_the_layer_contracts_hold_and_catch_an_import_pointing_outward(tmp_path: Path) -> None:
    assert _lint_imports(REPO).returncode == 0, _lint_imports(REPO).stdout
    shutil.copytree(REPO / "pipeline", tmp_path / "pipeline", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    with (tmp_path / "pipeline" / "wire" / "limits.py").open("a") as module:
        module.write("from pipeline.kafka.cluster.topics import TopicNames  # noqa\n")
    broken = _lint_imports(tmp_path)
    assert broken.returncode != 0
    assert "pipeline.wire.limits -> pipeline.kafka.cluster.topics" in broken.stdout


def test_lint_allows_the_same_imports_outside_core() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--select", "TID251", "--stdin-filename", "pipeline/kafka/p.py", "-"],
        input="import confluent_kafka\n",
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    assert result.returncode == 0, result.stdout


def test_compose_parses_and_names_every_service_the_docs_mention() -> None:
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    services = set(compose["services"])
    assert {"kafka", "topic-init", "worker", "baseline", "prometheus", "grafana"} <= services
    assert compose["services"]["kafka"]["image"].startswith("apache/kafka:")
    page = (REPO / "docs" / "how-to" / "deploy.md").read_text()
    mentioned = set(re.findall(r"compose service `([a-z-]+)`", page))
    assert mentioned, "docs/how-to/deploy.md names the compose services as: compose service `name`"
    assert mentioned <= services


def test_broker_templates_ship_with_the_repo() -> None:
    for name in ("pom.xml", "server.properties", "log4j.properties"):
        assert (REPO / "deploy" / "kafka" / name).is_file()
    assert "org.apache.kafka" in (REPO / "deploy" / "kafka" / "pom.xml").read_text()


def test_secured_node_config_has_sasl_ssl_clients_mutual_tls_nodes_and_deny_by_default(tmp_path: Path) -> None:
    layout = ClusterLayout(tmp_path, nodes=1, port=19092, secure=True)
    rendered = _write_node_config(layout, 1)
    assert not re.search(r"@[A-Z_]+@", rendered.read_text()), "a template placeholder was left unfilled"
    assert rendered.stat().st_mode & 0o777 == 0o600  # it holds the keystore password
    props = read_properties(rendered)
    assert props["listeners"] == ("CLIENT://127.0.0.1:19092,INTERNAL://127.0.0.1:19292,"
                                  "CONTROLLER://127.0.0.1:19192")  # fmt: skip
    assert props["listener.security.protocol.map"] == "CLIENT:SASL_SSL,INTERNAL:SSL,CONTROLLER:SSL"
    assert props["inter.broker.listener.name"] == "INTERNAL"
    assert props["listener.name.internal.ssl.client.auth"] == props["listener.name.controller.ssl.client.auth"]
    assert props["listener.name.controller.ssl.client.auth"] == "required"
    assert props["sasl.enabled.mechanisms"] == "SCRAM-SHA-512"
    assert props["allow.everyone.if.no.acl.found"] == "false"
    assert props["super.users"] == "User:CN=dpm-node;User:admin"
    assert props["ssl.keystore.password"] == layout.tls.keystore_password()
    assert layout.root.name == "kraft-1-secure"  # never the plain cluster's data
    assert 19292 in layout.ports
