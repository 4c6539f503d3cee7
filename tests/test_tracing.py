"""Tracing: off means nothing leaves the machine; on means one named run per role, with namespace and mode.

Both cases run a real ingest and a real question in a fresh Python process, so
no setting or open connection of the test process leaks in. Tracing off is
checked with a socket guard that records (and refuses) every connection that
is not a Unix socket, and, where strace is available, at the system-call level
too, which also covers native code (Chroma's Rust core, torch). Tracing on
points LangSmith at a fake endpoint on the loopback interface that records the
runs it receives.
"""

from __future__ import annotations

import email.parser
import email.policy
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import islice
from pathlib import Path
from typing import Any

import pytest
from servers import langgraph_dev, repo_mirror

REPO = Path(__file__).resolve().parents[1]
ROLES_OF_AN_ASK = {"research", "judge", "working"}
QUESTION = "Where did Caroline go yesterday?"  # D1:3: "I went to a LGBTQ support group yesterday ..."

# Installed before anything else is imported: every socket that is not a Unix socket is
# recorded and refused, and so is every name lookup (a lookup is the first step of a connection).
SOCKET_GUARD = r'''
import json, socket, sys
ATTEMPTS = []
_connect, _connect_ex, _sendto = socket.socket.connect, socket.socket.connect_ex, socket.socket.sendto
def _blocked(sock, what, address):
    ATTEMPTS.append(f"{what} {sock.family!r} {address!r}")
    raise OSError("network blocked by the test's socket guard")
def connect(self, address):
    return _connect(self, address) if self.family == socket.AF_UNIX else _blocked(self, "connect", address)
def connect_ex(self, address):
    return _connect_ex(self, address) if self.family == socket.AF_UNIX else _blocked(self, "connect_ex", address)
def sendto(self, *args):
    return _sendto(self, *args) if self.family == socket.AF_UNIX else _blocked(self, "sendto", args[-1])
def getaddrinfo(host, *args, **kwargs):
    ATTEMPTS.append(f"getaddrinfo {host!r}")
    raise socket.gaierror("name lookup blocked by the test's socket guard")
socket.socket.connect, socket.socket.connect_ex, socket.socket.sendto = connect, connect_ex, sendto
socket.getaddrinfo = getaddrinfo
'''

# One ingest and one question through the Python API, then the same question the way the
# LangGraph server runs the graph: a context only, no run config.
DRIVER = r'''
import json, sys
from strata.graph.context import Context
from strata.graph.graph import graph
from strata.api import Memory
turns = json.load(open(sys.argv[1]))
data_dir = sys.argv[2]
memory = Memory("api-user", data_dir=data_dir)
memory.add(turns)
answer = memory.ask(QUESTION)
graph.invoke({"question": QUESTION}, context=Context(namespace="server-user", mode="ask", data_dir=data_dir))
'''


def run_python(
    script: str, args: list[str], env: dict[str, str], timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", script, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout,
    )


@pytest.fixture
def turns_file(tmp_path: Path, locomo_dir: Path) -> Path:
    """The first turns of a real LoCoMo conversation, as the JSON a user would pass."""
    from strata.conversations import load_turns

    turns = islice(load_turns(locomo_dir / "conv-26.json").turns(), 6)
    path = tmp_path / "turns.json"
    path.write_text(json.dumps([turn.model_dump(mode="json", exclude_none=True) for turn in turns]))
    return path


def tracing_off_env(offline_env: dict[str, str]) -> dict[str, str]:
    """The user's environment with tracing off and no model: the HF offline flags are not needed."""
    env = {k: v for k, v in offline_env.items()
           if not k.startswith(("LANGSMITH_", "LANGCHAIN_", "HF_HUB_", "TRANSFORMERS_OFFLINE"))}
    env["LANGSMITH_TRACING"] = "false"
    return env


def test_tracing_off_attempts_no_network_connection(
    turns_file: Path, tmp_path: Path, offline_env: dict[str, str]
) -> None:
    script = SOCKET_GUARD + f"QUESTION = {QUESTION!r}\n" + DRIVER + (
        "from memory.chroma import open_client\n"
        "telemetry = open_client(memory.context('ask').store_settings()).get_settings().anonymized_telemetry\n"
        "print('GUARD ' + json.dumps({'attempts': ATTEMPTS, 'telemetry': telemetry, "
        "'posthog_loaded': 'posthog' in sys.modules, 'evidence': answer.evidence_ids()}))\n"
    )
    command_env = tracing_off_env(offline_env)
    strace = _strace_prefix(tmp_path / "strace.txt")
    result = subprocess.run(
        [*strace, sys.executable, "-c", script, str(turns_file), str(tmp_path / "mem")],
        cwd=REPO, env=command_env, capture_output=True, text=True, timeout=240,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.split("GUARD ", 1)[1])
    assert "D1:3" in report["evidence"], f"the question was not answered from memory: {report['evidence']}"
    assert report["attempts"] == [], f"network attempted with tracing off: {report['attempts']}"
    # Chroma's product telemetry is off for the client the memory opened, and its sender was never loaded.
    assert report["telemetry"] is False
    assert not report["posthog_loaded"]
    if strace:
        calls = _network_syscalls(tmp_path / "strace.txt")
        assert calls == [], f"native code attempted network connections: {calls[:5]}"


def test_onnxruntime_runs_with_its_usage_telemetry_off(tmp_path: Path, offline_env: dict[str, str]) -> None:
    """onnxruntime's Linux build sends usage events to an internet collector: the test above saw, on a slow
    run, DNS lookups of mobile.events.data.microsoft.com from a native thread. It also keeps them under the
    cache folder (Microsoft/DeveloperTools/.onnxruntime), which is what is checked here, every time."""
    from strata.memory.minilm_onnx import cache_dir

    cache = tmp_path / "cache"
    if cache_dir().is_dir():  # the exported model, so the process does not export it again
        shutil.copytree(cache_dir(), cache / "strata")
    env = {**offline_env, "XDG_CACHE_HOME": str(cache)}
    env.pop("ORT_DISABLE_TELEMETRY", None)  # as in an app that never heard of it
    script = ("import os\nfrom strata.memory.embeddings import get_embedder\n"
              "get_embedder().embed(['Caroline went to a support group.'])\n"
              "print('SET', os.environ.get('ORT_DISABLE_TELEMETRY'))\n")
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True,
                            timeout=240)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split("SET ", 1)[1].strip() == "1"
    assert not (cache / "Microsoft").exists(), sorted(str(p) for p in (cache / "Microsoft").rglob("*"))


def test_the_guards_do_see_a_connection(tmp_path: Path, offline_env: dict[str, str]) -> None:
    """The checks above are not vacuous: a loopback connection is caught by both guards."""
    script = SOCKET_GUARD + (
        "import urllib.request\n"
        "try:\n    urllib.request.urlopen('http://127.0.0.1:9/', timeout=2)\nexcept OSError:\n    pass\n"
        "s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)\n"
        "_connect_ex(s, ('127.0.0.1', 9))\n"  # the unguarded call, as native code would make it
        "print('GUARD ' + json.dumps(ATTEMPTS))\n"
    )
    strace = _strace_prefix(tmp_path / "strace.txt")
    result = subprocess.run([*strace, sys.executable, "-c", script], env=offline_env, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    assert any("127.0.0.1" in attempt for attempt in json.loads(result.stdout.split("GUARD ", 1)[1]))
    if strace:
        assert len(_network_syscalls(tmp_path / "strace.txt")) == 1


def _strace_prefix(log: Path) -> list[str]:
    """`strace` watching every process's connect/send calls, when it exists and may trace here."""
    binary = shutil.which("strace")
    if binary is None:
        return []
    command = [binary, "-f", "--seccomp-bpf", "-e", "trace=connect,sendto,sendmsg", "-o"]
    probe = subprocess.run([*command, os.devnull, "true"], capture_output=True, timeout=30)
    return [*command, str(log)] if probe.returncode == 0 else []


def _network_syscalls(log: Path) -> list[str]:
    """Lines of an strace log where an internet socket was connected or sent to."""
    pattern = re.compile(r"\b(connect|sendto|sendmsg)\(.*sa_family=AF_INET6?\b")
    return [line for line in log.read_text().splitlines() if pattern.search(line)]


# ---------------------------------------------------------------------------- tracing on


class FakeLangSmith:
    """A LangSmith endpoint on the loopback interface that keeps what each run says about itself."""

    def __init__(self) -> None:
        self.runs: dict[str, dict[str, Any]] = {}
        self.requests: list[str] = []
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _reply(self, payload: object, status: int = 200) -> None:
                body = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                fake.requests.append(f"GET {self.path}")
                info = {"version": "0.0.0-test", "instance_flags": {"zstd_compression_enabled": True}}
                self._reply(info if self.path.startswith("/info") else {})

            def do_POST(self) -> None:
                fake.receive(self.command, self.path, self.headers.get("Content-Type", ""),
                             self.headers.get("Content-Encoding", ""), self._body())
                self._reply({})

            do_PATCH = do_PUT = do_POST

            def _body(self) -> bytes:
                length = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(length) if length else b""

            def log_message(self, format: str, *args: object) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def receive(self, method: str, path: str, content_type: str, encoding: str, body: bytes) -> None:
        """Merge every run create/update into `runs`, whatever the transport (multipart, batch, single)."""
        self.requests.append(f"{method} {path}")
        if encoding == "zstd":
            import zstandard

            body = zstandard.ZstdDecompressor().decompressobj().decompress(body)
        if content_type.startswith("multipart/"):
            message = email.parser.BytesParser(policy=email.policy.default).parsebytes(
                b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + body
            )
            for part in message.iter_parts():
                name = part.get_param("name", header="content-disposition") or ""
                _, _, rest = str(name).partition(".")
                run_id, _, field = rest.partition(".")
                payload = json.loads(part.get_payload(decode=True) or b"null")
                self._merge(run_id, {field: payload} if field else payload)
        elif body:
            data = json.loads(body)
            if isinstance(data, dict) and ("post" in data or "patch" in data):
                for item in [*(data.get("post") or []), *(data.get("patch") or [])]:
                    self._merge(str(item.get("id")), item)
            elif isinstance(data, dict):
                self._merge(str(data.get("id") or path.rstrip("/").rsplit("/", 1)[-1]), data)

    def _merge(self, run_id: str, fields: dict[str, Any]) -> None:
        with self._lock:
            run = self.runs.setdefault(run_id, {"metadata": {}})
            if fields.get("name"):
                run["name"] = fields["name"]
            extra = fields.get("extra") or {}
            run["metadata"].update(extra.get("metadata") or {})
            for key in ("tags", "parent_run_id", "trace_id"):
                if fields.get(key):
                    run[key] = fields[key]

    def named(self, name: str) -> list[dict[str, Any]]:
        with self._lock:
            return [run for run in self.runs.values() if run.get("name") == name]

    def tagged(self, name: str, namespace: str, mode: str) -> list[dict[str, Any]]:
        """The runs of one role whose metadata names this namespace and mode."""
        return [run for run in self.named(name)
                if run["metadata"].get("namespace") == namespace and run["metadata"].get("mode") == mode]

    def wait_for(self, wanted: list[tuple[str, str, str]], seconds: float = 30) -> list[tuple[str, str, str]]:
        """Wait (bounded) until a run arrived for each (role, namespace, mode); the ones still missing."""
        deadline = time.monotonic() + seconds
        while True:
            missing = [want for want in wanted if not self.tagged(*want)]
            if not missing or time.monotonic() > deadline:
                return missing
            time.sleep(0.25)


@pytest.fixture
def fake_langsmith() -> Iterator[FakeLangSmith]:
    server = FakeLangSmith()
    try:
        yield server
    finally:
        server.close()


def test_tracing_on_sends_one_named_run_per_role_with_namespace_and_mode(
    turns_file: Path, tmp_path: Path, offline_env: dict[str, str], fake_langsmith: FakeLangSmith
) -> None:
    env = {k: v for k, v in offline_env.items() if not k.startswith(("LANGSMITH_", "LANGCHAIN_"))}
    env.update({
        "LANGSMITH_TRACING": "true", "LANGSMITH_ENDPOINT": fake_langsmith.url, "LANGSMITH_API_KEY": "fake-key",
        "LANGSMITH_PROJECT": "strata-tests",
    })
    script = f"QUESTION = {QUESTION!r}\n" + DRIVER + (
        "from langchain_core.tracers.langchain import wait_for_all_tracers\nwait_for_all_tracers()\n"
    )
    result = run_python(script, [str(turns_file), str(tmp_path / "mem")], env)
    assert result.returncode == 0, result.stderr[-3000:]

    by = fake_langsmith.tagged
    expected = [("memory", "api-user", "ingest"), ("research", "api-user", "ingest"), ("judge", "api-user", "ingest"),
                *((role, "api-user", "ask") for role in sorted(ROLES_OF_AN_ASK)),
                *((role, "server-user", "ask") for role in sorted(ROLES_OF_AN_ASK))]
    missing = fake_langsmith.wait_for(expected)
    seen = sorted({(run.get("name"), run["metadata"].get("namespace"), run["metadata"].get("mode"))
                   for run in fake_langsmith.runs.values()}, key=str)
    assert not missing, f"runs missing {missing}; received {seen}; requests {fake_langsmith.requests[:10]}"
    # The API names the top run and tags it; a role run belongs to one of those traces.
    tops = [run for run in fake_langsmith.named("strata") if run["metadata"].get("namespace") == "api-user"]
    assert {run["metadata"]["mode"] for run in tops} == {"ingest", "ask"}
    assert all("strata" in run.get("tags", []) for run in tops)
    # The judge runs once per turn while ingesting: one role run per node execution.
    assert len(by("memory", "api-user", "ingest")) == 2 * len(json.loads(turns_file.read_text()))


@pytest.mark.slow
def test_served_graph_traces_each_role_with_namespace_and_mode(
    tmp_path: Path, fake_langsmith: FakeLangSmith
) -> None:
    """Studio's path: `langgraph dev` runs the graph with a context only, and the role runs still say
    whose memory and which mode (the mode here is the default, never sent by the client)."""
    import asyncio

    from langgraph_sdk import get_client

    env = {"LANGSMITH_TRACING": "true", "LANGSMITH_ENDPOINT": fake_langsmith.url, "LANGSMITH_API_KEY": "fake-key",
           "LANGSMITH_PROJECT": "strata-tests"}
    turn = {"speaker": "Ann", "text": "I moved to Lisbon in May 2023.", "time": "2023-06-01T10:00:00", "dia_id": "D1:1"}

    async def drive(url: str) -> dict[str, Any]:
        client = get_client(url=url, timeout=120)
        thread = await client.threads.create()
        await client.runs.wait(thread["thread_id"], "strata", input={"turns": [turn]},
                               context={"namespace": "studio-user", "mode": "ingest"})
        thread = await client.threads.create()
        return dict(await client.runs.wait(thread["thread_id"], "strata", input={"question": "Where did Ann move?"},
                                           context={"namespace": "studio-user"}))

    with langgraph_dev(tmp_path / "mem", repo_mirror(tmp_path / "root"), tmp_path / "server.log", env=env) as server:
        answer = asyncio.run(asyncio.wait_for(drive(server.url), 180))
        expected = [("memory", "studio-user", "ingest"), ("research", "studio-user", "ingest"),
                    ("judge", "studio-user", "ingest"), ("research", "studio-user", "ask"),
                    ("judge", "studio-user", "ask"), ("working", "studio-user", "ask")]
        missing = fake_langsmith.wait_for(expected)
        assert not missing, server.failure(f"role runs missing {missing}; requests {fake_langsmith.requests[:10]}")
    assert "D1:1" in answer.get("cited_ids", []), answer
