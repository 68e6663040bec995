"""`dpm broker up` refuses a port a listener holds, not one a closed connection left in TIME_WAIT."""

from __future__ import annotations

import socket
import time

from pipeline.kafka.local_broker import port_problem


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
