"""`dpm acl`: the least-privilege ACLs of each role, printed for review or applied through the admin API."""

from __future__ import annotations

from enum import StrEnum

import typer

from pipeline.cli.reach import broker_settings
from pipeline.cli.render import output_console
from pipeline.config.settings import Settings
from pipeline.kafka.acl_plan import ROLE_PURPOSE, Role, kafka_acls_commands, plan, strimzi_users, strimzi_yaml
from pipeline.kafka.acls import apply_grants
from pipeline.kafka.grant_checks import colliding_tenant
from pipeline.kafka.topics import TopicNames
from pipeline.services.tenants import isolation_report, revoke_unplanned

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
        "or on the cluster, reach another tenant's topics (exit 1 naming each that does).",
    ),
) -> None:
    """Print the ACLs each role needs for the topics of DPM_TOPIC_PREFIX (nothing is sent to a cluster).

    With --check, reads the cluster (its tenants and its ACLs, as the principal of DPM_KAFKA_CONFIG,
    which needs Describe on the cluster: the operator or the admin) and checks every grant.
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
    report = isolation_report(settings, _tenants(settings, tenants, required=False))
    for overlap in report.overlaps:
        _out.print(f"overlap: {overlap}")
    if report.overlaps:
        raise typer.Exit(1)
    _out.print(f"isolation check: every role, {len(report.tenants)} tenant(s), the plan's grants and the cluster's: "
               "no principal's grants reach another tenant's topics")  # fmt: skip


@app.command()
def apply(
    roles: list[Role] = typer.Option(None, "--role", help=_ROLE_HELP),
    tenants: list[str] = typer.Option(None, "--tenant", help=_TENANT_HELP),
) -> None:
    """Create the planned ACLs on the cluster, and revoke those of the roles that the plan no longer gives.

    DPM_KAFKA_CONFIG must name a principal allowed to (the admin). What is revoked is printed: the
    shared mode's grants once DPM_TENANCY=topics, a removed tenant's, a grant an older plan gave.
    """
    settings = broker_settings()
    chosen = roles or list(Role)
    grants = plan(TopicNames(settings.kafka.topic_prefix), chosen, _tenants(settings, tenants))
    sent = apply_grants(settings.kafka.client_config(), grants)
    _out.print(f"{sent} ACL binding(s) in place for {', '.join(r.value for r in chosen)}")
    revoked = revoke_unplanned(settings, chosen, tenants or [])
    for grant in revoked:
        _out.print(f"revoked {grant.principal} {'/'.join(grant.operations)} on {grant.resource.value} {grant.name!r} "
                   f"({grant.pattern.value}): no longer in the plan")  # fmt: skip
    if revoked:
        _out.print(f"{len(revoked)} ACL binding(s) revoked")
