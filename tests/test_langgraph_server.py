"""The graph as the LangGraph server serves it: `langgraph dev` started for real, driven with the SDK.

What a Studio user or a Platform deployment meets: langgraph.json served as is,
the input and context schemas Studio turns into forms, an ingest run and an ask
run on different threads, the roles streamed by name including the Judge's
Retry rounds, and memory that outlives the server (it lives in the Chroma
folder, not in the server's threads).
"""

from __future__ import annotations

import asyncio
import importlib
import json
from collections.abc import Iterator
from contextlib import ExitStack
from itertools import islice
from pathlib import Path
from typing import Any

import pytest
from servers import BIN, LOOPBACK, REPO, ServerProcess, free_port, langgraph_dev, log_tail, repo_mirror, server_env
from strata.graph.state import Evidence

from strata.admin_routes import HISTORY_PAGE, TOKEN_VARIABLE

NAMESPACE = "caroline-and-melanie"
TURN_COUNT = 30  # sessions 1 and 2 of conv-26: more turns than one search returns
# D1:11 — "I'm keen on counseling or working in mental health - I'd love to support those with similar issues."
QUESTION = "What career is Caroline keen on?"
ANSWER_TURN = "D1:11"
# Nothing in the stored turns says this, so the evidence is never enough and the Judge keeps retrying.
UNANSWERABLE = "What is the name of the hotel where Melanie stayed in Tokyo in 2019?"
RUN_TIMEOUT = 180.0
ADMIN_TOKEN = "operator-token-for-this-test"
JOBS = 4  # runs the server runs at once (`langgraph dev` runs one by default, a Platform deployment ten)


def test_langgraph_json_serves_the_graph_without_edits() -> None:
    """What `langgraph dev` and a Platform deployment read: the package, the graph, an env that
    does not override the user's own settings (STRATA_*, LANGSMITH_*) but two: a served memory's storage
    is the server's to choose, never a run's (STRATA_PIN_STORAGE), and every run names its memory
    (STRATA_REQUIRE_NAMESPACE)."""
    from langgraph_cli.config import validate_config_file

    config = validate_config_file(REPO / "langgraph.json")
    assert config["dependencies"] == ["."]
    assert config["graphs"] == {"strata": "strata.graph.graph:graph"}
    module, _, variable = config["graphs"]["strata"].partition(":")
    from langgraph.graph.state import CompiledStateGraph

    assert isinstance(getattr(importlib.import_module(module), variable), CompiledStateGraph)
    env = config.get("env") or {}
    assert isinstance(env, dict), "an env file would override what the user exports (langgraph dev lets it win)"
    check_admin_app_loads_by_path(REPO / config["http"]["app"].partition(":")[0])
    assert [key for key in env if key.startswith(("STRATA_", "LANGSMITH_", "LANGCHAIN_"))] == [
        "STRATA_PIN_STORAGE", "STRATA_REQUIRE_NAMESPACE"]
    assert env["STRATA_PIN_STORAGE"] == env["STRATA_REQUIRE_NAMESPACE"] == "true"


def test_the_image_build_context_is_the_package_alone() -> None:
    """`langgraph build` sends the folder of langgraph.json to Docker and the image copies all of it (`ADD .`):
    .dockerignore lets in only what installs the package, so a laptop's memory, a .env holding a ledger
    password, the virtualenv and the git history stay out; `langgraph deploy` reads it too. And a .env made
    from .env.example is not committed by mistake (.gitignore)."""
    import pathspec

    def ignored_by(name: str) -> pathspec.GitIgnoreSpec:
        return pathspec.GitIgnoreSpec.from_lines((REPO / name).read_text().splitlines())

    context = ignored_by(".dockerignore")
    private = [".venv/bin/python", ".strata/ledger.sqlite3", ".strata/chroma/chroma.sqlite3", ".env", ".env.local",
               ".langgraph_api/.langgraph_checkpoint.1.pckl", "runs/eval/results.json", ".git/HEAD",
               "chroma-data/chroma.sqlite3", "conv-26.json", "strata/__pycache__/cli.cpython-311.pyc"]
    assert [path for path in private if not context.match_file(path)] == []
    needed = ["pyproject.toml", "README.md", "langgraph.json", "strata/cli.py", "strata/py.typed",
              "strata/data/sample_conversation.json", "graph/graph.py", "agents/judge.py", "memory/store.py",
              "memory/graph/__init__.py", "prompts/judge.py", "evaluation/harness.py"]
    assert [path for path in needed if context.match_file(path)] == []
    assert ignored_by(".gitignore").match_file(".env")


def test_the_image_installs_the_cpu_build_of_torch_before_the_package() -> None:
    """PyPI's Linux wheel of torch is the CUDA build (several GB of nvidia-* wheels the embedder never uses):
    the Dockerfile `langgraph build` writes takes torch from PyTorch's CPU index, at the version pyproject.toml
    pins, before the package, whose pin it then satisfies (`==2.13.0` matches `2.13.0+cpu`)."""
    import re

    from langgraph_cli.config import config_to_docker, validate_config_file

    pin = re.search(r'"torch==([^"]+)"', (REPO / "pyproject.toml").read_text())
    assert pin is not None
    lines = config_to_docker(REPO / "langgraph.json", validate_config_file(REPO / "langgraph.json"))[0].splitlines()
    torch = [i for i, line in enumerate(lines) if "torch" in line]
    package = next(i for i, line in enumerate(lines) if line.startswith("RUN") and "-e ." in line)
    assert len(torch) == 1 and torch[0] < package
    words = lines[torch[0]].split()
    assert f"torch=={pin[1]}" in words and words[words.index("--index-url") + 1] == "https://download.pytorch.org/whl/cpu"


def test_the_image_carries_the_env_of_langgraph_json() -> None:
    """An image `langgraph build` made and started with `docker run` reads no langgraph.json: its `env` (the
    storage pin, a namespace for every run, no telemetry) is set in the image too, and stays the same."""
    from langgraph_cli.config import config_to_docker, validate_config_file

    config = validate_config_file(REPO / "langgraph.json")
    lines = config_to_docker(REPO / "langgraph.json", config)[0].splitlines()
    [env] = [line.split()[1:] for line in lines if line.startswith("ENV ") and "STRATA_" in line]
    assert dict(pair.split("=", 1) for pair in env) == config["env"]


def check_admin_app_loads_by_path(path: Path) -> None:
    """The server imports the admin routes from their file, under a module name of its own: their request
    bodies must still validate there (postponed annotations would not resolve)."""
    import importlib.util
    import os

    from starlette.testclient import TestClient

    spec = importlib.util.spec_from_file_location("served_admin_routes", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    os.environ[TOKEN_VARIABLE] = ADMIN_TOKEN
    try:
        reply = TestClient(module.app).post("/strata/undo?namespace=any", json={"change": 1},
                                            headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    finally:
        del os.environ[TOKEN_VARIABLE]
    assert reply.status_code == 400 and reply.json()["error"].startswith("change: Extra inputs")


def test_schemas_studio_shows_have_names_defaults_and_descriptions() -> None:
    from strata.graph.graph import graph

    check_context_schema(graph.get_context_jsonschema())
    check_input_schema(graph.get_input_jsonschema())


def check_context_schema(schema: dict[str, Any] | None) -> None:
    assert schema is not None
    fields = schema["properties"]
    assert fields["namespace"]["type"] == "string" and fields["namespace"]["default"] == "default"
    assert sorted(fields["mode"]["enum"]) == ["ask", "chat", "ingest", "retrieve"]
    assert fields["mode"]["default"] == "ask"
    assert fields["model"]["default"] == ""
    assert fields["k_r"]["default"] == 2 and fields["k_r"]["type"] == "integer"
    for name in ("chroma_host", "chroma_port", "chroma_auth_header", "data_dir"):
        assert name in fields
    undescribed = [name for name, spec in fields.items() if not spec.get("description")]
    assert undescribed == []
    # A chat model object cannot be a form field: it is there for Python apps, typed as anything.
    assert "chat_model" not in schema.get("required", [])
    assert fields["chat_model"].get("default") is None


def check_input_schema(schema: dict[str, Any]) -> None:
    fields = schema["properties"]
    assert set(fields) == {"turns", "question"}
    assert fields["turns"]["default"] == [] and fields["question"]["default"] == ""
    assert all(spec.get("description") for spec in fields.values())
    turn = schema["$defs"]["Turn"]["properties"]
    assert {"speaker", "text", "time", "dia_id"} <= set(turn)
    # what the graph reads (epoch seconds, "1:56 pm on 8 May, 2023"), not only an ISO date-time
    assert [form["type"] for form in turn["time"]["anyOf"]] == ["string", "number", "null"]
    assert "format" not in turn["time"]["anyOf"][0]


# ----------------------------------------------------------------------------- the server


class Served:
    """One `langgraph dev` at a time over one memory folder, with the conversation ingested once."""

    def __init__(self, base: Path, turns: list[dict[str, Any]]) -> None:
        self.base = base
        self.data_dir = base / "memory"
        self.turns = turns
        self.server: ServerProcess | None = None
        self.ingest_result: dict[str, Any] | None = None
        self._running = ExitStack()
        self.starts = 0

    def start(self) -> ServerProcess:
        """A server run from a fresh mirror of the repo: it starts with no threads of its own."""
        self.starts += 1
        root = repo_mirror(self.base / f"root-{self.starts}")
        self.server = self._running.enter_context(
            langgraph_dev(self.data_dir, root, self.base / f"langgraph-{self.starts}.log",
                          env={TOKEN_VARIABLE: ADMIN_TOKEN}, jobs=JOBS)
        )
        return self.server

    def stop(self) -> None:
        self._running.close()
        self.server = None

    def restart(self) -> ServerProcess:
        self.stop()
        return self.start()

    def client(self) -> Any:
        from langgraph_sdk import get_client

        assert self.server is not None
        return get_client(url=self.server.url, timeout=RUN_TIMEOUT)

    def fail(self, what: str) -> str:
        log = self.server.log_path if self.server else self.base / f"langgraph-{self.starts}.log"
        return f"{what}\n--- server log tail ---\n{log_tail(log)}"

    def run(self, coroutine: Any) -> Any:
        try:
            return asyncio.run(asyncio.wait_for(coroutine, RUN_TIMEOUT))
        except Exception as exc:
            raise AssertionError(self.fail(f"{type(exc).__name__}: {exc}")) from exc

    def ensure_ingested(self) -> dict[str, Any]:
        """Run 1, on its own thread: store the turns (mode ingest)."""
        if self.ingest_result is None:
            result = self.run(_ingest(self.client(), self.turns))
            assert result.get("stored_ids"), self.fail(f"ingest stored nothing: {result}")
            self.ingest_result = result
        return self.ingest_result


async def _ingest(client: Any, turns: list[dict[str, Any]]) -> dict[str, Any]:
    thread = await client.threads.create()
    return dict(await client.runs.wait(
        thread["thread_id"], "strata", input={"turns": turns}, context={"namespace": NAMESPACE, "mode": "ingest"},
    ))


async def _ask(client: Any, question: str, **context: Any) -> tuple[str, dict[str, Any]]:
    thread = await client.threads.create()
    result = await client.runs.wait(
        thread["thread_id"], "strata", input={"question": question},
        context={"namespace": NAMESPACE, "mode": "ask", **context},
    )
    return thread["thread_id"], dict(result)


async def _stream_nodes(client: Any, question: str, k_r: int) -> tuple[list[str], dict[str, Any]]:
    """The nodes a run's `updates` stream names, in order, and the last judge verdict."""
    thread = await client.threads.create()
    nodes: list[str] = []
    verdict: dict[str, Any] = {}
    async for part in client.runs.stream(
        thread["thread_id"], "strata", input={"question": question},
        context={"namespace": NAMESPACE, "mode": "ask", "k_r": k_r}, stream_mode="updates",
    ):
        if part.event == "error":
            raise AssertionError(f"run failed: {part.data}")
        if part.event == "updates" and isinstance(part.data, dict):
            for node, update in part.data.items():
                nodes.append(node)
                if node == "judge" and isinstance(update, dict) and update.get("verdict"):
                    verdict = update["verdict"]
    return nodes, verdict


def evidence_ids(result: dict[str, Any]) -> list[str]:
    return list(dict.fromkeys(i for item in result.get("evidence") or [] for i in Evidence(**item).turn_ids()))


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, locomo_dir: Path) -> Iterator[Served]:
    from strata.conversations import load_turns

    turns = [turn.model_dump(mode="json", exclude_none=True)
             for turn in islice(load_turns(locomo_dir / "conv-26.json").turns(), TURN_COUNT)]
    under_test = Served(tmp_path_factory.mktemp("langgraph-dev"), turns)
    under_test.start()
    try:
        yield under_test
    finally:
        under_test.stop()


@pytest.mark.slow
def test_served_schemas_are_studio_forms(served: Served) -> None:
    async def schemas() -> dict[str, Any]:
        client = served.client()
        assistants = await client.assistants.search(graph_id="strata")
        assert assistants, "langgraph dev made no assistant for the strata graph"
        return dict(await client.assistants.get_schemas(assistants[0]["assistant_id"]))

    found = served.run(schemas())
    check_context_schema(found["context_schema"])
    check_input_schema(found["input_schema"])
    assert {"answer", "evidence", "verdict", "rounds", "trace"} <= set(found["output_schema"]["properties"])


@pytest.mark.slow
def test_the_readme_examples_of_calling_the_graph_run_as_written(served: Served) -> None:
    """The README's "Calling the served graph" (found missing by audit, runs/audit_docs item 5): its Python
    block and its curl line, run against the server (its port, and a namespace of their own), print and
    answer what the README's comments say."""
    import re
    import subprocess
    import sys

    section = (REPO / "README.md").read_text().split("**Calling the served graph.**", 1)[1]
    blocks = {lang: re.search(rf"```{lang}\n(.*?)```", section, re.DOTALL) for lang in ("python", "bash")}
    assert served.server is not None and blocks["python"] and blocks["bash"]

    def here(text: str) -> str:
        return text.replace("http://127.0.0.1:2024", served.server.url).replace('"ann"', '"readme-calls"')

    code = subprocess.run([sys.executable, "-c", here(blocks["python"][1])], capture_output=True, text=True,
                          timeout=RUN_TIMEOUT)
    assert code.returncode == 0, served.fail(code.stderr[-2000:])
    stored, asked = code.stdout.splitlines()
    assert stored.startswith("['raw:T1', 'fact:T1:0', 'persona:Ann:home:") and asked == "Denver ['T1']"
    curl = subprocess.run(["bash", "-c", here(blocks["bash"][1])], capture_output=True, text=True,
                          timeout=RUN_TIMEOUT)
    assert json.loads(curl.stdout)["answer"] == "Denver", served.fail(curl.stdout[-500:] + curl.stderr[-500:])


@pytest.mark.slow
def test_ingest_on_one_thread_then_ask_on_another(served: Served) -> None:
    ingested = served.ensure_ingested()
    assert len(ingested["stored_ids"]) >= TURN_COUNT
    _, result = served.run(_ask(served.client(), QUESTION))
    assert ANSWER_TURN in evidence_ids(result), served.fail(f"evidence {evidence_ids(result)}: {result.get('answer')}")
    assert ANSWER_TURN in result["cited_ids"], result.get("answer")
    assert result["verdict"]["action"] in ("Pass", "Retry", "Refresh")


@pytest.mark.slow
def test_stream_names_each_role_and_the_retry_rounds(served: Served) -> None:
    served.ensure_ingested()
    k_r = 2
    nodes, verdict = served.run(_stream_nodes(served.client(), UNANSWERABLE, k_r))
    assert nodes.count("research") == k_r + 1, f"nodes streamed: {nodes}"
    assert nodes.count("judge") == k_r + 1
    assert verdict.get("action") == "Retry", verdict
    assert nodes[0] == "start_run" and nodes[-2:] == ["working", "finish_run"]  # they only reset run fields
    assert set(nodes) <= {"start_run", "research", "judge", "refresher", "working", "finish_run"}
    # A smaller K_r from the run's context is obeyed: one search, one Retry, then the answer.
    nodes, _ = served.run(_stream_nodes(served.client(), UNANSWERABLE, 1))
    assert nodes.count("research") == 2, f"nodes streamed: {nodes}"


@pytest.mark.slow
def test_ingest_streams_the_memory_role_for_each_turn(served: Served) -> None:
    """An ingest run streamed: memory writes each turn first (write-ahead), then the others look at it."""

    async def stream() -> list[str]:
        client = served.client()
        thread = await client.threads.create()
        nodes: list[str] = []
        turn = {"speaker": "Melanie", "text": "I signed up for a pottery class that starts next week.",
                "time": "2023-05-08T14:30:00", "dia_id": "D1:90"}
        async for part in client.runs.stream(
            thread["thread_id"], "strata", input={"turns": [turn]},
            context={"namespace": NAMESPACE + "-stream", "mode": "ingest"}, stream_mode="updates",
        ):
            if part.event == "updates" and isinstance(part.data, dict):
                nodes.extend(part.data)
        return nodes

    nodes = served.run(stream())
    assert nodes[:2] == ["start_run", "memory"] and nodes[-2:] == ["memory", "finish_run"], nodes
    assert {"research", "judge"} <= set(nodes)


@pytest.mark.slow
def test_memory_outlives_the_server(served: Served) -> None:
    """A new server over the same memory folder, started with no threads at all, still answers."""
    served.ensure_ingested()
    old_root = served.server.cwd if served.server else None
    server = served.restart()
    assert server.cwd != old_root  # its thread store (.langgraph_api/) starts empty
    thread_id, result = served.run(_ask(served.client(), QUESTION))
    assert ANSWER_TURN in evidence_ids(result), served.fail(f"evidence after restart: {evidence_ids(result)}")

    async def threads() -> list[str]:
        return [t["thread_id"] for t in await served.client().threads.search(limit=100)]

    assert served.run(threads()) == [thread_id], "the restarted server had threads of its own"


@pytest.mark.slow
def test_config_configurable_works_like_context(served: Served) -> None:
    """Older clients send `config={"configurable": ...}`; the server maps it to the runtime context."""
    served.ensure_ingested()

    async def ask() -> dict[str, Any]:
        client = served.client()
        thread = await client.threads.create()
        return dict(await client.runs.wait(
            thread["thread_id"], "strata", input={"question": QUESTION},
            config={"configurable": {"namespace": NAMESPACE, "mode": "retrieve"}},
        ))

    result = served.run(ask())
    assert result.get("answer") is None  # retrieve mode: the evidence, no answer
    assert ANSWER_TURN in evidence_ids(result)



@pytest.mark.slow
def test_a_run_cannot_move_the_memory_nor_store_junk(served: Served, tmp_path: Path) -> None:
    """langgraph.json pins storage (STRATA_PIN_STORAGE): a run naming another folder is refused, and creates
    nothing there; wrong input types are one line, and nothing is stored."""
    served.ensure_ingested()
    elsewhere = tmp_path / "elsewhere"

    async def runs() -> list[dict[str, Any]]:
        client = served.client()
        results = []
        secret = {"speaker": "Ann", "text": "My door code is 4417."}
        for payload, context in (({"question": QUESTION}, {"namespace": NAMESPACE, "data_dir": str(elsewhere)}),
                                 ({"turns": 5}, {"namespace": NAMESPACE, "mode": "ingest"}),
                                 ({"question": 5}, {"namespace": NAMESPACE, "mode": "ask"}),
                                 ("hello", {"namespace": NAMESPACE, "mode": "chat"}),  # no state: found by audit
                                 # the server drops the key it does not know: no namespace arrives
                                 ({"turns": [secret]}, {"namepsace": NAMESPACE, "mode": "ingest"})):
            thread = await client.threads.create()
            results.append(dict(await client.runs.wait(thread["thread_id"], "strata", input=payload,
                                                       context=context,
                                                       raise_error=False)))  # the run's error, as a reply
        return results

    before = served.run(_stats(served))
    moved, junk, number, text, unnamed = served.run(runs())
    assert "this server's runs name their memory" in str(unnamed)  # not stored in the shared 'default'
    assert "STRATA_PIN_STORAGE" in str(moved) and not elsewhere.exists()
    assert "turns must be a list of turns, not int" in str(junk)
    assert "the question must be text, not int" in str(number)
    assert "the graph's input is str, not a state" in str(text), text
    assert served.run(_stats(served)) == before


async def _stats(served: Served) -> dict[str, Any]:
    """The namespace's counts, as the operator's route gives them."""
    import httpx

    async with httpx.AsyncClient(timeout=RUN_TIMEOUT) as http:
        reply = await http.get(f"{served.server.url}/strata/stats?namespace={NAMESPACE}",  # type: ignore[union-attr]
                               headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    assert reply.status_code == 200, reply.text
    return dict(reply.json())


@pytest.mark.slow
def test_an_operator_erases_through_the_server_and_its_threads_go_too(served: Served) -> None:
    """The admin routes langgraph.json mounts: an erase lists, then removes, the records and the server's
    threads whose states hold the erased text (the ingest run's and an ask's), and keeps the others."""
    import httpx

    namespace = "erase-check"
    secret = "My locker code at the gym is 4471."
    said = [("Ann", secret), ("Bob", "I will never remember that, Ann."), ("Ann", "I started the cello in March.")]
    turns = [{"speaker": speaker, "text": text, "dia_id": f"D1:{i}", "time": f"2023-05-01T10:0{i}"}
             for i, (speaker, text) in enumerate(said, 1)]
    served.ensure_ingested()

    async def scenario() -> dict[str, Any]:
        client = served.client()
        ingest = await client.threads.create()
        await client.runs.wait(ingest["thread_id"], "strata", input={"turns": turns},
                               context={"namespace": namespace, "mode": "ingest"})
        asked = await client.threads.create()
        await client.runs.wait(asked["thread_id"], "strata", input={"question": "What is Ann's locker code?"},
                               context={"namespace": namespace, "mode": "ask"})
        other, _ = await _ask(client, QUESTION)  # the LoCoMo namespace: never saw the secret
        # a thread of another namespace with more saved states than a page, which never saw it either
        long_run = await client.threads.create()
        await client.runs.wait(long_run["thread_id"], "strata", input={"turns": served.turns},
                               context={"namespace": "erase-other", "mode": "ingest"})
        pages = len(await client.threads.get_history(long_run["thread_id"], limit=HISTORY_PAGE + 1))
        url = f"{served.server.url}/strata/erase?namespace={namespace}"  # type: ignore[union-attr]
        async with httpx.AsyncClient(timeout=RUN_TIMEOUT) as http:
            closed = await http.post(url, json={"ids": ["raw:D1:1"]})
            auth = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
            wrong = await http.post(url, json={"ids": ["raw:D9:9"], "confirm": True}, headers=auth)
            listed = await http.post(url, json={"ids": ["raw:D1:1"]}, headers=auth)
            done = await http.post(url, json={"ids": ["raw:D1:1"], "confirm": True}, headers=auth)
            records = await http.get(f"{served.server.url}/strata/records?namespace={namespace}"  # type: ignore[union-attr]
                                     "&ids=raw:D1:1&ids=raw:D1:3", headers=auth)
        kept = []
        for thread_id in (ingest["thread_id"], asked["thread_id"], other, long_run["thread_id"]):
            try:
                await client.threads.get(thread_id)
                kept.append(thread_id)
            except Exception:  # the SDK's NotFoundError: the thread is gone
                pass
        return {"closed": closed, "wrong": wrong, "listed": listed, "done": done, "records": records, "kept": kept,
                "ingest": ingest["thread_id"], "asked": asked["thread_id"], "other": other,
                "long_run": long_run["thread_id"], "pages": pages}

    seen = served.run(scenario())
    assert seen["closed"].status_code == 401
    assert seen["wrong"].status_code == 400 and "nothing was erased" in seen["wrong"].json()["error"]
    listed = seen["listed"].json()
    assert listed["erased"] is False and "raw:D1:1" in listed["would_erase"]
    assert sorted(listed["would_delete_threads"]) == sorted([seen["ingest"], seen["asked"]]), served.fail(str(listed))
    report = seen["done"].json()
    assert seen["done"].status_code == 200 and "raw:D1:1" in report["erased"], served.fail(str(report))
    assert sorted(report["threads"]) == sorted([seen["ingest"], seen["asked"]])
    assert [r["id"] for r in seen["records"].json()] == ["raw:D1:3"]
    assert seen["pages"] > HISTORY_PAGE  # more than a page of states, none of which the erase needed to read
    assert seen["kept"] == [seen["other"], seen["long_run"]]


@pytest.mark.slow
@pytest.mark.parametrize("action", ["interrupt", "rollback"])
def test_a_run_cancelled_midway_keeps_its_turns_and_the_same_turns_finish_it(
    served: Served, locomo_dir: Path, action: str
) -> None:
    """`runs.cancel` (as a double-text's `interrupt` or `rollback` does) mid-ingest: the run's raw turns are
    stored and the rest pending, the namespace's next storing run is not held back, and resuming it (an
    interrupt) or sending the same turns again (a rollback deleted the run) ends with the memory an
    uninterrupted ingest writes, as the README says."""
    import httpx

    from strata.conversations import load_turns

    namespace = f"cancelled-{action}"
    turns = [turn.model_dump(mode="json", exclude_none=True)
             for turn in islice(load_turns(locomo_dir / "conv-26.json").turns(), 120)]  # seconds to derive

    async def export(http: httpx.AsyncClient, name: str) -> dict[str, Any]:
        reply = await http.get(f"{served.server.url}/strata/export?namespace={name}",  # type: ignore[union-attr]
                               headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
        assert reply.status_code == 200, reply.text
        return dict(reply.json())

    def written(document: dict[str, Any]) -> tuple[set[tuple[str, str]], set[tuple[str, str, str]]]:
        return ({(r["id"], r["text"]) for r in document["records"]},
                {(link["src"], link["dst"], link["type"]) for link in document["links"]})

    async def scenario() -> tuple[str, dict[str, Any], dict[str, Any], dict[str, Any]]:
        client = served.client()
        thread = (await client.threads.create())["thread_id"]
        context = {"namespace": namespace, "mode": "ingest"}
        run = await client.runs.create(thread, "strata", input={"turns": turns}, context=context)
        async with httpx.AsyncClient(timeout=RUN_TIMEOUT) as http:
            while (await http.get(f"{served.server.url}/strata/stats?namespace={namespace}",  # type: ignore[union-attr]
                                  headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})).status_code != 200:
                await asyncio.sleep(0.05)  # until its turns are written ahead, the first thing it does
        await client.runs.cancel(thread, run["run_id"], wait=True, action=action)
        try:
            status = (await client.runs.get(thread, run["run_id"]))["status"]
        except Exception:  # the SDK's NotFoundError: a rollback deletes the run
            status = "deleted"
        async with httpx.AsyncClient(timeout=RUN_TIMEOUT) as http:
            stopped = await export(http, namespace)
            if action == "interrupt":  # resumed on its thread
                await client.runs.wait(thread, "strata", input=None, context=context)
            else:
                await client.runs.wait(thread, "strata", input={"turns": turns}, context=context)
            clean = f"{namespace}-whole"
            await client.runs.wait(None, "strata", input={"turns": turns},
                                   context={"namespace": clean, "mode": "ingest"})
            return status, stopped, await export(http, namespace), await export(http, clean)

    status, stopped, finished, whole = served.run(scenario())
    assert status == ("interrupted" if action == "interrupt" else "deleted")
    raw = {f"raw:{turn['dia_id']}" for turn in turns}
    assert raw <= {r["id"] for r in stopped["records"]}  # written ahead, all of them
    assert stopped["state"].get("pending_derive"), "the run was cancelled after its last turn"
    assert not finished["state"].get("pending_derive")
    assert written(finished) == written(whole)


@pytest.mark.slow
def test_two_conversations_sent_at_once_to_one_namespace_are_stored_one_after_the_other(
    served: Served, locomo_dir: Path
) -> None:
    """A server running several runs at once (Platform runs ten) ran two ingests of one namespace on two
    threads step about: each turn closed the other conversation's open episode, 14 episodes for 16 turns.
    They take turns now, whole: the episodes are those of the two inputs sent one after the other."""
    import httpx

    from strata.conversations import load_turns

    sessions = load_turns(locomo_dir / "conv-26.json").sessions
    first, second = ([t.model_dump(mode="json", exclude_none=True) for t in s.turns[:8]] for s in sessions[:2])

    async def ingest(client: Any, namespace: str, turns: list[dict[str, Any]]) -> None:
        thread = await client.threads.create()
        await client.runs.wait(thread["thread_id"], "strata", input={"turns": turns},
                               context={"namespace": namespace, "mode": "ingest"})

    async def episodes(namespace: str) -> set[tuple[str, ...]]:
        async with httpx.AsyncClient(timeout=RUN_TIMEOUT) as http:
            reply = await http.get(f"{served.server.url}/strata/export?namespace={namespace}",  # type: ignore[union-attr]
                                   headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
        document = reply.json()
        return {tuple(r["source_ids"]) for r in document["records"] if r["kind"] == "episode"} | {
            tuple(document["state"].get("open_episode", {}).get("turn_ids", []))}

    async def scenario() -> tuple[list[set[tuple[str, ...]]], set[tuple[str, ...]]]:
        client = served.client()
        orders = []
        for namespace, inputs in (("at-once-ab", (first, second)), ("at-once-ba", (second, first))):
            for turns in inputs:
                await ingest(client, namespace, turns)
            orders.append(await episodes(namespace))
        await asyncio.gather(ingest(client, "at-once", first), ingest(client, "at-once", second))
        return orders, await episodes("at-once")

    orders, together = served.run(scenario())
    assert together in orders, served.fail(f"episodes of the two at once: {sorted(together)}")


@pytest.mark.slow
def test_an_erase_reaches_a_thread_whose_run_of_the_namespace_was_deleted(served: Served) -> None:
    """A question of one namespace, then one of another, on the same thread; the first run deleted (the
    server deletes its states too, but the second run's first states begin from its last one, evidence and
    all). No run of the thread named the namespace any more, so the erase skipped the thread, which still
    held the erased turn. Its states are read now, since its runs do not account for them."""
    import httpx

    namespace, secret = "erase-deleted-run", "My locker code at the pool is 5521."
    served.ensure_ingested()

    async def scenario() -> tuple[str, dict[str, Any], bool]:
        client = served.client()
        ingest = await client.threads.create()
        await client.runs.wait(ingest["thread_id"], "strata", context={"namespace": namespace, "mode": "ingest"},
                               input={"turns": [{"speaker": "Ann", "text": secret, "dia_id": "D1:1"}]})
        thread = (await client.threads.create())["thread_id"]
        asked = await client.runs.create(thread, "strata", input={"question": "What is Ann's locker code?"},
                                         context={"namespace": namespace, "mode": "ask"})
        await client.runs.join(thread, asked["run_id"])
        await client.runs.wait(thread, "strata", input={"question": QUESTION}, context={"namespace": NAMESPACE})
        await client.runs.delete(thread, asked["run_id"])
        history = await client.threads.get_history(thread, limit=1000)
        held = any(secret in json.dumps(state["values"]) for state in history)
        async with httpx.AsyncClient(timeout=RUN_TIMEOUT) as http:
            done = await http.post(f"{served.server.url}/strata/erase?namespace={namespace}",  # type: ignore[union-attr]
                                   json={"ids": ["raw:D1:1"], "confirm": True},
                                   headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
        return thread, done.json(), held

    thread, report, held = served.run(scenario())
    assert held  # the thread still held it, though no run of it named the namespace
    assert thread in report.get("threads", []), served.fail(str(report))


def test_a_relative_folder_resolves_on_an_event_loop_without_getcwd(monkeypatch: pytest.MonkeyPatch) -> None:
    """A server's loop refuses os.getcwd() (blockbuster): a relative folder named there resolves against the
    working directory read at import; off the loop, against the current one (a test may have changed it)."""
    import os

    from strata.memory import settings

    here = os.getcwd()

    async def on_loop() -> str:
        return settings.real_folder(".strata")

    def refused() -> str:
        raise RuntimeError("Blocking call to os.getcwd")

    with monkeypatch.context() as patch:  # undone before pytest itself needs the working directory
        patch.setattr(os, "getcwd", refused)
        try:
            resolved: str | Exception = asyncio.run(on_loop())
        except RuntimeError as error:
            resolved = error
    assert resolved == str(Path(settings._IMPORT_DIR, ".strata").resolve())
    monkeypatch.chdir(Path(here).parent)
    assert settings.real_folder(".strata") == str(Path(here).parent.resolve() / ".strata")


@pytest.mark.slow
def test_make_serve_without_a_data_dir_serves_runs_and_routes(tmp_path: Path) -> None:
    """The README's `make serve`: `langgraph dev` from the checkout, no STRATA_DATA_DIR, so the memory is the
    relative default `.strata` there (run here from a mirror of the repo, without its browser and reload). Runs
    and the operator's routes work, and a run naming a relative data_dir gets the one-line pin refusal."""
    import httpx

    root = repo_mirror(tmp_path / "root")
    env = {k: v for k, v in server_env({TOKEN_VARIABLE: ADMIN_TOKEN}).items() if k != "STRATA_DATA_DIR"}
    port = free_port()
    server = ServerProcess("langgraph dev", [str(BIN / "langgraph"), "dev", "--no-browser", "--no-reload", "--host",
                                             LOOPBACK, "--port", str(port)], port, "/ok", tmp_path / "server.log", env,
                           cwd=root)
    turn = {"speaker": "Ann", "text": "I started the cello in March.", "dia_id": "D1:1"}

    async def scenario() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], httpx.Response]:
        from langgraph_sdk import get_client

        client = get_client(url=server.url, timeout=RUN_TIMEOUT)
        results = []
        for payload, context in (({"turns": [turn]}, {"namespace": "ann", "mode": "ingest"}),
                                 ({"question": "What did Ann start?"}, {"namespace": "ann"}),
                                 ({"question": "What did Ann start?"}, {"namespace": "ann", "data_dir": "./mem"})):
            thread = await client.threads.create()
            results.append(dict(await client.runs.wait(thread["thread_id"], "strata", input=payload, context=context,
                                                       raise_error=False)))
        async with httpx.AsyncClient(timeout=RUN_TIMEOUT) as http:
            stats = await http.get(f"{server.url}/strata/stats?namespace=ann",
                                   headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
        return results[0], results[1], results[2], stats

    server.start(120.0)
    try:
        ingested, asked, moved, stats = asyncio.run(asyncio.wait_for(scenario(), RUN_TIMEOUT))
    finally:
        server.stop()
    log = log_tail(server.log_path)
    assert ingested.get("stored_ids"), f"{ingested}\n{log}"
    assert "D1:1" in evidence_ids(asked), f"{asked}\n{log}"
    assert "STRATA_PIN_STORAGE" in str(moved) and "Blocking" not in str(moved), moved
    assert not (root / "mem").exists()
    assert stats.status_code == 200 and stats.json()["raw"], stats.text
    assert (root / ".strata" / "ledger.sqlite3").is_file()  # the default, relative to where the server runs
