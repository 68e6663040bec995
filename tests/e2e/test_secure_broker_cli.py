"""`dpm broker up --secure` from the command line: users and their files, status, a refused anonymous client."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pipeline.config.settings import read_properties
from pipeline.kafka.cluster.admin import fetch_metadata
from pipeline.kafka.errors import BrokerUnavailableError
from pipeline.kafka.local.local_broker import free_cluster_port
from tests.processes import dpm_cli

pytestmark = pytest.mark.e2e


def test_a_secured_broker_is_started_with_a_user_per_role_and_reported_on(private_home: Path) -> None:
    env = {"DPM_HOME": str(private_home)}
    port = free_cluster_port(1, secure=True)
    refused = dpm_cli("broker", "up", "--secure", "--port", str(port), "--user", "tenant-acme", env=env)
    assert refused.returncode != 0
    assert "dpm tenants add acme" in refused.stdout + refused.stderr  # a tenant's principal lives with its tenant
    started = dpm_cli("broker", "up", "--secure", "--port", str(port), "--user", "analyst", env=env)
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        listed = dict(re.findall(r"^\s+([\w-]+)\s+(\S+\.properties)$", started.stdout, re.MULTILINE))
        assert set(listed) == {"admin", "producer", "worker", "baseline", "auditor", "operator", "analyst"}
        for user, path in listed.items():
            props = read_properties(Path(path))
            assert props["sasl.username"] == user
            assert props["security.protocol"] == "SASL_SSL"
            assert Path(path).stat().st_mode & 0o777 == 0o600
            assert props["sasl.password"] not in started.stdout + started.stderr
        assert fetch_metadata(read_properties(Path(listed["worker"]))).broker_ids == (1,)
        with pytest.raises(BrokerUnavailableError):
            fetch_metadata({"bootstrap.servers": f"127.0.0.1:{port}"}, timeout_s=3)
        status = dpm_cli("broker", "status", env=env)
        assert status.returncode == 0, status.stdout + status.stderr
        assert "up" in status.stdout
        password = read_properties(Path(listed["worker"]))["sasl.password"]
        again = dpm_cli("broker", "up", "--secure", "--port", str(port), env=env)  # reports it; users are kept
        assert again.returncode == 0, again.stderr
        assert "already running" in again.stdout
        assert read_properties(Path(listed["worker"]))["sasl.password"] == password
        # Each finds the broker under DPM_HOME (the session's DPM_BOOTSTRAP, CI's broker, emptied: unset).
        unnamed = {**env, "DPM_BOOTSTRAP": "", "DPM_KAFKA_CONFIG": "", "DPM_UI_ADMIN_TOKEN": "0123456789abcdef" * 2}
        for command in (("topics", "create"), ("ui",), ("replay", "--all")):
            anonymous = dpm_cli(*command, env=unnamed)
            assert anonymous.returncode == 1
            assert anonymous.stderr.strip().splitlines() == [
                f"error: the local broker at 127.0.0.1:{port} is secured (SASL over TLS): set DPM_KAFKA_CONFIG to "
                f"a role's client properties, one of {private_home}/credentials/<role>.properties"
            ]
        named = dpm_cli("topics", "create", env={**env, "DPM_BOOTSTRAP": f"127.0.0.1:{port}"})
        assert named.returncode == 1
        assert f"a server listens at 127.0.0.1:{port} but did not answer as Kafka over plaintext" in named.stderr
        assert "no Kafka broker answered" not in named.stderr
        plain = dpm_cli("broker", "up", "--port", str(port), env=env)
        assert plain.returncode != 0
        assert "secured" in plain.stdout + plain.stderr
    finally:
        dpm_cli("broker", "down", env=env)
