"""Test helpers for the real-broker tiers: free ports, a session broker, unique topics."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pipeline.kafka import local_broker
from pipeline.settings import KAFKA_VERSION, Settings


def free_cluster_port(nodes: int) -> int:
    """A first-broker port whose broker and controller ports (see ClusterLayout) are all free."""
    for _ in range(200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind(("127.0.0.1", 0))
            base = int(probe.getsockname()[1])
        if base + 100 + nodes >= 65535:
            continue
        layout = local_broker.ClusterLayout(Path("/nonexistent"), nodes, base)
        if all(local_broker.port_problem(p) is None for p in layout.ports):
            return base
    raise RuntimeError("no free port range found on loopback")


@contextmanager
def running_local_broker(home: Path, nodes: int = 1) -> Iterator[local_broker.RunningCluster]:
    """Starts a private local cluster under `home` and stops it afterwards."""
    cache_dir = Settings.from_env().cache_dir
    cluster, _ = local_broker.start(home, cache_dir, KAFKA_VERSION, nodes=nodes, port=free_cluster_port(nodes))
    try:
        yield cluster
    finally:
        local_broker.stop(home)


def unique_prefix(label: str = "t") -> str:
    """A topic prefix no other test uses, so tests never see each other's records."""
    return f"{label}-{uuid.uuid4().hex[:10]}"
