"""`dpm acl`: the least-privilege ACLs of each role, printed for review or applied through the admin API."""

from __future__ import annotations

from enum import StrEnum

import typer

from pipeline.cli.reach import broker_settings
from pipeline.cli.render import output_console
from pipeline.config.settings import Settings
from pipeline.kafka.cluster.acl_plan import (
    ROLE_PURPOSE,
    Grant,
    Role,
    kafka_acls_commands,
    plan,
    strimzi_users,
    strimzi_yaml,
)
from pipeline.kafka.cluster.acls import apply_grants
from pipeline.kafka.cluster.grant_checks import colliding_tenant
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.services.tenants import apply_would_stop, isolation_report, revoke_unplanned

app = typer.Typer(help="Least-privilege ACLs per role (producer, worker, baseline, auditor, operator).",
                  no_args_is_help=True)  # fmt: skip
_out = output_console()


class Format(StrEnum):
    COMMANDS = "commands"
    STRIMZI = "strimzi"


_ROLE_HELP = "Only this role (repeat for several; default: every role)."
_TENANT_HELP = "With DPM_TENANCY=topics: grants on this tenant's own topics (repeat; required in that mode)."


def _tenants(settings: Settings, tenants: list[str] | None, *, required: bool = True) -> list[str]:
    if settings.kafka.tenancy != "topics":
        if tenants:
            raise typer.BadParameter("--tenant needs DPM_TENANCY=topics (the shared topics are granted as a whole)")
        return []
    if not tenants and required:
        raise typer.BadParameter("with DPM_TENANCY=topics, name the tenants whose topics to grant: --tenant T")
    names = TopicNames(settings.kafka.topic_prefix)
    for tenant in tenants or []:
        collision = colliding_tenant(names, tenant)  # and each is checked as it names topics (TopicNames.of_tenant)
        if collision is not None:
            raise typer.BadParameter(collision)
    return tenants or []


@app.command("plan")
def plan_command(
    roles: list[Role] = typer.Option(None, "--role", help=_ROLE_HELP),
    tenants: list[str] = typer.Option(None, "--tenant", help=_TENANT_HELP),
    output: Format = typer.Option(Format.COMMANDS, "--format", help="kafka-acls commands, or Strimzi KafkaUser YAML."),
    strimzi_cluster: str = typer.Option("my-cluster", "--strimzi-cluster", help="The Kafka resource the users join."),
    check: bool = typer.Option(
        False,
        "--check",
        help="Instead of printing: prove that no principal's grants, planned "
        "or on the cluster, reach another tenant's topics, and that `dpm acl apply` would revoke no grant on a "
        "topic that exists (it would stop a service); exit 1 naming each grant that fails either.",
    ),
) -> None:
    """Print the ACLs each role needs for the topics of DPM_TOPIC_PREFIX (nothing is sent to a cluster).

    With --check, reads the cluster (its tenants and its ACLs, as the principal of DPM_KAFKA_CONFIG,
    which needs Describe on the cluster: the operator or the admin) and checks every grant, and what
    `dpm acl apply` (every role, this DPM_TENANCY, these --tenant) would revoke.
    """
    if check:
        _check(tenants)
        return
    chosen = roles or list(Role)
    settings = Settings.from_env()
    names, scoped = TopicNames(settings.kafka.topic_prefix), _tenants(settings, tenants)
    if output is Format.STRIMZI:
        typer.echo(strimzi_yaml(strimzi_users(plan(names, chosen, scoped), strimzi_cluster)), nl=False)
        return
    plans = {role: plan(names, [role], scoped) for role in chosen}  # every tenant checked before anything prints
    for role, grants in plans.items():
        typer.echo(f"# {role.value}: {ROLE_PURPOSE[role]}")
        for command in kafka_acls_commands(grants):
            typer.echo(command)


def _check(tenants: list[str] | None) -> None:
    settings = broker_settings()
    chosen = _tenants(settings, tenants, required=False)
    report = isolation_report(settings, chosen)
    for overlap in report.overlaps:
        _out.print(f"overlap: {overlap}")
    stopping = apply_would_stop(settings, chosen)
    for grant, topic in stopping:
        _out.print(f"would stop a service: `dpm acl apply` would revoke {_shown(grant)}, which reaches the topic "
                   f"{topic!r} (it exists)")  # fmt: skip
    if report.overlaps or stopping:
        raise typer.Exit(1)
    _out.print(f"isolation check: every role, {len(report.tenants)} tenant(s), the plan's grants and the cluster's: "
               "no principal's grants reach another tenant's topics")  # fmt: skip
    _out.print("apply check: `dpm acl apply` would revoke no grant on a topic that exists")


def _shown(grant: Grant) -> str:
    operations = "/".join(grant.operations)
    return f"{grant.principal} {operations} on {grant.resource.value} {grant.name!r} ({grant.pattern.value})"


@app.command()
def apply(
    roles: list[Role] = typer.Option(None, "--role", help=_ROLE_HELP),
    tenants: list[str] = typer.Option(None, "--tenant", help=_TENANT_HELP),
    other_mode: bool = typer.Option(
        False,
        "--revoke-other-mode",
        help="Also revoke the other tenancy mode's grants on topics that still exist "
        "(its services stop: only once none runs, e.g. after moving every tenant to topics of its own).",
    ),
) -> None:
    """Create the planned ACLs on the cluster, and revoke those of the roles that the plan no longer gives.

    DPM_KAFKA_CONFIG must name a principal allowed to (the admin). What is revoked is printed: a
    removed tenant's, a grant an older plan gave, the other tenancy mode's once its topics are gone.
    The other mode's grants on topics that exist are kept (unless --revoke-other-mode): a cluster can
    run both modes, and an apply in one never stops the other's services.
    """
    settings = broker_settings()
    chosen = roles or list(Role)
    grants = plan(TopicNames(settings.kafka.topic_prefix), chosen, _tenants(settings, tenants))
    sent = apply_grants(settings.kafka.client_config(), grants)
    _out.print(f"{sent} ACL binding(s) in place for {', '.join(r.value for r in chosen)}")
    revoked = revoke_unplanned(settings, chosen, tenants or [], other_mode=other_mode)
    for grant in revoked:
        _out.print(f"revoked {_shown(grant)}: no longer in the plan")
    if revoked:
        _out.print(f"{len(revoked)} ACL binding(s) revoked")
