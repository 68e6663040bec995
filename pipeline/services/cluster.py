"""The cluster a command runs against, and the worker processes it starts for the duration."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from pipeline.config.settings import Settings
from pipeline.kafka.cluster.credentials import credentials_dir
from pipeline.kafka.errors import BrokerUnavailableError
from pipeline.kafka.local import local_broker


def cluster_settings(settings: Settings) -> Settings:
    """`settings` pointed at the local broker recorded under DPM_HOME when they name no cluster themselves."""
    if settings.kafka.bootstrap_configured:
        return settings
    running = local_broker.read_running(settings.paths.home)
    if running is None:
        return settings
    if running.secure and settings.kafka.client_config_file is None:
        raise BrokerUnavailableError(
            f"the local broker at {running.bootstrap} is secured (SASL over TLS): set DPM_KAFKA_CONFIG to a "
            f"role's client properties, one of {credentials_dir(settings.paths.home)}/<role>.properties"
        )
    return settings.with_bootstrap(running.bootstrap)


@contextmanager
def cluster(settings: Settings, say: Callable[[str], None], *, keep_running: bool = False) -> Iterator[str]:
    """Bootstrap servers of DPM_BOOTSTRAP's cluster, else of the local broker.

    The local broker is started here, and stopped afterwards (unless `keep_running`), only if it was
    not already running.
    """
    if settings.kafka.bootstrap_configured:
        yield settings.kafka.bootstrap_servers
        return
    running = local_broker.read_running(settings.paths.home)
    if running is not None:
        bootstrap, started = running.bootstrap, False
    else:
        paths = settings.paths
        say("starting the local Kafka broker")
        started_cluster, _ = local_broker.start(paths.home, paths.cache_dir, settings.kafka.version, nodes=1,
                                                port=9092, java_home=paths.java_home, say=say)  # fmt: skip
        bootstrap, started = started_cluster.bootstrap, True
    say(f"local Kafka {'started' if started else 'already running'} at {bootstrap}")
    try:
        yield bootstrap
    finally:
        if started and not keep_running:
            local_broker.stop(settings.paths.home)
            say("stopped the local broker")
        elif started:
            say(f"the local broker keeps running at {bootstrap} (`dpm broker down` stops it)")


@contextmanager
def pipeline_processes(
    commands: list[list[str]],
    env: dict[str, str] | Callable[[list[str]], dict[str, str]],
    logs: Path,
    *,
    python: str = sys.executable,
    cwd: Path | None = None,
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Runs `python -m pipeline <command>` children; SIGTERM (then SIGKILL) on exit.

    `env` is every child's environment, or gives each command its own (a role's client properties).
    `python` and `cwd` run another installation (an earlier release) outside this checkout.
    """
    logs.mkdir(parents=True, exist_ok=True)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for i, command in enumerate(commands):
            with (logs / f"{command[0]}-{i}.log").open("wb") as log:
                procs.append(subprocess.Popen([python, "-m", "pipeline", *command], stdout=log, cwd=cwd,
                                              env=env(command) if callable(env) else env,
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


def child_env(bootstrap: str, prefix: str, **settings: str) -> dict[str, str]:
    """The environment of `python -m pipeline` children: this process's, pointed at a cluster and topics.

    Metrics are off (children of one machine would fight over the port) unless `settings` say otherwise.
    """
    return {**os.environ, "DPM_BOOTSTRAP": bootstrap, "DPM_TOPIC_PREFIX": prefix, "DPM_METRICS_PORT": "-1", **settings}


@contextmanager
def private_cluster(
    settings: Settings, home: Path, nodes: int = 1, *, secure: bool = False
) -> Iterator[local_broker.RunningCluster]:
    """A local cluster of its own under `home`, on free loopback ports, stopped afterwards."""
    paths = settings.paths
    port = local_broker.free_cluster_port(nodes, secure=secure)
    running, _ = local_broker.start(home, paths.cache_dir, settings.kafka.version, nodes=nodes, port=port,
                                    java_home=paths.java_home, secure=secure)  # fmt: skip
    try:
        yield running
    finally:
        local_broker.stop(home)
