"""The cluster a command runs against, and the worker processes it starts for the duration."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from pipeline.kafka import local_broker
from pipeline.settings import Settings


@contextmanager
def cluster(settings: Settings, say: Callable[[str], None]) -> Iterator[str]:
    """Bootstrap servers of DPM_BOOTSTRAP's cluster, else of the local broker.

    The local broker is started here, and stopped afterwards, only if it was not already running.
    """
    if settings.bootstrap_configured:
        yield settings.bootstrap_servers
        return
    running = local_broker.read_running(settings.home)
    if running is not None:
        bootstrap, started = running.bootstrap, False
    else:
        started_cluster, _ = local_broker.start(settings.home, settings.cache_dir, settings.kafka_version, nodes=1,
                                                port=9092)  # fmt: skip
        bootstrap, started = started_cluster.bootstrap, True
    say(f"local Kafka {'started' if started else 'already running'} at {bootstrap}")
    try:
        yield bootstrap
    finally:
        if started:
            local_broker.stop(settings.home)
            say("stopped the local broker")


@contextmanager
def pipeline_processes(
    commands: list[list[str]], env: dict[str, str], logs: Path
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Runs `python -m pipeline <command>` children; SIGTERM (then SIGKILL) on exit."""
    logs.mkdir(parents=True, exist_ok=True)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for i, command in enumerate(commands):
            with (logs / f"{command[0]}-{i}.log").open("wb") as log:
                procs.append(subprocess.Popen([sys.executable, "-m", "pipeline", *command], env=env, stdout=log,
                                              stderr=subprocess.STDOUT))  # fmt: skip
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
