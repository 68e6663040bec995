"""Helpers for tests on the secured local broker: its users' client properties, and what the broker refuses."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import KafkaError, Producer

from pipeline.config.settings import read_properties
from pipeline.kafka.local import local_broker


@dataclass(frozen=True)
class Secured:
    """A running secured cluster and the DPM_HOME whose credentials/ holds its users' properties files."""

    cluster: local_broker.RunningCluster
    home: Path

    def config(self, user: str) -> dict[str, str]:
        """The librdkafka properties `dpm broker up --secure` wrote for `user`."""
        return read_properties(self.properties(user))

    def properties(self, user: str) -> Path:
        return self.home / "credentials" / f"{user}.properties"

    def dpm(self, user: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        """`python -m pipeline ARGS` as `user` (its properties file in DPM_KAFKA_CONFIG)."""
        # The properties file names the cluster: a DPM_BOOTSTRAP naming another (CI's broker) is refused.
        inherited = {k: v for k, v in os.environ.items() if k != "DPM_BOOTSTRAP"}
        return subprocess.run([sys.executable, "-m", "pipeline", *args], check=False, capture_output=True, text=True,
                              env={**inherited, "DPM_HOME": str(self.home), **env,
                                   "DPM_KAFKA_CONFIG": str(self.properties(user))}, timeout=180)  # fmt: skip


def produce_error(config: dict[str, str], topic: str) -> KafkaError | None:
    """The error one record sent to `topic` with `config` is reported with, None when it was written."""
    reports: list[KafkaError | None] = []
    producer = Producer({**config, "message.timeout.ms": 10000})
    producer.produce(topic, b"x", key=b"k", on_delivery=lambda err, _msg: reports.append(err))
    producer.flush(15)
    assert reports, "no delivery report"
    return reports[0]


def code(error: KafkaError | None) -> int | None:
    return None if error is None else int(error.code())


def command_lines(pids: list[int]) -> list[str]:
    """The command lines of the processes still running (what `ps` shows)."""
    lines = []
    for pid in pids:
        try:
            lines.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:
            continue
    return lines
