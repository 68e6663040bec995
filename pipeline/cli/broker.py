"""`dpm broker`: the project's own local Kafka cluster (Apache Kafka from Maven Central, KRaft)."""

from __future__ import annotations

import typer

from pipeline.cli.render import output_console
from pipeline.config.settings import Settings
from pipeline.kafka.cluster.admin import fetch_metadata
from pipeline.kafka.cluster.credentials import USERS, UserFile, provision
from pipeline.kafka.errors import BrokerUnavailableError
from pipeline.kafka.local import local_broker
from pipeline.kafka.local.broker_runtime import ensure_broker_jars

app = typer.Typer(help="Run a local Apache Kafka cluster on loopback.", no_args_is_help=True)
_out = output_console()


_VERSION_HELP = "Apache Kafka release: 3.9.2 (default, or DPM_KAFKA_VERSION) or a 4.x release such as 4.4.0."


def _settings(kafka_version: str | None) -> Settings:
    return Settings.from_env().with_choices(kafka_version=kafka_version)


@app.command()
def fetch(kafka_version: str | None = typer.Option(None, "--kafka-version", help=_VERSION_HELP)) -> None:
    """Resolve the broker jars through Maven into the cache folder (done by `up` when needed)."""
    settings = _settings(kafka_version)
    libs = ensure_broker_jars(settings.paths.cache_dir, settings.kafka.version, say=_out.print)
    _out.print(f"Kafka {settings.kafka.version} jars in {libs}")


@app.command()
def up(
    nodes: int = typer.Option(1, "--nodes", help="1, or 3 for a replicated cluster (RF 3, min ISR 2)."),
    port: int = typer.Option(
        9092,
        "--port",
        min=1,
        max=65535 - 200 - 2,  # the last node's internal listener must be a port too
        help="Port of the first broker; node i listens on port+i-1 for clients and also binds port+100+i-1 "
        "(its controller) and, with --secure, port+200+i-1 (its internal listener), all on 127.0.0.1. "
        "A port already taken is refused before anything starts.",
    ),
    timeout: float = typer.Option(120.0, "--timeout", help="Seconds to wait for the cluster to answer."),
    kafka_version: str | None = typer.Option(None, "--kafka-version", help=_VERSION_HELP),
    secure: bool = typer.Option(
        False, "--secure", help="TLS, SASL/SCRAM-SHA-512 users per role and ACLs (deny by default) on its own data."
    ),
    users: list[str] = typer.Option(
        None,
        "--user",
        help="With --secure, one more SCRAM user (e.g. an analyst); repeat. A tenant's agents' "
        "principal is made by `dpm tenants add`, which owns its whole life.",
    ),
) -> None:
    """Start the local cluster and wait until a metadata request succeeds."""
    tenants = [user for user in users or () if user.startswith("tenant-")]
    if tenants:
        raise typer.BadParameter(f"{tenants[0]!r}: a tenant's principal is made by `dpm tenants add "
                                 f"{tenants[0].removeprefix('tenant-')}` (DPM_TENANCY=topics) and taken away by "
                                 "`dpm tenants remove`, so that none outlives its tenant")  # fmt: skip
    settings = _settings(kafka_version)
    with _out.status(f"starting a {nodes}-node {'secured ' if secure else ''}Kafka {settings.kafka.version} cluster"):
        cluster, already = local_broker.start(
            settings.paths.home,
            settings.paths.cache_dir,
            settings.kafka.version,
            nodes=nodes,
            port=port,
            timeout_s=timeout,
            java_home=settings.paths.java_home,
            secure=secure,
            say=_out.print,
        )
    if already:
        _out.print(f"a local broker is already running at {cluster.bootstrap} (pids {list(cluster.pids)})")
    else:
        _out.print(f"Kafka {cluster.kafka_version} is up at [bold]{cluster.bootstrap}[/] ({nodes} node(s), "
                   f"data in {cluster.root})")  # fmt: skip
    _out.print(f"ports bound on 127.0.0.1: {cluster.layout.port_summary}")
    if secure:
        _print_users(provision(cluster.layout, settings.paths.home, (*USERS, *(users or ()))))
    elif users:
        raise typer.BadParameter("--user needs --secure")


def _print_users(users: list[UserFile]) -> None:
    _out.print("SASL_SSL users (SCRAM-SHA-512); point DPM_KAFKA_CONFIG at a role's file:")
    for user in users:
        _out.print(f"  {user.user:<9} {user.path}")
    _out.print("only the admin may do anything until `DPM_KAFKA_CONFIG=<admin file> dpm acl apply` grants the roles")


@app.command()
def down() -> None:
    """Stop the local cluster; its data stays for the next `up`."""
    stopped = local_broker.stop(Settings.from_env().paths.home)
    _out.print("local broker stopped" if stopped else "no local broker was running")


@app.command()
def status() -> None:
    """Report each node of the local cluster up or down; exit 2 when any is down, 3 when none runs."""
    settings = Settings.from_env()
    cluster = local_broker.read_running(settings.paths.home)
    if cluster is None:
        _out.print("no local broker is running")
        raise typer.Exit(3)
    nodes = local_broker.node_health(cluster)
    for node in nodes:
        state = "up" if node.up else ("down: process exited" if not node.alive else "down: does not answer")
        _out.print(f"node {node.node_id} at {node.address} (pid {node.pid}): {state}")
    down = [n.node_id for n in nodes if not n.up]
    if down:
        _out.print(f"{len(down)} of {len(nodes)} node(s) down: {down}")
        raise typer.Exit(2)
    try:
        info = fetch_metadata(cluster.layout.node_admin_config())
    except BrokerUnavailableError as exc:
        _out.print(f"local broker processes {list(cluster.pids)} run but do not answer: {exc}")
        raise typer.Exit(2) from exc
    _out.print(
        f"Kafka {cluster.kafka_version} running at {cluster.bootstrap}: cluster {info.cluster_id}, "
        f"brokers {list(info.broker_ids)}, "
        f"{len(info.topics)} topic(s), data in {cluster.root}"
    )
