"""A key service for the tests: moto's KMS server (the real boto3 API), and a gate that cuts the way to it."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator

from pipeline.kafka.local.local_broker import free_cluster_port

REGION = "eu-west-1"
# moto takes any key; boto3 wants one, and never the machine's own.
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_EC2_METADATA_DISABLED": "true"}


@contextlib.contextmanager
def aws_credentials() -> Iterator[None]:
    """CREDENTIALS in this process's environment (boto3 reads them there), the earlier values back after."""
    saved = {key: os.environ.get(key) for key in CREDENTIALS}
    os.environ.update(CREDENTIALS)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def start_moto(port: int) -> subprocess.Popen[bytes]:
    """moto's server on `port`, once it answers."""
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/moto-api/", timeout=2):
                return server
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                raise RuntimeError("moto's server did not start") from None
            time.sleep(0.2)


@contextlib.contextmanager
def moto_server() -> Iterator[int]:
    """moto's server on a free port, stopped after."""
    port = free_cluster_port(1)
    server = start_moto(port)
    try:
        yield port
    finally:
        server.terminate()
        server.wait(10)


class Gate:
    """A TCP forwarder to a local port that can be shut (connections cut, new ones closed at once) and opened again.

    The key service as a network partition shows it to a client: reachable, then not, then again.
    """

    def __init__(self, target_port: int) -> None:
        self._target = target_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._open = threading.Event()
        self._open.set()
        self._lock = threading.Lock()
        self._connections: list[socket.socket] = []
        threading.Thread(target=self._accept, name="gate", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                downstream, _ = self._listener.accept()
            except OSError:
                return  # closed
            if not self._open.is_set():
                downstream.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self._target), timeout=5)
            except OSError:
                downstream.close()
                continue
            with self._lock:
                self._connections += [downstream, upstream]
            for source, sink in ((downstream, upstream), (upstream, downstream)):
                threading.Thread(target=_pump, args=(source, sink), daemon=True).start()

    def shut(self) -> None:
        self._open.clear()
        with self._lock:
            cut, self._connections = self._connections, []
        for connection in cut:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
            connection.close()

    def reopen(self) -> None:
        self._open.set()

    def close(self) -> None:
        self.shut()
        self._listener.close()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)
