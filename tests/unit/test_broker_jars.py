"""Resolving the broker jars says what it does on the first run, and nothing once they are cached."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.kafka.local.broker_runtime import ensure_broker_jars

# Stands in for Maven: copies one 2 MB "jar" to the -DoutputDirectory it is given.
FAKE_MVN = """#!/bin/sh
for arg in "$@"; do
  case "$arg" in -DoutputDirectory=*) out="${arg#-DoutputDirectory=}";; esac
done
mkdir -p "$out" && head -c 2097152 /dev/zero > "$out/kafka-fake.jar"
"""


def test_the_first_run_says_it_resolves_the_jars_and_how_much_it_fetched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "mvn").write_text(FAKE_MVN)
    (bin_dir / "mvn").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    said: list[str] = []
    libs = ensure_broker_jars(tmp_path / "cache", "9.9.9", say=said.append)
    assert (libs / "kafka-fake.jar").exists()
    assert said[0].startswith("first run: resolving the Apache Kafka 9.9.9 broker jars through Maven")
    assert "~/.m2" in said[0]
    assert said[1].startswith("resolved 1 jars, 2 MB")
    said.clear()
    assert ensure_broker_jars(tmp_path / "cache", "9.9.9", say=said.append) == libs
    assert said == []  # cached: nothing to say
