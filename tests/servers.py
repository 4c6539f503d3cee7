"""Real servers for the slow tests: `langgraph dev`, `chroma run` and PostgreSQL on free loopback ports.

Each server runs in its own process group with its output in a log file; it is
ready when its health endpoint answers (bounded wait), and stopping it ends
the whole group, so no test leaves a server behind. A failure quotes the tail
of the server's log, which is usually where the reason is.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

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


def close_child(process: subprocess.Popen[Any]) -> None:
    """End a child that reads its requests on stdin: closing stdin asks it to finish; killed past 30 s."""
    if process.poll() is None:
        assert process.stdin is not None
        process.stdin.close()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(30)

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
                 env: Mapping[str, str], cwd: Path = REPO, ready: Callable[[], bool] | None = None,
                 stop_signal: signal.Signals = signal.SIGTERM) -> None:
        self.name = name
        self.command = command
        self.port = port
        self.url = f"http://{LOOPBACK}:{port}"
        self.health_url = self.url + health_path
        self.log_path = log_path
        self.env = dict(env)
        self.cwd = cwd
        self.ready = ready or (lambda: _answers(self.health_url))
        self.stop_signal = stop_signal
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
            if self.ready():
                return self
            time.sleep(0.25)
        self.stop()
        raise RuntimeError(self.failure(f"not ready after {timeout:.0f}s"))

    def stop(self, timeout: float = 15.0) -> None:
        """End the server's whole process group: its stop signal, then SIGKILL if it lingers."""
        process = self.process
        if process is None:
            return
        self.process = None
        if process.poll() is None:
            _signal_group(process.pid, self.stop_signal)
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
                  timeout: float = 120.0, jobs: int = 1) -> Iterator[ServerProcess]:
    """`langgraph dev` run from `root` (the repo or a `repo_mirror`), serving its langgraph.json
    unchanged, with the memory in `data_dir`, running `jobs` runs at once (its own default is one;
    a Platform deployment's, ten)."""
    port = free_port()
    server = ServerProcess(
        "langgraph dev",
        [str(BIN / "langgraph"), "dev", "--no-browser", "--no-reload", "--host", LOOPBACK, "--port", str(port),
         "--n-jobs-per-worker", str(jobs)],
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


def postgres_binary(name: str) -> Path:
    """A PostgreSQL program (initdb, postgres) from PATH or Debian's /usr/lib/postgresql/<version>/bin."""
    found = shutil.which(name) or next(iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None)
    if not found:
        raise RuntimeError(f"{name} not found: install PostgreSQL with scripts/install_postgres.sh")
    return Path(found)


class PostgresServer(ServerProcess):
    """A throwaway PostgreSQL cluster (trust auth for the `strata` role) on a loopback port."""

    user = "strata"

    def database_url(self, database: str = "postgres") -> str:
        return f"postgresql://{self.user}@{LOOPBACK}:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """A new empty database; its URL."""
        import psycopg

        with psycopg.connect(self.database_url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.database_url(name)

    def restart(self, timeout: float = 60.0) -> None:
        self.stop()
        self.start(timeout)


def _postgres_ready(url: str) -> bool:
    import psycopg

    try:
        with psycopg.connect(url, connect_timeout=2):
            return True
    except psycopg.Error:
        return False


@contextmanager
def postgres_run(log_path: Path, timeout: float = 60.0) -> Iterator[PostgresServer]:
    """`initdb` + `postgres` in a fresh folder, listening on 127.0.0.1 and a free port only.

    PostgreSQL refuses to run as root: as root, the cluster belongs to the `postgres` user
    and both programs run through `runuser`. The folder is removed afterwards.
    """
    folder = Path(tempfile.mkdtemp(prefix="strata-pg-"))
    as_user: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres", "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    data = folder / "data"
    env = server_env({"LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"})
    initdb = [*as_user, str(postgres_binary("initdb")), "-D", str(data), "-U", PostgresServer.user,
              "--auth=trust", "-E", "UTF8", "--no-sync"]
    done = subprocess.run(initdb, env=env, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        shutil.rmtree(folder, ignore_errors=True)
        raise RuntimeError(f"initdb failed: {' '.join(initdb)}\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    port = free_port()
    command = [*as_user, str(postgres_binary("postgres")), "-D", str(data), "-h", LOOPBACK, "-p", str(port),
               "-k", str(folder), "-c", "fsync=off", "-c", "max_connections=200"]
    server = PostgresServer("postgres", command, port, "", log_path, env,
                            ready=lambda: _postgres_ready(f"postgresql://strata@{LOOPBACK}:{port}/postgres"),
                            stop_signal=signal.SIGINT)  # SIGINT is PostgreSQL's fast shutdown
    try:
        server.start(timeout)
        yield server
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)


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
