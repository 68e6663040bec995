"""The baseline's faust connection is built from the same client properties as every librdkafka client."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import cast

import faust
import pytest
from faust.transport.drivers import by_url
from faust.transport.drivers.aiokafka import Consumer

from pipeline.config.settings import Settings, SettingsError
from pipeline.workers.baseline.connection import faust_connection
from pipeline.workers.baseline.transport import Transport


def _kafka(tmp_path: Path, properties: str, bootstrap: str = "k1:9093,k2:9093") -> Settings:
    path = tmp_path / "client.properties"
    path.write_text(properties)
    return Settings.from_env({"DPM_BOOTSTRAP": bootstrap, "DPM_KAFKA_CONFIG": str(path)})


def test_plaintext_needs_no_credentials_and_keeps_the_client_id(tmp_path: Path) -> None:
    options = faust_connection(_kafka(tmp_path, "client.id=dpm-prod\n").kafka)
    assert options["broker"] == ["dpm://k1:9093", "dpm://k2:9093"]
    assert options["broker_client_id"] == "dpm-prod"
    assert "broker_credentials" not in options


def test_sasl_settings_become_faust_sasl_credentials(tmp_path: Path) -> None:
    properties = "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\nsasl.username=svc\nsasl.password=pw\n"
    credentials = faust_connection(_kafka(tmp_path, properties).kafka)["broker_credentials"]
    assert isinstance(credentials, faust.SASLCredentials)
    assert (credentials.username, credentials.password, credentials.mechanism.value) == ("svc", "pw", "SCRAM-SHA-512")
    assert credentials.protocol.value == "SASL_PLAINTEXT"


def test_a_bootstrap_in_the_file_names_the_cluster_and_may_not_contradict_dpm_bootstrap(tmp_path: Path) -> None:
    path = tmp_path / "worker.properties"
    path.write_text("bootstrap.servers=other:9092\n")
    settings = Settings.from_env({"DPM_KAFKA_CONFIG": str(path)})
    assert faust_connection(settings.kafka)["broker"] == ["dpm://other:9092"]
    assert settings.kafka.bootstrap_configured  # no local broker is started for it
    assert settings.kafka.client_config()["bootstrap.servers"] == "other:9092"
    assert Settings.from_env({"DPM_KAFKA_CONFIG": str(path), "DPM_BOOTSTRAP": "other:9092"}) == settings
    with pytest.raises(SettingsError, match="name different clusters"):
        _kafka(tmp_path, "bootstrap.servers=other:9092\n")


@pytest.mark.parametrize(
    "properties",
    ["security.protocol=SASL_SSL\nsasl.mechanism=GSSAPI\n", "security.protocol=KERBEROS\n"],
)
def test_security_the_baseline_cannot_apply_is_an_error_not_a_silent_downgrade(tmp_path: Path, properties: str) -> None:
    with pytest.raises(SettingsError, match="not supported by the baseline"):
        faust_connection(_kafka(tmp_path, properties).kafka)


def test_librdkafka_tuning_is_named_in_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    faust_connection(_kafka(tmp_path, "linger.ms=5\nclient.id=x\n").kafka)
    assert "linger.ms" in caplog.text


def test_the_brokers_scheme_selects_the_transport_whose_group_consumer_reads_committed_records_only(
    tmp_path: Path,
) -> None:
    # An aborted transaction of an agent's appends must never be folded (transport.py).
    broker = faust_connection(_kafka(tmp_path, "").kafka)["broker"][0]
    app = faust.App("t-isolation", broker=broker, web_enabled=False)
    assert by_url(broker) is Transport

    async def built() -> str:
        thread = cast(Consumer, app.consumer)._thread  # faust's delegate that builds the aiokafka consumer
        consumer = thread._create_worker_consumer(cast(Transport, app.transport))
        return str(consumer._isolation_level)

    assert asyncio.run(built()) == "read_committed"
