"""The stateless projection worker: its per-trigger handler and its wiring."""

from pipeline.workers.projection.handler import ProjectionHandler
from pipeline.workers.projection.service import WorkerOptions, build_projection_worker, serve_projection

__all__ = ["ProjectionHandler", "WorkerOptions", "build_projection_worker", "serve_projection"]
