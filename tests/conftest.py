"""Shared fixtures: the session broker for the integration and e2e tiers."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.config.settings import Settings
from pipeline.kafka.admin import fetch_metadata
from pipeline.kafka.topics import TopicNames
from pipeline.services.cluster import private_cluster
from tests.kafka_support import unique_prefix


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Bootstrap servers of a real broker: DPM_BOOTSTRAP if set (CI starts one), else a private one."""
    configured = os.environ.get("DPM_BOOTSTRAP")
    if configured:
        fetch_metadata({"bootstrap.servers": configured}, timeout_s=10)
        yield configured
        return
    with private_cluster(Settings.from_env(), tmp_path_factory.mktemp("broker-home")) as cluster:
        yield cluster.bootstrap


@pytest.fixture
def kafka_config(kafka_bootstrap: str) -> dict[str, str]:
    """Base librdkafka configuration for the session broker."""
    return {"bootstrap.servers": kafka_bootstrap}


@pytest.fixture
def topic_names() -> TopicNames:
    """Topic names under a prefix unique to this test."""
    return TopicNames(unique_prefix())


@pytest.fixture
def private_home(tmp_path: Path) -> Path:
    """A DPM_HOME of this test's own, for tests that run their own broker."""
    return tmp_path / "dpm-home"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks every test by its tier folder, so `-m "not integration"` runs the unit tier alone."""
    for item in items:
        parts = Path(str(item.fspath)).parts
        if "integration" in parts:
            item.add_marker(pytest.mark.integration)
        elif "e2e" in parts:
            item.add_marker(pytest.mark.e2e)
