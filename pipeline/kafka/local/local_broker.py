"""The project's own Apache Kafka cluster on loopback: KRaft combined mode, 1 or 3 nodes, Kafka 3.x or 4.x.

Data lives under `<home>/broker/kraft-<n>` (Kafka 4.x: `kraft-<n>-kafka4`, so the releases never
share a data folder) and survives `down`/`up`; `<home>/broker/running.json` records the running
processes so that any later `dpm` invocation can report on or stop them.

A secured cluster (`secure`, its own folder `kraft-<n>-secure`) has three listeners per node:
CLIENT (SASL/SCRAM-SHA-512 over TLS) for every client, INTERNAL and CONTROLLER (mutual TLS with the
node certificate, local_tls.py) for the nodes themselves, and the standard authorizer, deny by default.
"""

from __future__ import annotations

import base64
import socket
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import orjson

from pipeline.config.settings import KAFKA_VERSION
from pipeline.kafka.cluster.admin import ClusterInfo, fetch_metadata, wait_for_brokers
from pipeline.kafka.errors import BrokerUnavailableError, LocalBrokerError
from pipeline.kafka.local.broker_runtime import KafkaRelease, ensure_broker_jars, java_executable
from pipeline.kafka.local.local_tls import NODE_SUBJECT, NodeTls, ensure_node_tls
from pipeline.runtime.processes import process_alive, terminate
from pipeline.wire.resources import kafka_deploy_dir

_CONTROLLER_PORT_OFFSET = 100
_INTERNAL_PORT_OFFSET = 200  # a secured cluster's inter-broker listener
ADMIN_USER = "admin"  # a secured cluster's super user besides the nodes (see credentials.py)
_JVM_OPTS = ("-Xms256m", "-Xmx768m", "-XX:+UseG1GC", "-Djava.awt.headless=true")


@dataclass(frozen=True)
class ClusterLayout:
    """Ports and folders of a local cluster of `nodes` nodes whose first broker listens on `port`."""

    home: Path
    nodes: int
    port: int
    kafka_version: str = KAFKA_VERSION
    secure: bool = False

    @property
    def release(self) -> KafkaRelease:
        return KafkaRelease(self.kafka_version)

    @property
    def root(self) -> Path:
        suffix = "" if self.release.major == 3 else f"-kafka{self.release.major}"
        return self.home / "broker" / f"kraft-{self.nodes}{suffix}{'-secure' if self.secure else ''}"

    @property
    def tls(self) -> NodeTls:
        """Where a secured cluster keeps its CA and node certificate."""
        return NodeTls(self.root / "tls")

    @property
    def node_ids(self) -> range:
        return range(1, self.nodes + 1)

    def broker_port(self, node_id: int) -> int:
        return self.port + node_id - 1

    def broker_address(self, node_id: int) -> str:
        return f"127.0.0.1:{self.broker_port(node_id)}"

    def controller_port(self, node_id: int) -> int:
        return self.port + _CONTROLLER_PORT_OFFSET + node_id - 1

    def internal_port(self, node_id: int) -> int:
        return self.port + _INTERNAL_PORT_OFFSET + node_id - 1

    def node_admin_config(self, node_id: int = 1) -> dict[str, str]:
        """Client settings (librdkafka) that reach a secured node's INTERNAL listener as the nodes' super user.

        Only whoever can read the node key (mode 600, in the cluster folder) connects this way: the
        broker's own start uses it to create the SCRAM users before any of them exists.
        """
        if not self.secure:
            return {"bootstrap.servers": self.broker_address(node_id)}
        tls = self.tls
        return {
            "bootstrap.servers": f"127.0.0.1:{self.internal_port(node_id)}",
            "security.protocol": "SSL",
            "ssl.ca.location": str(tls.ca),
            "ssl.certificate.location": str(tls.node_certificate),
            "ssl.key.location": str(tls.node_key),
        }

    def node_dir(self, node_id: int) -> Path:
        return self.root / f"node-{node_id}"

    @property
    def ports(self) -> tuple[int, ...]:
        """Every broker, controller (and, secured, internal) port of the cluster."""
        return tuple(port for port, _ in self.listeners)

    @property
    def listeners(self) -> tuple[tuple[int, str], ...]:
        """Each port the cluster binds on loopback with what listens there, e.g. (9192, "node 1's controller")."""
        return tuple((port, f"node {n}'s {role}") for n in self.node_ids for port, role in self._node_ports(n))

    def _node_ports(self, node_id: int) -> tuple[tuple[int, str], ...]:
        ports = ((self.broker_port(node_id), "client listener"), (self.controller_port(node_id), "controller"))
        return (*ports, (self.internal_port(node_id), "internal listener")) if self.secure else ports

    @property
    def port_summary(self) -> str:
        """The ports it binds, by role: "clients 9092, controller 9192" (ranges for 3 nodes)."""
        roles = [("clients", self.broker_port), ("controller", self.controller_port)]
        if self.secure:
            roles.append(("internal", self.internal_port))
        first, last = self.node_ids[0], self.node_ids[-1]
        spans = (str(at(first)) if first == last else f"{at(first)}-{at(last)}" for _, at in roles)
        return ", ".join(f"{name} {span}" for (name, _), span in zip(roles, spans, strict=True))

    @property
    def bootstrap(self) -> str:
        return ",".join(self.broker_address(n) for n in self.node_ids)


@dataclass(frozen=True)
class RunningCluster:
    """What `running.json` records about a started cluster."""

    nodes: int
    port: int
    bootstrap: str
    pids: tuple[int, ...]
    root: str
    kafka_version: str = KAFKA_VERSION  # absent from state files written before 4.x could run
    secure: bool = False  # absent from state files written before the secured cluster existed

    @property
    def layout(self) -> ClusterLayout:
        return ClusterLayout(Path(self.root).parents[1], self.nodes, self.port, self.kafka_version, self.secure)


def state_file(home: Path) -> Path:
    """Where the running cluster is recorded."""
    return home / "broker" / "running.json"


_MARKER = b"kafka.Kafka"


def _read_state(home: Path) -> RunningCluster | None:
    path = state_file(home)
    if not path.exists():
        return None
    raw = orjson.loads(path.read_bytes())
    return RunningCluster(**{**raw, "pids": tuple(raw["pids"])})


@dataclass(frozen=True)
class NodeHealth:
    """One node of a local cluster: its address, process and whether it answers a metadata request."""

    node_id: int
    address: str
    pid: int
    alive: bool
    answers: bool

    @property
    def up(self) -> bool:
        return self.alive and self.answers


def node_health(cluster: RunningCluster, timeout_s: float = 2.0) -> list[NodeHealth]:
    """Each node asked on its own address (a cluster can answer while some of its nodes are down)."""
    health = []
    for node_id, (address, pid) in enumerate(zip(cluster.bootstrap.split(","), cluster.pids, strict=True), start=1):
        alive = process_alive(pid, _MARKER)
        answers = False
        if alive:
            try:
                answers = node_id in fetch_metadata(cluster.layout.node_admin_config(node_id), timeout_s).broker_ids
            except BrokerUnavailableError:
                answers = False
        health.append(NodeHealth(node_id, address, pid, alive, answers))
    return health


def read_running(home: Path) -> RunningCluster | None:
    """The recorded cluster if any of its processes is still alive, else None."""
    cluster = _read_state(home)
    return cluster if cluster and any(process_alive(p, _MARKER) for p in cluster.pids) else None


def _render(template: str, values: dict[str, str]) -> str:
    for key, value in values.items():
        template = template.replace(f"@{key}@", value)
    return template


def _private(layout: ClusterLayout) -> None:
    """Makes the cluster's folders readable by their owner only (mode 0700), those of earlier starts too.

    Its data files hold every record in the clear fields (tenants, cases, tasks), and the metadata
    log holds the ACLs and the SCRAM verifiers: no other local user has any business reading them.
    """
    for folder in (layout.home / "broker", layout.root, *(layout.node_dir(n) for n in layout.node_ids)):
        folder.mkdir(parents=True, exist_ok=True)
        folder.chmod(0o700)


def _write_node_config(layout: ClusterLayout, node_id: int) -> Path:
    node = layout.node_dir(node_id)
    (node / "logs").mkdir(parents=True, exist_ok=True)
    voters = ",".join(f"{n}@127.0.0.1:{layout.controller_port(n)}" for n in layout.node_ids)
    replication = min(layout.nodes, 3)
    values = {
        "NODE_ID": str(node_id),
        "VOTERS": voters,
        "PORT": str(layout.broker_port(node_id)),
        "LOG_DIR": str(node / "data"),
        "REPLICATION": str(replication),
        "MIN_ISR": str(2 if replication >= 3 else 1),
        **_listeners(layout, node_id),
    }
    templates = kafka_deploy_dir()
    text = _render((templates / "server.properties").read_text(), values)
    config = node / "server.properties"
    if layout.secure:
        text += "\n" + _render((templates / "server-secure.properties").read_text(), _security(layout))
        config.touch(mode=0o600, exist_ok=True)
        config.chmod(0o600)  # it holds the keystore password
    config.write_text(text)
    logging = layout.release.logging_config
    (node / logging).write_text((templates / logging).read_text())
    return config


def _listeners(layout: ClusterLayout, node_id: int) -> dict[str, str]:
    """The node's listener settings: PLAINTEXT, or CLIENT (SASL_SSL) + INTERNAL (SSL) when secured."""
    controller = f"CONTROLLER://127.0.0.1:{layout.controller_port(node_id)}"
    if not layout.secure:
        address = f"PLAINTEXT://{layout.broker_address(node_id)}"
        return {"LISTENERS": f"{address},{controller}", "ADVERTISED": address, "INTER_BROKER": "PLAINTEXT",
                "PROTOCOL_MAP": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"}  # fmt: skip
    advertised = f"CLIENT://{layout.broker_address(node_id)},INTERNAL://127.0.0.1:{layout.internal_port(node_id)}"
    return {"LISTENERS": f"{advertised},{controller}", "ADVERTISED": advertised, "INTER_BROKER": "INTERNAL",
            "PROTOCOL_MAP": "CLIENT:SASL_SSL,INTERNAL:SSL,CONTROLLER:SSL"}  # fmt: skip


def _security(layout: ClusterLayout) -> dict[str, str]:
    tls = ensure_node_tls(layout.tls.folder)
    return {
        "KEYSTORE": str(tls.keystore),
        "KEYSTORE_PASSWORD": tls.keystore_password(),
        "CA": str(tls.ca),
        "SUPER_USERS": f"User:{NODE_SUBJECT};User:{ADMIN_USER}",
    }


def _cluster_id(layout: ClusterLayout) -> str:
    """The cluster's persistent id; Kafka ids are URL-safe base64 of 16 random bytes, never starting with '-'."""
    path = layout.root / "cluster.id"
    if path.exists():
        return path.read_text().strip()
    while True:
        candidate = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not candidate.startswith("-"):
            break
    layout.root.mkdir(parents=True, exist_ok=True)
    path.write_text(candidate)
    return candidate


def _java(java: str, libs: Path, node: Path, release: KafkaRelease, main_class: str, *args: str) -> list[str]:
    return [
        java,
        *_JVM_OPTS,
        release.logging_property(node / release.logging_config),
        f"-Dkafka.logs.dir={node / 'logs'}",
        "-cp",
        f"{libs}/*",
        main_class,
        *args,
    ]


def _format_storage(layout: ClusterLayout, java: str, libs: Path, configs: dict[int, Path]) -> None:
    """Formats each node's log dir once; formatted dirs (with meta.properties) keep their data."""
    formatting = ("format", "-t", _cluster_id(layout), "-c")
    pending = {
        n: subprocess.Popen(
            _java(java, libs, layout.node_dir(n), layout.release, "kafka.tools.StorageTool", *formatting, str(cfg)),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for n, cfg in configs.items()
        if not (layout.node_dir(n) / "data" / "meta.properties").exists()
    }
    for node_id, proc in pending.items():
        output, _ = proc.communicate(timeout=120)
        if proc.returncode != 0:
            raise LocalBrokerError(f"formatting node {node_id} failed:\n{output.strip()[-2000:]}")


def port_problem(port: int) -> str | None:
    """Why `port` on 127.0.0.1 cannot be bound now (e.g. "Address already in use"), or None if it can."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as exc:
            return exc.strerror or str(exc)
    return None


def _check_ports_free(layout: ClusterLayout) -> None:
    """Refuses, naming the first port it cannot bind and what would listen there, before anything starts."""
    for port, listener in layout.listeners:
        problem = port_problem(port)
        if problem is not None:
            offset = port - layout.port
            raise LocalBrokerError(
                f"port {port} on 127.0.0.1 ({listener}, --port + {offset}) cannot be bound: {problem}; "
                "stop what holds it or choose another --port"
            )


def log_tail(layout: ClusterLayout, lines: int = 25) -> str:
    """The last lines of every node's server and console logs, for a failed start's message."""
    chunks = []
    for node_id in layout.node_ids:
        for name in ("server.log", "console.log"):
            path = layout.node_dir(node_id) / "logs" / name
            if path.exists():
                tail = path.read_text(errors="replace").splitlines()[-lines:]
                chunks.append(f"--- node {node_id} {name} ---\n" + "\n".join(tail))
    return "\n".join(chunks) or "(no broker log was written)"


def _launch(layout: ClusterLayout, java: str, libs: Path, configs: dict[int, Path]) -> list[subprocess.Popen[bytes]]:
    procs = []
    for node_id, config in configs.items():
        node = layout.node_dir(node_id)
        with (node / "logs" / "console.log").open("ab") as console:
            procs.append(
                subprocess.Popen(
                    _java(java, libs, node, layout.release, "kafka.Kafka", str(config)),
                    stdout=console,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,  # survives the `dpm broker up` process that started it
                )
            )
    return procs


def start(
    home: Path,
    cache_dir: Path,
    kafka_version: str,
    *,
    nodes: int,
    port: int,
    timeout_s: float = 120.0,
    java_home: Path | None = None,
    secure: bool = False,
    say: Callable[[str], None] = lambda _: None,
) -> tuple[RunningCluster, bool]:
    """Starts the local cluster and waits until a metadata request lists every node.

    Returns the running cluster and whether it was already running (then nothing is started).
    Raises LocalBrokerError, with the broker logs' last lines, when the start fails. A secured
    cluster's users and their properties files are made by credentials.provision, not here.
    """
    if nodes not in (1, 3):
        raise LocalBrokerError(f"--nodes must be 1 or 3, got {nodes}")
    running = read_running(home)
    if running is not None:
        if (running.nodes, running.port, running.kafka_version, running.secure) != (nodes, port, kafka_version,
                                                                                      secure):  # fmt: skip
            raise LocalBrokerError(
                f"a {running.nodes}-node Kafka {running.kafka_version} {'secured ' if running.secure else ''}local "
                f"broker is already running at {running.bootstrap}; run `dpm broker down` first"
            )
        return running, True
    layout = ClusterLayout(home, nodes, port, kafka_version, secure)
    _check_ports_free(layout)  # before the jars are fetched or a folder made: a taken port is known at once
    _private(layout)
    libs = ensure_broker_jars(cache_dir, kafka_version, say=say)
    java = java_executable(java_home)
    configs = {n: _write_node_config(layout, n) for n in layout.node_ids}
    _format_storage(layout, java, libs, configs)
    procs = _launch(layout, java, libs, configs)
    cluster = RunningCluster(nodes, port, layout.bootstrap, tuple(p.pid for p in procs), str(layout.root),
                             kafka_version, secure)  # fmt: skip
    state_file(home).write_bytes(orjson.dumps(asdict(cluster)))
    try:
        _await_ready(layout, procs, timeout_s)
    except LocalBrokerError:
        stop(home)
        raise
    return cluster, False


def _await_ready(layout: ClusterLayout, procs: list[subprocess.Popen[bytes]], timeout_s: float) -> ClusterInfo:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        dead = [p for p in procs if p.poll() is not None]
        if dead:
            raise LocalBrokerError(
                f"broker process exited with code {dead[0].returncode} during start\n{log_tail(layout)}"
            )
        try:
            return _every_broker_sees_all(layout)
        except BrokerUnavailableError:
            continue
    raise LocalBrokerError(f"broker did not answer a metadata request within {timeout_s:.0f}s\n{log_tail(layout)}")


def _every_broker_sees_all(layout: ClusterLayout) -> ClusterInfo:
    """Asks each broker on its own for its view of the cluster; all must list every node.

    Each KRaft broker answers metadata from its own image, which may lag the controller's: one
    broker seeing all nodes does not mean the next client, bootstrapped to another, will. A fresh
    client per node sends its first request to that node, as it knows no other.
    """
    views = [wait_for_brokers(layout.node_admin_config(node_id), layout.nodes, 3.0) for node_id in layout.node_ids]
    return views[0]


def stop(home: Path, timeout_s: float = 60.0) -> RunningCluster | None:
    """Stops the recorded cluster (SIGTERM for a controlled shutdown, SIGKILL after timeout_s)."""
    cluster = _read_state(home)
    if cluster is None:
        return None
    alive = terminate(cluster.pids, _MARKER, timeout_s)
    state_file(home).unlink(missing_ok=True)
    return cluster if alive else None


def free_cluster_port(nodes: int, *, secure: bool = False) -> int:
    """A first-broker port whose broker, controller (and internal) ports (see ClusterLayout) are free on loopback."""
    for _ in range(200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind(("127.0.0.1", 0))
            base = int(probe.getsockname()[1])
        if base + _INTERNAL_PORT_OFFSET + nodes >= 65535:
            continue
        layout = ClusterLayout(Path("/nonexistent"), nodes, base, secure=secure)
        if all(port_problem(p) is None for p in layout.ports):
            return base
    raise LocalBrokerError("no free port range found on loopback")
