"""`dpm tenants`: tenants with topics of their own (DPM_TENANCY=topics): onboard, list, remove."""

from __future__ import annotations

import typer

from pipeline.cli.reach import broker_settings
from pipeline.cli.render import output_console
from pipeline.kafka.cluster.acl_plan import tenant_principal
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
    replace: bool = typer.Option(
        False,
        "--replace",
        help="Take away first what an earlier tenant of the same name left, as `dpm tenants remove` does: "
        "its principal's grants and credential (old client properties stop working) and its API keys.",
    ),
) -> None:
    """Create the tenant's topics (idempotent); workers pick it up within 10 s, the baseline within 30 s.

    A new tenant is refused when its id starts like a shared topic (a shared grant would reach its
    topics), when a grant on the cluster would reach its topics, or when an earlier tenant's principal
    or grants of that name are still there (unless --replace).
    """
    settings = broker_settings()
    added = add_tenant(settings, tenant, partitions or settings.kafka.tenant_partitions, replication, replace=replace)
    if added.revoked is not None and (added.replaced is not None or added.revoked.api_keys):
        taken = [added.replaced.described()] if added.replaced is not None else []
        taken += [f"{added.revoked.api_keys} API key(s)"] if added.revoked.api_keys else []
        _out.print(f"removed first: {' and '.join(taken)}, left by an earlier tenant {tenant!r}")
    if added.api_keys_kept:
        _out.print(f"note: {added.api_keys_kept} API key(s) of {tenant!r}, made before it was added, act for it; "
                   f"if an earlier tenant left them: `dpm api keys remove --tenant {tenant}`")  # fmt: skip
    for name in added.report.created:
        _out.print(f"created {name}")
    for name in added.report.existing:
        _out.print(f"exists  {name}")
    for overlap in added.other_overlaps:
        _out.print(f"warning, isolation check: {overlap}")
    principal = tenant_principal(tenant)
    if added.properties is not None:
        _out.print(f"{principal}: client properties in {added.properties} (DPM_KAFKA_CONFIG of its agents)")
    else:
        _out.print(f"{principal}: its agents' principal; on a secured cluster make its SCRAM credential the cluster's "
                   f"way (`dpm acl plan --tenant {tenant} --format strimzi` writes a KafkaUser)")  # fmt: skip
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
    """Erase a whole tenant (irreversible): its keys, topics, ACLs, its principal's credential and its API keys.

    On a secured cluster run it as the admin: revoking ACLs and deleting a credential need Alter on
    the cluster. Nothing is changed when the principal may not.
    """
    if not yes:
        _out.print(f"this destroys every key of {tenant!r}, deletes its topics, its ACLs and its principal's "
                   "credential: add --yes to go on")  # fmt: skip
        raise typer.Exit(2)
    removed = remove_tenant(broker_settings(), tenant)
    revoked = removed.revoked
    _out.print(f"{tenant}: {removed.keys_destroyed} case key(s) destroyed, {len(removed.topics)} topic(s) deleted, "
               f"{revoked.grants} ACL binding(s) revoked, {revoked.credentials} SCRAM credential(s) "
               f"deleted, {revoked.api_keys} API key(s) removed")  # fmt: skip
    if revoked.kept:
        _out.print(revoked.kept)
    if revoked.properties is not None:
        _out.print(f"deleted {revoked.properties}")
    if removed.offsets_left:
        _out.print(f"committed offsets still on its deleted topics: {', '.join(removed.offsets_left[:5])}")
        raise typer.Exit(1)
