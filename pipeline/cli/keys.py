"""`dpm keys`: the tenants' key-encryption keys."""

from __future__ import annotations

import typer

from pipeline.cli.reach import broker_settings
from pipeline.cli.render import output_console
from pipeline.services.erase import rotate_tenant_key

app = typer.Typer(help="Key-encryption keys of the tenants (data keys live in the key topic).", no_args_is_help=True)
_out = output_console()


@app.command()
def rotate(tenant: str = typer.Option(..., "--tenant")) -> None:
    """A new key-encryption key for the tenant: every data key wrapped again under it, old versions destroyed."""
    done = rotate_tenant_key(broker_settings(), tenant)
    retired = ", ".join(done.retired) or "none"
    _out.print(f"tenant {tenant}: key-encryption key {done.kek_id} current; {done.rewrapped} data key(s) "
               f"wrapped again; destroyed {retired}")  # fmt: skip
