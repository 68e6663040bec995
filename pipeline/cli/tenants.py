"""`dpm tenants`: tenants with topics of their own (DPM_TENANCY=topics): onboard, list, remove."""

from __future__ import annotations

import typer

from pipeline.cli.reach import broker_settings
from pipeline.cli.render import output_console
from pipeline.services.tenants import add_tenant, list_tenants, remove_tenant

app = typer.Typer(help="Tenants on topics of their own (DPM_TENANCY=topics).", no_args_is_help=True)
_out = output_console()


@app.command()
def add(
    tenant: str = typer.Argument(..., help="Letters, digits, _ and - (it names topics)."),
    partitions: int | None = typer.Option(
        None,
        "--partitions",
        min=1,
        help="Partitions of each of its topics. Default: DPM_TENANT_PARTITIONS (6), which the baseline's tables need.",
    ),
    replication: int | None = typer.Option(None, "--replication", min=1, help="Default: min(3, brokers)."),
) -> None:
    """Create the tenant's eight topics (idempotent); workers pick it up within 10 s, the baseline within 30 s."""
    settings = broker_settings()
    report = add_tenant(settings, tenant, partitions or settings.kafka.tenant_partitions, replication)
    for name in report.created:
        _out.print(f"created {name}")
    for name in report.existing:
        _out.print(f"exists  {name}")
    _out.print(f"grant its principals their ACLs: `dpm acl plan --tenant {tenant}` (or `dpm acl apply --tenant ...`)")


@app.command("list")
def list_command() -> None:
    """Every tenant with topics of its own, and any of its eight topics missing."""
    tenants = list_tenants(broker_settings())
    if not tenants:
        _out.print("no tenant has topics of its own under this prefix")
    for listed in tenants:
        state = "complete" if not listed.missing else f"missing {', '.join(listed.missing)}"
        _out.print(f"{listed.tenant}: {len(listed.present)} topic(s), {state}")


@app.command()
def remove(
    tenant: str = typer.Argument(...),
    yes: bool = typer.Option(False, "--yes", help="Confirm: its keys are destroyed and its topics deleted."),
) -> None:
    """Erase a whole tenant: destroy its key-encryption keys, then delete its topics (irreversible)."""
    if not yes:
        _out.print(f"this destroys every key of {tenant!r} and deletes its topics: add --yes to go on")
        raise typer.Exit(2)
    shredded, topics = remove_tenant(broker_settings(), tenant)
    _out.print(f"{tenant}: {shredded} case key(s) destroyed, {len(topics)} topic(s) deleted")
