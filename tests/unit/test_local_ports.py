"""`dpm broker up` says which ports it binds and refuses a port a listener holds (not one in TIME_WAIT) at once."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from pipeline.kafka.local.local_broker import ClusterLayout, free_cluster_port, port_problem
from tests.processes import dpm_cli


def test_a_port_in_time_wait_is_free_and_a_listening_one_is_not() -> None:
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    assert port_problem(port) == "Address already in use"
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = server.accept()
    accepted.close()  # the server's side closes first: its (port, client port) pair waits in TIME_WAIT
    time.sleep(0.05)
    client.close()
    server.close()
    plain = socket.socket()
    try:
        plain.bind(("127.0.0.1", port))
        in_time_wait = False
    except OSError:
        in_time_wait = True  # a bind without SO_REUSEADDR still fails: the pair is in TIME_WAIT
    finally:
        plain.close()
    assert in_time_wait
    assert port_problem(port) is None  # the broker (which binds with SO_REUSEADDR) can take it


@pytest.mark.parametrize(
    ("secure", "offset", "listener"),
    [(False, 0, "node 1's client listener"), (False, 100, "node 1's controller"),
     (True, 200, "node 1's internal listener")],
)  # fmt: skip
def test_broker_up_refuses_each_taken_port_in_one_line_before_fetching_or_making_anything(
    tmp_path: Path, secure: bool, offset: int, listener: str
) -> None:
    base = free_cluster_port(1, secure=secure)
    home, cache = tmp_path / "home", tmp_path / "cache"
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", base + offset))
        holder.listen()
        up = dpm_cli("broker", "up", "--port", str(base), *(["--secure"] if secure else []), timeout_s=60,
                     env={"DPM_HOME": str(home), "DPM_CACHE_DIR": str(cache), "DPM_BOOTSTRAP": ""})  # fmt: skip
    assert up.returncode == 1, up.stdout + up.stderr
    error = [line for line in up.stderr.splitlines() if line.strip()]
    assert error == [f"error: port {base + offset} on 127.0.0.1 ({listener}, --port + {offset}) cannot be bound: "
                     "Address already in use; stop what holds it or choose another --port"]  # fmt: skip
    assert not cache.exists(), "no jar was fetched"
    assert not (home / "broker").exists(), "no folder was made"


def test_the_ports_a_cluster_binds_are_said_by_role() -> None:
    assert ClusterLayout(Path("/h"), 1, 19092).port_summary == "clients 19092, controller 19192"
    secured = ClusterLayout(Path("/h"), 3, 19092, secure=True)
    assert secured.port_summary == "clients 19092-19094, controller 19192-19194, internal 19292-19294"
    assert [port for port, _ in secured.listeners] == list(secured.ports)
    assert len(set(secured.ports)) == 9


def test_the_help_of_broker_up_names_every_port_it_binds() -> None:
    shown = " ".join(dpm_cli("broker", "up", "--help", env={"COLUMNS": "300"}).stdout.split())
    assert "port+100+i-1 (its controller)" in shown
    assert "with --secure, port+200+i-1 (its internal listener)" in shown
