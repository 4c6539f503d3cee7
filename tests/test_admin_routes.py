"""The operator's routes (strata/admin_routes.py) in process, over an embedded memory of real LoCoMo turns.

Off unless the server has a token, refused without it, one line for every wrong
request, nothing changed by one; history, undo, records, the graph and the slow
path through HTTP as through `Memory`. The erase route needs the LangGraph server
it is mounted in (it deletes the server's threads too), so it is tested against a
real `langgraph dev` in tests/test_langgraph_server.py.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import offline_environment
from starlette.testclient import TestClient
from strata.memory.registry import close_all

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
    ]
    for method, path, body, status in wrong:
        sent = {"json": body} if isinstance(body, dict) else {"content": body} if body else {}
        reply = client.request(method, path, headers=AUTH, **sent)
        message = reply.json()["error"]
        assert reply.status_code == status and message and "\n" not in message and "Traceback" not in message, (
            path, body, reply.status_code, message)
    assert memory.stats() == before
