"""Memory on a Chroma server: `chroma run` started for real on a loopback port.

The same ingest-and-ask as the embedded case, then what a server is for: two
processes (each with its own local folder) share one memory, records on the
Chroma server and the ledger on a PostgreSQL server, and see each other's
writes; neither keeps anything in its folder. Also: the optional auth header
reaches the server, and an unreachable server is a one-line ConfigError that
says what to do. tests/test_postgres_ledger.py goes further with replicas.
"""

from __future__ import annotations

import json
import subprocess
import sys
from itertools import islice
from pathlib import Path
from typing import Any

import pytest
from servers import (
    LOOPBACK,
    REPO,
    HeaderRecordingProxy,
    PostgresServer,
    ServerProcess,
    chroma_run,
    free_port,
)
from strata.memory.chroma import MARK, collection_name, mark_of, open_client, server_timeout
from strata.memory.errors import ConfigError, UnavailableError
from strata.memory.registry import close_all
from strata.memory.store import LEDGER_MARK

from strata.api import Memory

QUESTION = "What career is Caroline keen on?"
ANSWER_TURN = "D1:11"  # "I'm keen on counseling or working in mental health ..."
TURN_COUNT = 30  # sessions 1 and 2 of conv-26: more turns than one search returns

# One process's part, run as `python -c`: ingest the turns, or ask and print the evidence ids.
WORKER = r'''
import json, sys
from strata.api import Memory
role, namespace, turns_file, data_dir = sys.argv[1:5]
memory = Memory(namespace, data_dir=data_dir)  # the Chroma server comes from STRATA_CHROMA_HOST/PORT
if role == "writer":
    report = memory.add(json.load(open(turns_file)))
    print("RESULT " + json.dumps({"stored": len(report.stored_ids)}))
else:
    answer = memory.ask(sys.argv[5])
    print("RESULT " + json.dumps({"evidence": answer.evidence_ids(), "answer": answer.answer}))
'''


@pytest.fixture
def turns(locomo_dir: Path) -> list[dict[str, Any]]:
    from strata.conversations import load_turns

    loaded = islice(load_turns(locomo_dir / "conv-26.json").turns(), TURN_COUNT)
    return [turn.model_dump(mode="json", exclude_none=True) for turn in loaded]


def server_collections(server: ServerProcess) -> set[str]:
    import chromadb
    from chromadb.config import Settings

    client = chromadb.HttpClient(host=LOOPBACK, port=server.port, settings=Settings(anonymized_telemetry=False))
    return {collection.name for collection in client.list_collections()}


@pytest.mark.slow
def test_ingest_and_ask_against_a_chroma_server(chroma: ServerProcess, tmp_path: Path,
                                                turns: list[dict[str, Any]]) -> None:
    memory = Memory("server-ns", chroma_host=LOOPBACK, chroma_port=chroma.port, data_dir=tmp_path / "ledger")
    report = memory.add(turns)
    assert len(report.stored_ids) >= TURN_COUNT
    answer = memory.ask(QUESTION)
    assert ANSWER_TURN in answer.evidence_ids(), chroma.failure(f"evidence {answer.evidence_ids()}")
    assert answer.answer
    # The records live on the server, not in an embedded folder next to the ledger.
    assert collection_name("server-ns", "raw") in server_collections(chroma)
    assert not (tmp_path / "ledger" / "chroma").exists()


@pytest.mark.slow
def test_two_processes_sharing_the_server_see_each_others_writes(
    chroma: ServerProcess, postgres: PostgresServer, tmp_path: Path, turns: list[dict[str, Any]],
    offline_env: dict[str, str]
) -> None:
    turns_file = tmp_path / "turns.json"
    turns_file.write_text(json.dumps(turns))
    ledger_url = postgres.create_database("two_processes")
    env = {**offline_env, "STRATA_CHROMA_HOST": LOOPBACK, "STRATA_CHROMA_PORT": str(chroma.port),
           "STRATA_LEDGER_URL": ledger_url}

    def worker(*args: str) -> dict[str, Any]:
        done = subprocess.run([sys.executable, "-c", WORKER, *args], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=240)
        assert done.returncode == 0, done.stderr[-3000:]
        return dict(json.loads(done.stdout.split("RESULT ", 1)[1]))

    asked_first = worker("reader", "shared-ns", str(turns_file), str(tmp_path / "reader"), QUESTION)
    assert ANSWER_TURN not in asked_first["evidence"]  # nothing is stored yet
    written = worker("writer", "shared-ns", str(turns_file), str(tmp_path / "writer"))
    assert written["stored"] >= TURN_COUNT
    asked = worker("reader", "shared-ns", str(turns_file), str(tmp_path / "reader"), QUESTION)
    assert ANSWER_TURN in asked["evidence"], chroma.failure(f"the reader did not see the writer's turns: {asked}")
    # Nothing is local: records on the Chroma server, links and history in the shared ledger.
    for folder in ("writer", "reader"):
        assert not (tmp_path / folder / "ledger.sqlite3").exists() and not (tmp_path / folder / "chroma").exists()
    shared = Memory("shared-ns", chroma_host=LOOPBACK, chroma_port=chroma.port, ledger_url=ledger_url,
                    data_dir=tmp_path / "check")
    assert shared.stats()["links"] and shared.store.working()


@pytest.mark.slow
def test_auth_header_reaches_the_chroma_server(chroma: ServerProcess, tmp_path: Path,
                                               turns: list[dict[str, Any]]) -> None:
    with HeaderRecordingProxy(chroma.url) as proxy:
        memory = Memory("auth-ns", chroma_host=LOOPBACK, chroma_port=proxy.port, data_dir=tmp_path / "ledger",
                        chroma_auth_header="X-Chroma-Token: s3cret-token")
        memory.add(turns[:4])
        answer = memory.ask("Where did Caroline go yesterday?")
    assert "D1:3" in answer.evidence_ids()
    assert proxy.headers, "no request went through the proxy"
    assert {headers.get("x-chroma-token") for headers in proxy.headers} == {"s3cret-token"}


def test_unreachable_chroma_server_is_a_one_line_config_error(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    closed = free_port()
    memory = Memory("ns", chroma_host=LOOPBACK, chroma_port=closed, data_dir=tmp_path / "mem")
    with pytest.raises(ConfigError) as raised:
        memory.add("I moved to Lisbon last spring.")
    message = str(raised.value)
    assert "\n" not in message and f"{LOOPBACK}:{closed}" in message and "chroma run" in message
    # The same from the environment, as a server or Studio would be configured.
    monkeypatch.setenv("STRATA_CHROMA_HOST", LOOPBACK)
    monkeypatch.setenv("STRATA_CHROMA_PORT", str(closed))
    with pytest.raises(ConfigError, match="STRATA_CHROMA_HOST"):
        Memory("ns", data_dir=tmp_path / "mem").ask("Where do I live?")
    assert not (tmp_path / "mem" / "chroma").exists()  # never fell back to an embedded store


def test_a_silent_or_refusing_chroma_server_is_one_line_within_the_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A port that accepts connections and never answers (a frozen server) was waited on for ever, in
    Chroma's client; a server that refuses the credentials was told as unreachable, with no word of the
    auth header."""
    import http.server
    import socket
    import threading
    import time

    silent = socket.socket()
    silent.bind((LOOPBACK, 0))
    silent.listen(8)

    class Refusing(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(401)
            self.end_headers()
            self.wfile.write(b'{"error": "Unauthorized"}')

        def log_message(self, *args: object) -> None:
            pass

    refusing = http.server.HTTPServer((LOOPBACK, 0), Refusing)
    threading.Thread(target=refusing.serve_forever, daemon=True).start()
    monkeypatch.setenv("STRATA_CHROMA_TIMEOUT", "2")
    try:
        started = time.monotonic()
        with pytest.raises(ConfigError) as raised:
            Memory("ns", chroma_host=LOOPBACK, chroma_port=silent.getsockname()[1], data_dir=tmp_path / "a").stats()
        assert time.monotonic() - started < 60 and "ReadTimeout" in str(raised.value) and "\n" not in str(raised.value)
        with pytest.raises(ConfigError, match=r"refused this client .*set chroma_auth_header"):
            Memory("ns", chroma_host=LOOPBACK, chroma_port=refusing.server_port, data_dir=tmp_path / "b").stats()
    finally:
        refusing.shutdown()
        silent.close()


@pytest.mark.slow
def test_a_chroma_server_that_stops_mid_run_is_one_line_and_the_retry_finishes(
    tmp_path: Path, turns: list[dict[str, Any]]
) -> None:
    """httpx's ConnectError came out of every call, traceback and all; the command line printed 113 lines."""
    with chroma_run(tmp_path / "data", tmp_path / "chroma.log") as server:
        memory = Memory("stops", chroma_host=LOOPBACK, chroma_port=server.port, data_dir=tmp_path / "ledger")
        memory.add(turns[:10])
        session = open_client(memory.context("ask").store_settings())._server._session  # every request bounded
        assert session.timeout.read == server_timeout() and session.timeout.connect <= server_timeout()
        as_url = Memory("stops", chroma_host=f"http://{LOOPBACK}:{server.port}", data_dir=tmp_path / "ledger")
        assert len(as_url.store.all("raw")) == 10  # a host given as a URL, as Chroma's own client takes it
        server.stop()
        with pytest.raises(UnavailableError) as error:
            memory.add(turns[10:20])
        message = str(error.value)
        assert "\n" not in message and "Chroma server stopped answering" in message and "repeat the call" in message
        server.start(60)
        memory.add(turns[10:20])  # the retry: what the failed call wrote ahead is derived, nothing twice
        raw = memory.store.all("raw")
        assert sorted(r.dialogue_id for r in raw) == sorted(t["dia_id"] for t in turns[:20])
        assert memory.store.ledger.get_state("stops", "pending_derive") == []


@pytest.mark.slow
def test_reads_while_the_chroma_server_is_down_say_so_and_read_everything_once_it_is_back(tmp_path: Path) -> None:
    """A read of a kind not yet loaded asked Chroma whether the collection exists: a server that did not answer
    counted as "none", so a question said "Not in memory." and the kind stayed empty after the server came
    back (a review's reproduction). A read that fails reads again next time."""
    with chroma_run(tmp_path / "data", tmp_path / "chroma.log") as server:
        memory = Memory("blip", chroma_host=LOOPBACK, chroma_port=server.port, data_dir=tmp_path / "ledger")
        memory.add([{"speaker": "Ann", "text": "I live in Zorbatown.", "dia_id": "D1:1"}])
        memory.store.close()  # as the registry does with an idle namespace: its mirrors let go
        server.stop()
        for read in (memory.export, lambda: Memory("new", chroma_host=LOOPBACK, chroma_port=server.port,
                                                   data_dir=tmp_path / "ledger").ask("Where does Ann live?")):
            with pytest.raises(UnavailableError, match="Chroma server stopped answering"):
                read()
        server.start(60)
        assert [r.text for r in memory.export().records if r.kind == "fact"] == ["Ann lives in Zorbatown."]
        assert memory.stats()["fact"]["active"] == 1


def on_server(chroma: ServerProcess, folder: Path, namespace: str) -> Memory:
    """A memory on the Chroma server with the SQLite ledger of its own folder (no ledger_url)."""
    return Memory(namespace, chroma_host=LOOPBACK, chroma_port=chroma.port, data_dir=folder)


def namespace_collections(chroma: ServerProcess, namespace: str) -> list[Any]:
    import chromadb
    from chromadb.config import Settings

    client = chromadb.HttpClient(host=LOOPBACK, port=chroma.port, settings=Settings(anonymized_telemetry=False))
    return [c for c in client.list_collections() if (c.metadata or {}).get("namespace") == namespace]


def said(count: int, who: str = "Ann") -> list[dict[str, str]]:
    return [{"speaker": who, "text": f"{who} visited the town of Zorba number {n} today."} for n in range(count)]


def refused(call: Any, chroma: ServerProcess, namespace: str) -> None:
    with pytest.raises(ConfigError) as error:
        call()
    message = str(error.value)
    assert "\n" not in message and repr(namespace) in message and f"{LOOPBACK}:{chroma.port}" in message
    assert "give every replica the same ledger_url (PostgreSQL" in message


@pytest.mark.slow
def test_processes_sharing_a_server_but_not_a_ledger_are_refused_in_one_line(chroma: ServerProcess,
                                                                            tmp_path: Path) -> None:
    """Found by audit: two processes on one Chroma server without ledger_url each kept a SQLite ledger, handed
    out the same turn ids (T1, T2, ...) for one namespace and silently overwrote each other's turns (40
    acknowledged, 20 kept). The namespace's collections now carry the mark of the ledger that writes them."""
    first, second = on_server(chroma, tmp_path / "a", "unshared"), on_server(chroma, tmp_path / "b", "unshared")
    stored = first.add(said(3)).stored_ids
    assert stored and {mark_of(c) for c in namespace_collections(chroma, "unshared")} == {
        first.store.state(LEDGER_MARK)}
    for call in (lambda: second.add(said(3, "Bo")), lambda: second.get(stored), lambda: second.ask("Where was Ann?")):
        refused(call, chroma, "unshared")
    turns = [r.text for r in first.get(stored) if r.kind == "raw"]
    assert turns == [t["text"] for t in said(3)]  # nothing overwritten
    assert first.add(said(1, "Cy")).stored_ids  # the namespace's own ledger writes on
    refused(second.drop, chroma, "unshared")  # found by review: its drop deleted the first one's collections
    assert first.get(stored)
    from strata.langgraph_store import StrataStore

    apart = on_server(chroma, tmp_path / "b", "apart")  # the second app's own namespace
    apart.add(said(1, "Bo"))
    store = StrataStore(data_dir=str(tmp_path / "b"), chroma_host=LOOPBACK, chroma_port=chroma.port)
    try:  # another ledger's namespace on the server is not listed (opening it was refused, so listing failed)
        assert ("unshared",) not in store.list_namespaces() and ("apart",) in store.list_namespaces()
        found = store.search((), query="visited the town of Zorba")
        assert found and {item.namespace for item in found} == {("apart",)}
    finally:
        store.close()


@pytest.mark.slow
def test_a_server_namespace_written_before_marks_is_adopted_by_its_own_ledger_only(chroma: ServerProcess,
                                                                                   tmp_path: Path) -> None:
    """Collections of an earlier version carry no mark: the ledger that wrote them gives them its own; a ledger
    that never wrote the namespace is refused rather than taking it over (it would hand out the same ids)."""
    def unmarked() -> None:  # as an earlier version left them
        for collection in namespace_collections(chroma, "earlier"):
            collection.modify(metadata={"namespace": "earlier", "kind": collection.metadata["kind"]})

    stored = on_server(chroma, tmp_path / "a", "earlier").add(said(2)).stored_ids
    unmarked()
    close_all()
    again = on_server(chroma, tmp_path / "a", "earlier")
    assert len(again.get(stored)) == len(stored) and again.add(said(1, "Bo")).stored_ids
    collections = namespace_collections(chroma, "earlier")
    assert {mark_of(c) for c in collections} == {again.store.state(LEDGER_MARK)} and None not in {
        mark_of(c) for c in collections}
    assert all(set(c.metadata) == {"namespace", "kind", MARK} for c in collections)
    unmarked()
    close_all()
    refused(lambda: on_server(chroma, tmp_path / "b", "earlier").get(stored), chroma, "earlier")


@pytest.mark.slow
def test_a_marked_namespace_is_erased_whole_and_dropped_with_its_mark(chroma: ServerProcess, tmp_path: Path) -> None:
    """An erase of every record keeps the namespace (and its mark) writable; a drop takes the mark with the
    namespace, so it starts afresh, through whichever ledger writes it next."""
    first = on_server(chroma, tmp_path / "a", "dropped")
    stored = first.add(said(3)).stored_ids
    everything = [r.id for kind in ("raw", "fact", "episode", "persona") for r in first.store.all(kind)]
    assert set(first.erase(everything).erased) >= set(stored) and first.get(stored) == []
    assert first.add(said(2, "Bo")).stored_ids
    mark = first.store.state(LEDGER_MARK)
    assert mark and {mark_of(c) for c in namespace_collections(chroma, "dropped")} == {mark}
    first.drop()
    assert first.store.state(LEDGER_MARK) is None and not namespace_collections(chroma, "dropped")
    second = on_server(chroma, tmp_path / "b", "dropped")
    assert second.add(said(1, "Cy")).stored_ids  # a new namespace, through this ledger now
    refused(lambda: first.get(stored), chroma, "dropped")


@pytest.mark.slow
def test_one_data_folder_opened_with_and_without_chroma_host_keeps_both_memories(chroma: ServerProcess,
                                                                                  tmp_path: Path) -> None:
    """Found by audit: the SQLite ledger lives in data_dir whichever Chroma holds the records, so a
    STRATA_CHROMA_HOST set (or unset) by mistake opened the ledger beside the wrong Chroma; the error advised a
    drop, and the drop deleted the ledger's half of the intact memory (its links, history and working memory;
    the other way round, its mark too, which left the server memory unopenable). The ledger records where the
    namespace was written: the error names it and how to open it, and a drop is refused in one line."""
    from strata.memory.store import MemoryStore

    from strata import StrataError
    from strata.cli import main

    def kept(memory: Memory) -> dict[str, Any]:
        counts = memory.stats()
        return {"raw": counts["raw"]["active"], "links": counts["links"], "working": counts["working"]}

    embedded_folder, server_folder = tmp_path / "embedded", tmp_path / "server"
    embedded = Memory("chat-e", data_dir=embedded_folder)
    embedded.add(said(2))
    served = on_server(chroma, server_folder, "chat-s")
    served.add(said(2, "Bo"))
    before = {"embedded": kept(embedded), "server": kept(served)}
    assert before["embedded"]["links"] and before["server"]["links"]
    wrong = {"embedded": on_server(chroma, embedded_folder, "chat-e"),
             "server": Memory("chat-s", data_dir=server_folder)}
    for name, memory in wrong.items():
        right = ("leave chroma_host unset" if name == "embedded" else f"set chroma_host to {LOOPBACK} and "
                 f"chroma_port to {chroma.port}")
        for call in (memory.stats, lambda m=memory: m.ask("Where was Ann?"), lambda m=memory: m.add(said(1, "Cy"))):
            with pytest.raises(StrataError) as error:
                call()
            message = str(error.value)
            assert "\n" not in message and "was written through" in message and right in message
            assert "drop" not in message.lower()  # never advised while the records are elsewhere
        with pytest.raises(StrataError) as error:
            memory.drop()
        assert "\n" not in str(error.value) and "records_elsewhere=True" in str(error.value)
        with pytest.raises(StrataError):
            memory.store.drop()  # the store's own drop refuses too
        assert MemoryStore.drop_refusal(memory.store) is not None
    folder_args = {"embedded": ["--data-dir", str(embedded_folder), "--chroma-host", LOOPBACK, "--chroma-port",
                                str(chroma.port)],
                   "server": ["--data-dir", str(server_folder)]}
    for name, args in folder_args.items():
        for command in (["drop"], ["drop", "--yes"]):  # the listing counted 0 records and N links of the other
            assert main([*args, "--namespace", f"chat-{name[0]}", *command]) == 2
    close_all()
    after = {"embedded": kept(Memory("chat-e", data_dir=embedded_folder)),
             "server": kept(on_server(chroma, server_folder, "chat-s"))}
    assert after == before
    # said explicitly, the ledger's half goes (the records taken for lost), and the server keeps the records
    held = sum(c.count() for c in namespace_collections(chroma, "chat-s"))
    assert main([*folder_args["server"], "--namespace", "chat-s", "drop", "--yes", "--records-elsewhere"]) == 0
    close_all()
    ledger = Memory("chat-s", data_dir=server_folder).store.ledger
    assert ledger.count_links("chat-s") == {}
    assert sum(c.count() for c in namespace_collections(chroma, "chat-s")) == held
