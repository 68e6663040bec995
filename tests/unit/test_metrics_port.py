"""The /metrics port: a worker and a baseline on one host do not collide by default, and a port in use
is one line naming the port and the setting, not a traceback."""

from __future__ import annotations

import socket

import pytest

from pipeline.config.settings import BASELINE_METRICS_PORT, WORKER_METRICS_PORT, Settings
from pipeline.observability.metrics import MetricsPortInUseError, PipelineMetrics


def test_the_worker_and_the_baseline_have_different_default_ports_and_a_setting_wins_for_both() -> None:
    unset = Settings.from_env({}).metrics
    assert unset.port_or(WORKER_METRICS_PORT) == 9400
    assert unset.port_or(BASELINE_METRICS_PORT) == 9401
    chosen = Settings.from_env({"DPM_METRICS_PORT": "9500"}).metrics
    assert chosen.port_or(WORKER_METRICS_PORT) == chosen.port_or(BASELINE_METRICS_PORT) == 9500
    off = Settings.from_env({}).with_choices(metrics_port=-1).metrics
    assert off.port_or(BASELINE_METRICS_PORT) == -1


def test_a_port_in_use_is_one_line_naming_the_port_and_the_setting() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(MetricsPortInUseError) as refused:
            PipelineMetrics(()).serve(port)
    said = str(refused.value)
    assert "\n" not in said
    assert f"127.0.0.1:{port} is in use" in said
    assert "--metrics-port" in said
    assert "DPM_METRICS_PORT" in said
