"""Runs the HTTP API on uvicorn: one client per tenant per process, created on a tenant's first request."""

from __future__ import annotations

import asyncio
import os

import uvicorn
from fastapi import FastAPI

from pipeline.api.app import create_api
from pipeline.client.aio import TenantMemories
from pipeline.config.settings import Settings
from pipeline.core.events import CaseRef
from pipeline.services.api_keys import ApiKeys, keys_file
from pipeline.services.cluster import cluster_settings
from pipeline.services.door_routes import DoorRoutes, door_url
from pipeline.services.erase import erase_case
from pipeline.services.tenant_gate import gated


def app_from_env() -> FastAPI:
    """The application of one uvicorn worker process, from DPM_* settings (the factory `dpm api` serves)."""
    settings = cluster_settings(Settings.from_env())
    memories = TenantMemories(settings, connect_timeout=settings.api.broker_wait_s)
    doors = None
    if settings.api.door_group:
        doors = DoorRoutes.join(settings, settings.api.door_url or door_url(settings.api.addr, settings.api.port))
    app = door_api(settings, memories, doors)
    if doors is not None:
        app.router.on_shutdown.append(doors.close)  # leaves the group first: the others take its partitions over
    app.router.on_shutdown.append(memories.close)
    return app


def door_api(settings: Settings, memories: TenantMemories, doors: DoorRoutes | None) -> FastAPI:
    """The HTTP API over this process's tenants' clients (`dpm api`'s, and `dpm mcp --http`'s under /v1)."""

    async def erase(tenant: str, case_id: str) -> int:
        done = await asyncio.to_thread(erase_case, settings, CaseRef(tenant, case_id))
        # this process's caches go in the step that destroyed the key (a thread: a writer's close may wait)
        await asyncio.to_thread(memories.forget_erased, tenant, case_id)
        return done.keys_destroyed

    return create_api(gated(settings, memories), ApiKeys(keys_file(settings)), settings.api, erase, doors)


def serve(host: str, port: int, workers: int) -> None:
    """Serves until SIGINT or SIGTERM; access logs are off (requests carry API keys in headers).

    The URL the other doors forward to is the one this process binds (DPM_DOOR_URL overrides it).
    `workers` > 1 share that one address, so a forward may land on any of them: each appends what
    it is forwarded (handing the partition over between them), which is correct but slower than
    one process per replica.
    """
    os.environ.setdefault("DPM_DOOR_URL", door_url(host, port))
    uvicorn.run("pipeline.api.server:app_from_env", factory=True, host=host, port=port, workers=workers,
                log_level="warning", access_log=False)  # fmt: skip
