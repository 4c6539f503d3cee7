"""The operator's routes (strata/admin_routes.py) in process, over an embedded memory of real LoCoMo turns.

Off unless the server has a token, refused without it, one line for every wrong
request, nothing changed by one; history, undo, records, the graph and the slow
path through HTTP as through `Memory`. The erase route needs the LangGraph server
it is mounted in (it deletes the server's threads too), so it is tested against a
real `langgraph dev` in tests/test_langgraph_server.py.
"""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from conftest import offline_environment
from starlette.testclient import TestClient
from strata.memory.registry import close_all
from strata.memory.store import MemoryStore

from strata import Memory
from strata.admin_routes import TOKEN_VARIABLE, app
from strata.conversations import load_turns

TOKEN = "a-long-random-operator-token"
NAMESPACE = "conv-26"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def ingested(tmp_path_factory: pytest.TempPathFactory, locomo_dir: Path, embedder: Any) -> Path:
    """conv-26's first 20 turns, stored once for the whole file; each test gets its own copy of the folder."""
    folder = tmp_path_factory.mktemp("admin_routes") / "mem"
    with offline_environment():
        Memory(NAMESPACE, data_dir=str(folder)).add(
            [t for s in load_turns(locomo_dir / "conv-26.json").sessions for t in s.turns][:20])
        close_all()
    return folder


@pytest.fixture
def memory(ingested: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Memory]:
    shutil.copytree(ingested, data_dir)
    monkeypatch.setenv("STRATA_DATA_DIR", str(data_dir))
    monkeypatch.setenv(TOKEN_VARIABLE, TOKEN)
    memory = Memory(NAMESPACE)
    yield memory
    close_all()


@pytest.fixture
def client() -> TestClient:
    return TestClient(app)


def test_the_routes_are_off_without_a_token_and_closed_without_the_right_one(
    memory: Memory, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = f"/strata/stats?namespace={NAMESPACE}"
    assert client.get(path, headers=AUTH).status_code == 200
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN[:-1]}, {"Authorization": TOKEN},
                    {"Authorization": f"Basic {TOKEN}"}):
        refused = client.get(path, headers=headers)
        assert refused.status_code == 401 and TOKEN_VARIABLE in refused.json()["error"]
    monkeypatch.delenv(TOKEN_VARIABLE)
    off = client.get(path, headers=AUTH)
    assert off.status_code == 403 and f"set {TOKEN_VARIABLE}" in off.json()["error"]


def test_reads_answer_as_the_python_api_does(memory: Memory, client: TestClient) -> None:
    stats = client.get(f"/strata/stats?namespace={NAMESPACE}", headers=AUTH).json()
    assert stats["raw"]["active"] == 20 == memory.stats()["raw"]["active"]
    records = client.get(f"/strata/records?namespace={NAMESPACE}&ids=raw:D1:3&ids=raw:D9:9", headers=AUTH).json()
    assert [r["id"] for r in records] == ["raw:D1:3"] and "LGBTQ support group" in records[0]["text"]
    malformed = client.get(f"/strata/records?namespace={NAMESPACE}&ids=D1:3", headers=AUTH)  # no kind: asked wrong
    assert malformed.status_code == 400 and "is not a memory id" in malformed.json()["error"]
    graph = client.get(f"/strata/graph?namespace={NAMESPACE}&person=Caroline", headers=AUTH).json()
    assert graph["scope"] == "person: Caroline" and graph["nodes"]
    assert {n["id"] for n in graph["nodes"]} == {n.id for n in memory.graph(person="Caroline").nodes}


def test_an_operator_exports_the_memory_or_one_persons_copy(memory: Memory, client: TestClient) -> None:
    whole = client.get(f"/strata/export?namespace={NAMESPACE}", headers=AUTH).json()
    assert whole["format"] == "strata-memory" and len(whole["records"]) == len(memory.export().records)
    copy = client.get(f"/strata/export?namespace={NAMESPACE}&about=Caroline", headers=AUTH).json()
    assert copy["about"] == "Caroline" and 0 < len(copy["records"]) < len(whole["records"])
    nobody = client.get(f"/strata/export?namespace={NAMESPACE}&about=Nobody", headers=AUTH)
    assert nobody.status_code == 400 and nobody.json()["error"].endswith("nothing was exported")


def test_an_operator_imports_an_export_into_an_empty_namespace(memory: Memory, client: TestClient) -> None:
    whole = client.get(f"/strata/export?namespace={NAMESPACE}", headers=AUTH).text
    done = client.post("/strata/import?namespace=moved", content=whole, headers=AUTH)
    assert done.status_code == 200 and done.json()["records"] == len(memory.export().records)
    assert Memory("moved").stats()["raw"]["active"] == 20
    for body in (whole, '"/etc/hostname"', "[1]", "{"):  # a full namespace; a path is never read on the server
        refused = client.post("/strata/import?namespace=moved", content=body, headers=AUTH)
        assert refused.status_code == 400 and "\n" not in refused.json()["error"], refused.json()


def test_history_and_undo_through_http(memory: Memory, client: TestClient) -> None:
    target = memory.store.all("fact")[0]
    memory.store.delete(target.id, reason="operator check")
    history = client.get(f"/strata/history?namespace={NAMESPACE}&record_id={target.id}", headers=AUTH).json()
    assert history[0]["action"] == "delete" and history[0]["record_id"] == target.id
    undone = client.post(f"/strata/undo?namespace={NAMESPACE}", json={"change_id": history[0]["id"]}, headers=AUTH)
    assert undone.status_code == 200 and undone.json()["undoes"] == history[0]["id"]
    assert memory.get([target.id])[0].status.value == "active"


def test_the_slow_path_runs_through_http(memory: Memory, client: TestClient) -> None:
    done = client.post(f"/strata/consolidate?namespace={NAMESPACE}", json={"limit": None}, headers=AUTH)
    assert done.status_code == 200 and done.json()["turns"] == 20


def test_a_wrong_request_gets_one_line_and_changes_nothing(memory: Memory, client: TestClient) -> None:
    before = memory.stats()
    wrong = [
        ("GET", "/strata/stats", None, 400),  # no namespace
        ("GET", f"/strata/history?namespace={NAMESPACE}&limit=many", None, 400),
        ("GET", f"/strata/history?namespace={NAMESPACE}&limit=0", None, 400),
        ("POST", f"/strata/undo?namespace={NAMESPACE}", {"change_id": "latest"}, 400),
        ("POST", f"/strata/undo?namespace={NAMESPACE}", {"change_id": 999_999}, 404),
        ("POST", f"/strata/undo?namespace={NAMESPACE}", {"change": 1}, 400),  # a field that does not exist
        ("POST", f"/strata/undo?namespace={NAMESPACE}", "[1, 2]", 400),  # not an object
        ("POST", f"/strata/undo?namespace={NAMESPACE}", "{not json", 400),
        ("POST", f"/strata/consolidate?namespace={NAMESPACE}", {"limit": 0}, 400),
        ("POST", f"/strata/consolidate?namespace={NAMESPACE}", {"limit": "5"}, 400),
        ("GET", f"/strata/history?namespace={NAMESPACE}&limit=%C2%B2", None, 400),  # "²", a digit to isdigit()
        ("GET", f"/strata/graph?namespace={NAMESPACE}&person=Caroline&question=Who", None, 400),
        ("POST", f"/strata/erase?namespace={NAMESPACE}", {"ids": ["raw:D1:3"], "confirm": "yes"}, 400),  # not true
        ("POST", f"/strata/stats?namespace={NAMESPACE}", None, 405),  # the wrong method
        ("GET", f"/strata/undo?namespace={NAMESPACE}", None, 405),
        ("DELETE", f"/strata/export?namespace={NAMESPACE}", None, 405),
        ("GET", "/strata/stats?namespace=conv-62", None, 404),  # a misspelt namespace: not an empty memory
        ("GET", "/strata/export?namespace=conv-62", None, 404),  # nor a backup that looks whole
        ("POST", "/strata/consolidate?namespace=conv-62", {"limit": None}, 404),  # nor zeros consolidated
        ("GET", f"/strata/histroy?namespace={NAMESPACE}", None, 404),  # a misspelt route, as the others answer
        ("POST", f"/strata/undo/12?namespace={NAMESPACE}", None, 404),
        ("GET", "/strata", None, 404),
    ]
    for method, path, body, status in wrong:
        sent = {"json": body} if isinstance(body, dict) else {"content": body} if body else {}
        reply = client.request(method, path, headers=AUTH, **sent)
        message = reply.json()["error"]
        assert reply.status_code == status and message and "\n" not in message and "Traceback" not in message, (
            path, body, reply.status_code, message)
    assert memory.stats() == before


def test_a_full_disk_is_a_507_of_one_line_and_the_same_call_then_finishes(
    memory: Memory, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk answered 503, as a server that does not answer does; an operator (or a monitor) is told
    apart from an outage: 507 Insufficient Storage, one line saying to free space. What was stored stays, and
    the same call, once there is room, finishes (a real full disk: tests/test_cli_edges.py)."""
    whole = client.get(f"/strata/export?namespace={NAMESPACE}", headers=AUTH).text

    def no_room(*args: Any, **kwargs: Any) -> None:
        raise sqlite3.OperationalError("database or disk is full")

    with monkeypatch.context() as patch:
        patch.setattr(MemoryStore, "_write", no_room)
        for path, body in ((f"/strata/consolidate?namespace={NAMESPACE}", "{}"),
                           ("/strata/import?namespace=moved", whole)):
            full = client.post(path, content=body, headers=AUTH)
            message = full.json()["error"]
            assert full.status_code == 507 and message.startswith("the disk holding ") and "\n" not in message, (
                message)
    assert client.post("/strata/import?namespace=moved", content=whole, headers=AUTH).status_code == 200
    assert Memory("moved").stats()["raw"]["active"] == 20


class _Threads:
    """The server's threads as the SDK's in-process client reads them (a thread: its states' values, newest
    first, its runs' kwargs, newest first, and where each run's first state is, the oldest by default),
    counting the pages of states read per thread, and apart the single states looked up."""

    def __init__(self, threads: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]],
                 inputs: dict[str, list[int]] | None = None) -> None:
        self.data = threads
        self.inputs = inputs or {}
        self.pages: dict[str, int] = dict.fromkeys(threads, 0)
        self.looked_up: dict[str, int] = dict.fromkeys(threads, 0)
        self.threads = SimpleNamespace(search=self.search, get_history=self.get_history)
        self.runs = SimpleNamespace(list=self.list_runs)

    async def search(self, limit: int, offset: int, **_: Any) -> list[dict[str, Any]]:
        return [{"thread_id": t, "values": self.data[t][0][0]} for t in list(self.data)[offset:offset + limit]]

    async def get_history(self, thread_id: str, limit: int, before: Any = None, metadata: Any = None,
                          **_: Any) -> list[dict[str, Any]]:
        states = self.data[thread_id][0]
        if metadata is not None or limit == 1:  # one state looked up: a run's first, or the last
            self.looked_up[thread_id] += 1
            if metadata is None:
                return [self._state(thread_id, 0)]
            runs = range(len(self.data[thread_id][1]))  # the runs' input states, newest first, by run
            firsts = self.inputs.get(thread_id, [len(states) - 1] * len(runs))
            return [{**self._state(thread_id, at), "metadata": {"run_id": f"{thread_id}/{run}", "source": "input"}}
                    for at, run in sorted(zip(firsts, runs, strict=False))][:limit]
        start = 0 if before is None else before["configurable"]["at"] + 1
        self.pages[thread_id] += 1
        return [self._state(thread_id, n) for n in range(start, min(start + limit, len(states)))]

    def _state(self, thread_id: str, at: int) -> dict[str, Any]:
        states = self.data[thread_id][0]
        parent = {"at": at + 1} if at + 1 < len(states) or states[at].get("parent_deleted") else None
        return {"values": states[at], "checkpoint": {"at": at}, "parent_checkpoint": parent}

    async def list_runs(self, thread_id: str, limit: int = 10, offset: int = 0, **_: Any) -> list[dict[str, Any]]:
        runs = self.data[thread_id][1]
        return [{"run_id": f"{thread_id}/{n}", "kwargs": runs[n]}
                for n in range(offset, min(offset + limit, len(runs)))]


def test_an_erase_reads_only_its_namespaces_threads_a_state_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """One long ingest thread of another namespace made a one-record erase read every state of it, its
    whole history held in memory (minutes, gigabytes): a thread whose runs all named other namespaces is
    not read, and a thread's states are read a page at a time until one holds an erased record. Unless the
    runs do not account for its states: a deleted run of the namespace left what it was shown in the first
    states of the next run, of another namespace, and the erase skipped the thread. A thread saved before
    runs recorded their namespace is the namespace's when no other namespace holds the erased record;
    otherwise it is kept and named."""
    import asyncio

    import langgraph_sdk

    from strata.admin_routes import HISTORY_PAGE, server_threads_holding

    secret = {"dia_id": "D1:1", "text": "My PIN is 4242."}
    said = {("D1:1", secret["text"])}

    def states(namespace: str | None, count: int, holding: int | None = None) -> list[dict[str, Any]]:
        return [{**({"namespace": namespace} if namespace else {}), "turns": [
            secret if n == holding else {"dia_id": f"D2:{n}", "text": f"Turn {n} about tomatoes."}]}
            for n in range(count)]

    pages = 3 * HISTORY_PAGE
    carried = {"namespace": "small", "evidence": [secret], "parent_deleted": True}  # the deleted run's last state
    server = _Threads({
        "long-other": (states("big", pages), [{"context": {"namespace": "big"}}]),
        "mine": (states("small", pages, holding=0), [{"config": {"configurable": {"namespace": "small"}}}]),
        "legacy": (states(None, pages, holding=pages - 1), []),  # saved before runs recorded their namespace
        "legacy-shared": (states(None, 5, holding=1), []),  # ... and another namespace holds the same record
        "moved": (states("big", 5) + states("small", pages, holding=pages - 1),
                  [{"context": {"namespace": "big"}}, {"context": {"namespace": "small"}}]),
        "same-words": (states("big", 5, holding=2), [{"context": {"namespace": "big"}}]),  # big's own D1:1
        "run-deleted": ([*states("big", 5), carried], [{"context": {"namespace": "big"}}]),
    })
    monkeypatch.setattr(langgraph_sdk, "get_client", lambda: server)
    holders = {"legacy": {"small"}, "legacy-shared": {"small", "big"}}
    asked: list[set[Any]] = []

    def holding(pairs: set[Any]) -> set[str]:
        asked.append(pairs)
        return holders["legacy-shared" if len(asked) == 2 else "legacy"]

    found, kept = asyncio.run(server_threads_holding(said, "small", holding))
    assert found == ["mine", "legacy", "moved", "run-deleted"] and kept == ["legacy-shared"]
    assert asked == [said, said]
    assert server.pages["long-other"] == server.pages["same-words"] == 0  # another namespace's: never read
    assert server.looked_up["long-other"] == 2  # but its runs' first states (one read for all), and its last
    assert server.pages["mine"] == 1  # its first state holds the record: no more pages read
    assert asyncio.run(server_threads_holding(said, "small")) == (["mine", "moved", "run-deleted"],
                                                                   ["legacy", "legacy-shared"])


def test_an_erase_cut_midway_and_sent_again_through_http_reports_what_it_erased(
        memory: Memory, client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by audit: an erase cut midway (its records gone, its ledger not yet cleaned) and sent again through
    the route was listed first, found nothing, and answered 400 "nothing was erased", where `Memory.erase` and the
    command line finish it and return its report. The route now does as they do; another request still says what
    the finished erase was."""
    import langgraph_sdk
    from strata.memory import erasure

    monkeypatch.setattr(langgraph_sdk, "get_client", lambda: _Threads({}))
    targets = memory.erasure_plan(about="Caroline").targets

    class Stopped(Exception):
        pass

    def stop(*args: Any, **kwargs: Any) -> None:
        raise Stopped

    url = f"/strata/erase?namespace={NAMESPACE}"
    with monkeypatch.context() as cut:
        cut.setattr(erasure, "_carry_out", stop)  # stopped once its request and ids are in the ledger
        assert client.post(url, json={"about": "Caroline", "confirm": True}, headers=AUTH).status_code == 500
    again = client.post(url, json={"about": "caroline", "confirm": True}, headers=AUTH)
    assert again.status_code == 200, again.text
    assert sorted(again.json()["erased"]) == sorted(targets)
    assert not [r for r in memory.store.all("raw") if r.speaker == "Caroline"]

    melanie = next(r.id for r in memory.store.all("raw") if r.speaker == "Melanie")
    with monkeypatch.context() as cut:
        cut.setattr(erasure, "_carry_out", stop)
        assert client.post(url, json={"ids": [melanie], "confirm": True}, headers=AUTH).status_code == 500
    other = client.post(url, json={"about": "Nobody", "confirm": True}, headers=AUTH)
    assert other.status_code == 400
    assert "an erase stopped midway was finished first (erased " in other.json()["error"]
    assert memory.get([melanie]) == []


def test_every_routes_docstring_reads_as_the_servers_openapi_reads_it() -> None:
    """The LangGraph server builds its OpenAPI page from each mounted route's docstring, read as YAML: the
    misspelt-route handler's (a colon and a space, and a JSON object) failed, and the server logged a warning
    with a traceback for each of its ten route and method pairs at every start (found in `langgraph dev`'s log)."""
    from starlette.schemas import BaseSchemaGenerator

    reader = BaseSchemaGenerator()
    unread = []
    for endpoint in reader.get_endpoints(app.routes):
        try:
            reader.parse_docstring(endpoint.func)
        except Exception as error:  # what the server catches and logs
            unread.append(f"{endpoint.http_method} {endpoint.path} ({endpoint.func.__qualname__}): {error}")
    assert unread == []
