"""Locates files shipped beside the code: deploy/ configs and schemas/.

In a source checkout (editable install) they are read from the repository; in a wheel they
are packaged under pipeline/_deploy and pipeline/_schemas.
"""

from __future__ import annotations

from pathlib import Path

from pipeline.core.errors import DpmError

_PACKAGE = Path(__file__).resolve().parents[1]  # pipeline/
_REPO = _PACKAGE.parent


def _locate(repo_relative: str, packaged: str) -> Path:
    for candidate in (_REPO / repo_relative, _PACKAGE / packaged):
        if candidate.exists():
            return candidate
    raise DpmError(f"installation is incomplete: {repo_relative} is missing")


def kafka_deploy_dir() -> Path:
    """Folder of the broker config templates (deploy/kafka)."""
    return _locate("deploy/kafka", "_deploy/kafka")


def deploy_dir() -> Path:
    """Folder of the deployment files (deploy/: Prometheus rules, Grafana dashboards, Kubernetes)."""
    return _locate("deploy", "_deploy")


def schemas_dir() -> Path:
    """Folder of the JSON Schemas (schemas/)."""
    return _locate("schemas", "_schemas")
