"""/healthz fails when a worker's loop stops turning; /metrics is served next to it."""

from __future__ import annotations

import time
import urllib.error
import urllib.request

import pytest

from pipeline.kafka.local.local_broker import free_cluster_port
from pipeline.observability.metrics import Liveness, PipelineMetrics


def test_liveness_fails_once_a_turn_lasts_past_the_limit() -> None:
    liveness = Liveness(max_stall_s=0.2)
    assert liveness.check()[0]
    time.sleep(0.3)
    ok, detail = liveness.check()
    assert not ok
    assert "no progress" in detail
    liveness.turned()
    assert liveness.check()[0]


def test_the_endpoint_serves_metrics_and_health_on_loopback() -> None:
    liveness = Liveness(max_stall_s=0.2)
    port = free_cluster_port(1)
    server = PipelineMetrics().serve(port, health=liveness.check)
    try:
        assert b"dpm_dead_letters_total" in urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read()
        assert urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz").status == 200
        time.sleep(0.3)
        with pytest.raises(urllib.error.HTTPError) as stalled:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz")
        assert stalled.value.code == 503
    finally:
        server.shutdown()
