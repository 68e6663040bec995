"""Shared fixtures: the session broker for the integration and e2e tiers."""

from __future__ import annotations

import os
import socket
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, sync_playwright
from pluggy import Result

from pipeline.config.settings import Settings, keys_folder
from pipeline.kafka.cluster.admin import fetch_metadata
from pipeline.kafka.cluster.credentials import USERS, provision
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.kafka.keytopic.keystore import kafka_case_keys
from pipeline.keys.providers import LocalFileKeyProvider
from pipeline.keys.store import CaseKeys
from pipeline.llm import local_model
from pipeline.services.cluster import private_cluster
from tests.kafka_support import unique_prefix
from tests.secured_support import Secured

CHROMIUM = Path(os.environ.get("DPM_CHROMIUM", "/usr/lib/chromium/chromium"))


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Debian's Chromium driven by Playwright (its own browser download is not used); skipped without it."""
    if not CHROMIUM.exists():
        if os.environ.get("DPM_REQUIRE_BROWSER"):
            pytest.fail(f"no Chromium at {CHROMIUM} (apt-get install chromium, or set DPM_CHROMIUM)")
        pytest.skip(f"no Chromium at {CHROMIUM}")
    with sync_playwright() as playwright:
        # --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start.
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture(scope="session", autouse=True)
def keys_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One folder of tenant key-encryption keys for the session, shared with every child process.

    Workers seal what they publish under case keys wrapped by these; the test process reads with them.
    """
    path = tmp_path_factory.mktemp("keys")
    before = os.environ.get("DPM_KEYS_DIR")
    os.environ["DPM_KEYS_DIR"] = str(path)
    yield path
    if before is None:
        os.environ.pop("DPM_KEYS_DIR", None)
    else:
        os.environ["DPM_KEYS_DIR"] = before


@pytest.fixture
def case_keys(kafka_config: dict[str, str], topic_names: TopicNames, keys_dir: Path) -> Iterator[CaseKeys]:
    """The case keys of this test's topics (the same key folder its workers use)."""
    keys = kafka_case_keys(
        kafka_config, topic_names.keys, LocalFileKeyProvider(keys_folder(keys_dir, topic_names.prefix))
    )
    yield keys
    keys.close()


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


@pytest.fixture(scope="session")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    """A secured local cluster of the session's own (TLS, SCRAM users per role, deny by default), no ACL yet.

    Tenants' principals are made by `dpm tenants add` (under this DPM_HOME), as a user's are.
    """
    home = tmp_path_factory.mktemp("secured-home")
    with private_cluster(Settings.from_env(), home, secure=True) as cluster:
        provision(cluster.layout, home, USERS)
        yield Secured(cluster, home)


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


def free_port() -> int:
    """A TCP port free on loopback right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="session")
def local_llm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[local_model.RunningModel]:
    """SmolLM2-135M-Instruct behind a loopback llama.cpp server, for the whole session.

    Skipped where the local extra is not installed, unless DPM_REQUIRE_LOCAL_MODEL is set (CI),
    where a missing model is a failure instead.
    """
    try:
        gguf = local_model.shipped_gguf()
    except local_model.LocalModelError as exc:
        if os.environ.get("DPM_REQUIRE_LOCAL_MODEL"):
            raise
        pytest.skip(str(exc))
    home = tmp_path_factory.mktemp("model-home")
    running, _ = local_model.start(home, local_model.ServerSpec(gguf, free_port()))
    try:
        yield running
    finally:
        local_model.stop(home)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks every test by its tier folder, so `-m "not integration"` runs the unit tier alone."""
    for item in items:
        parts = Path(str(item.fspath)).parts
        if "integration" in parts:
            item.add_marker(pytest.mark.integration)
        elif "e2e" in parts:
            item.add_marker(pytest.mark.e2e)


# What a failed test's child processes logged is shown with it: in CI the test's folder is gone
# once the run ends, and a failure that happens once in many runs must be explained by that run.
_LOG_TAIL_LINES = 60
_LOGS_SHOWN = 8


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item) -> Generator[None, Result[pytest.TestReport], None]:
    report = (yield).get_result()
    tmp_path = getattr(item, "funcargs", {}).get("tmp_path")
    if report.when != "call" or not report.failed or not isinstance(tmp_path, Path):
        return
    logs = sorted(tmp_path.rglob("*.log"), key=lambda p: p.stat().st_mtime, reverse=True)[:_LOGS_SHOWN]
    for log in logs:
        lines = log.read_text(errors="replace").splitlines()[-_LOG_TAIL_LINES:]
        report.sections.append((f"last lines of {log.relative_to(tmp_path)}", "\n".join(lines)))
