"""Fetches the Apache Kafka broker jars from Maven Central into a cache folder outside the repo."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from pipeline.kafka.errors import LocalBrokerError
from pipeline.wire.resources import kafka_deploy_dir

_STAMP = ".complete"
_EXPECTED_MB = 46  # what the 3.9.2 broker's jars and their dependencies weigh


def java_executable(java_home: Path | None) -> str:
    """The `java` to run the broker with: JAVA_HOME's (from the settings), else the one on PATH."""
    if java_home is not None and (java_home / "bin" / "java").exists():
        return str(java_home / "bin" / "java")
    found = shutil.which("java")
    if not found:
        raise LocalBrokerError("java not found: install a JDK 17+ or set JAVA_HOME")
    return found


def runtime_dir(cache_dir: Path, kafka_version: str) -> Path:
    """Folder holding the jars of one Kafka version."""
    return cache_dir / f"kafka-{kafka_version}"


def ensure_broker_jars(
    cache_dir: Path, kafka_version: str, quiet: bool = True, say: Callable[[str], None] = lambda _: None
) -> Path:
    """Returns the folder of broker jars, resolving them through Maven on first use (said through `say`).

    The folder is filled in a temporary sibling and renamed when Maven succeeds, so an
    interrupted download never leaves a half-populated classpath behind.
    """
    target = runtime_dir(cache_dir, kafka_version)
    libs = target / "libs"
    if (target / _STAMP).exists():
        return libs
    say(f"first run: resolving the Apache Kafka {kafka_version} broker jars through Maven into {target} "
        f"(about {_EXPECTED_MB} MB; Maven also keeps them in its local repository, ~/.m2 by default)")  # fmt: skip
    started = time.monotonic()
    mvn = shutil.which("mvn")
    if not mvn:
        raise LocalBrokerError("mvn not found: Maven is needed once to fetch the Kafka broker jars")
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    template = (kafka_deploy_dir() / "pom.xml").read_text(encoding="utf-8")
    (staging / "pom.xml").write_text(template.replace("@KAFKA_VERSION@", kafka_version), encoding="utf-8")
    command = [mvn, "-B", "dependency:copy-dependencies", f"-DoutputDirectory={staging / 'libs'}"]
    if quiet:
        command.insert(1, "-q")
    result = subprocess.run(command, cwd=staging, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-15:])
        raise LocalBrokerError(f"Maven could not fetch Kafka {kafka_version}:\n{tail}")
    (staging / _STAMP).write_text(kafka_version, encoding="utf-8")
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    jars = list(libs.glob("*.jar"))
    size_mb = sum(j.stat().st_size for j in jars) / 1024 / 1024
    say(f"resolved {len(jars)} jars, {size_mb:.0f} MB, in {time.monotonic() - started:.0f} s")
    return libs
