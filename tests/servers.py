"""Real servers for the slow tests: `langgraph dev` and `chroma run` on free loopback ports.

Each server runs in its own process group with its output in a log file; it is
ready when its health endpoint answers (bounded wait), and stopping it ends
the whole group, so no test leaves a server behind. A failure quotes the tail
of the server's log, which is usually where the reason is.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
LOOPBACK = "127.0.0.1"
# Settings that keep a server offline: no version check, no CLI analytics, no tracing, no model.
QUIET_ENV = {
    "LANGGRAPH_NO_VERSION_CHECK": "true",
    "LANGGRAPH_CLI_NO_ANALYTICS": "1",
    "LANGSMITH_TRACING": "false",
    "STRATA_MODEL": "",
    "STRATA_BASE_URL": "",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "ANONYMIZED_TELEMETRY": "False",
}


def free_port() -> int:
    """A TCP port on the loopback interface that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOOPBACK, 0))
        return int(probe.getsockname()[1])


def log_tail(path: Path, lines: int = 40) -> str:
    """The last lines of a log file, for failure messages."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


class ServerProcess:
    """One server started as its own process group, with a log file and a health URL."""

    def __init__(self, name: str, command: list[str], port: int, health_path: str, log_path: Path,
                 env: Mapping[str, str], cwd: Path = REPO) -> None:
        self.name = name
        self.command = command
        self.port = port
        self.url = f"http://{LOOPBACK}:{port}"
        self.health_url = self.url + health_path
        self.log_path = log_path
        self.env = dict(env)
        self.cwd = cwd
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float) -> ServerProcess:
        """Start the server and wait until its health URL answers 200, or fail with its log."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.command, cwd=self.cwd, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(self.failure(f"exited with code {self.process.returncode} while starting"))
            if _answers(self.health_url):
                return self
            time.sleep(0.25)
        self.stop()
        raise RuntimeError(self.failure(f"not ready after {timeout:.0f}s"))

    def stop(self, timeout: float = 15.0) -> None:
        """End the server's whole process group: SIGTERM, then SIGKILL if it lingers."""
        process = self.process
        if process is None:
            return
        self.process = None
        if process.poll() is None:
            _signal_group(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                _signal_group(process.pid, signal.SIGKILL)
                process.wait(timeout=timeout)
        _signal_group(process.pid, signal.SIGKILL)  # children that outlived the leader

    def failure(self, what: str) -> str:
        return f"{self.name} {what}: {' '.join(self.command)}\n--- log tail ({self.log_path}) ---\n" \
               f"{log_tail(self.log_path)}"


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def server_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment, made offline and quiet, plus `extra`.

    The developer's own LangSmith settings are left out, so a test server never traces
    to a real project unless `extra` says so."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LANGSMITH_", "LANGCHAIN_"))}
    env.update(QUIET_ENV)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra or {})
    return env


def repo_mirror(folder: Path) -> Path:
    """A folder whose entries link to the repo root's: `langgraph dev` run there serves the
    repo's own langgraph.json and code, while its thread store (`.langgraph_api/`) lands in
    the folder instead of the developer's checkout."""
    folder.mkdir(parents=True, exist_ok=True)
    for entry in REPO.iterdir():
        if entry.name in (".git", ".langgraph_api", ".strata") or (folder / entry.name).exists():
            continue
        (folder / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
    return folder


@contextmanager
def langgraph_dev(data_dir: Path, root: Path, log_path: Path, env: Mapping[str, str] | None = None,
                  timeout: float = 120.0) -> Iterator[ServerProcess]:
    """`langgraph dev` run from `root` (the repo or a `repo_mirror`), serving its langgraph.json
    unchanged, with the memory in `data_dir`."""
    port = free_port()
    server = ServerProcess(
        "langgraph dev",
        [str(BIN / "langgraph"), "dev", "--no-browser", "--no-reload", "--host", LOOPBACK, "--port", str(port)],
        port,
        "/ok",
        log_path,
        server_env({"STRATA_DATA_DIR": str(data_dir), **(env or {})}),
        cwd=root,
    )
    server.start(timeout)
    try:
        yield server
    finally:
        server.stop()


@contextmanager
def chroma_run(path: Path, log_path: Path, timeout: float = 60.0) -> Iterator[ServerProcess]:
    """`chroma run` persisting to `path` on a free loopback port."""
    port = free_port()
    server = ServerProcess(
        "chroma run",
        [str(BIN / "chroma"), "run", "--path", str(path), "--host", LOOPBACK, "--port", str(port)],
        port,
        "/api/v2/heartbeat",
        log_path,
        server_env(),
    )
    server.start(timeout)
    try:
        yield server
    finally:
        server.stop()


class HeaderRecordingProxy:
    """A loopback HTTP proxy in front of one server that records the headers of every request.

    It lets a test see what a client really sends (an auth header) while the
    real server still answers.
    """

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.headers: list[dict[str, str]] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def _forward(self) -> None:
                proxy.headers.append({k.lower(): v for k, v in self.headers.items()})
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                skip = {"host", "content-length", "connection", "accept-encoding"}
                request = urllib.request.Request(
                    proxy.upstream + self.path, data=body, method=self.command,
                    headers={k: v for k, v in self.headers.items() if k.lower() not in skip},
                )
                try:
                    with urllib.request.urlopen(request, timeout=30) as response:
                        status, payload, kind = response.status, response.read(), response.headers.get("Content-Type")
                except urllib.error.HTTPError as error:
                    status, payload, kind = error.code, error.read(), error.headers.get("Content-Type")
                self.send_response(status)
                self.send_header("Content-Type", kind or "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _forward

            def log_message(self, format: str, *args: object) -> None:
                return

        self._server = ThreadingHTTPServer((LOOPBACK, 0), Handler)
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> HeaderRecordingProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
