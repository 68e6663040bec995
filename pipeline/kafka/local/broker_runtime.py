"""Fetches the Apache Kafka broker jars from Maven Central into a cache folder outside the repo."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pipeline.kafka.errors import LocalBrokerError
from pipeline.wire.resources import kafka_deploy_dir

_STAMP = ".complete"
# The jar folder's layout revision: r2 added kafka-tools (the console producer and consumer).
_LAYOUT = "r2"

_RELOAD4J = (("org.slf4j", "slf4j-reload4j", "1.7.36"), ("ch.qos.reload4j", "reload4j", "1.2.25"))
_LOG4J2 = (
    ("org.apache.logging.log4j", "log4j-slf4j-impl", "2.26.1"),
    ("org.apache.logging.log4j", "log4j-core", "2.26.1"),
)


@dataclass(frozen=True)
class KafkaRelease:
    """An Apache Kafka release the local broker can run: 3.x logs through reload4j, 4.x through Log4j 2.

    4.x ships without a logging binding and no longer reads log4j.properties; both keep slf4j 1.7's
    API, so 4.x takes Log4j 2's binding for it (log4j-slf4j-impl) and a log4j2.properties file.
    """

    version: str

    @property
    def major(self) -> int:
        return int(self.version.split(".", 1)[0])

    @property
    def logging_dependencies(self) -> str:
        """The POM's dependency elements for the logging binding."""
        return "\n".join(f"    <dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId>"
                         f"<version>{version}</version></dependency>"
                         for group, artifact, version in (_RELOAD4J if self.major == 3 else _LOG4J2))  # fmt: skip

    @property
    def logging_config(self) -> str:
        """The logging configuration file (in deploy/kafka) the broker reads."""
        return "log4j.properties" if self.major == 3 else "log4j2.properties"

    def logging_property(self, config: Path) -> str:
        """The JVM option pointing the broker's logging at `config`."""
        if self.major == 3:
            return f"-Dlog4j.configuration=file:{config}"
        return f"-Dlog4j2.configurationFile={config}"

    @property
    def expected_mb(self) -> int:
        """What the jars weigh, measured: 56 MB for 3.9.2, 54 MB for 4.4.0 (kafka-tools included)."""
        return 56 if self.major == 3 else 54

    @property
    def console_producer(self) -> str:
        """The console producer's class (it moved from the Scala core into kafka-tools in 4.0)."""
        return "kafka.tools.ConsoleProducer" if self.major == 3 else "org.apache.kafka.tools.ConsoleProducer"

    console_consumer = "org.apache.kafka.tools.consumer.ConsoleConsumer"


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
    return cache_dir / f"kafka-{kafka_version}-{_LAYOUT}"


def ensure_broker_jars(
    cache_dir: Path, kafka_version: str, quiet: bool = True, say: Callable[[str], None] = lambda _: None
) -> Path:
    """Returns the folder of broker jars, resolving them through Maven on first use (said through `say`).

    The folder is filled in a temporary sibling and renamed when Maven succeeds, so an
    interrupted download never leaves a half-populated classpath behind.
    """
    release = KafkaRelease(kafka_version)
    target = runtime_dir(cache_dir, kafka_version)
    libs = target / "libs"
    if (target / _STAMP).exists():
        return libs
    say(f"first run: resolving the Apache Kafka {kafka_version} broker jars through Maven into {target} (about "
        f"{release.expected_mb} MB; Maven also keeps them in its local repository, ~/.m2 by default)")  # fmt: skip
    started = time.monotonic()
    mvn = shutil.which("mvn")
    if not mvn:
        raise LocalBrokerError("mvn not found: Maven is needed once to fetch the Kafka broker jars")
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    template = (kafka_deploy_dir() / "pom.xml").read_text(encoding="utf-8")
    pom = template.replace("@KAFKA_VERSION@", kafka_version).replace("@LOGGING@", release.logging_dependencies)
    (staging / "pom.xml").write_text(pom, encoding="utf-8")
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
