"""What a caller of the Python API sends: wrong types, wrong settings, unusable folders, bad namespaces.

Each case must end in the project's own error (a `StrataError`) whose message is
one line, never a raw `TypeError` or `ValidationError`, and must leave what is
stored as it was. A read-only memory folder can still be read.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from strata.graph import build_graph
from strata.graph.context import Context
from strata.memory.errors import ConfigError, InputError, StrataError
from strata.memory.namespaces import check_namespace
from strata.memory.store import MemoryStore

from strata.api import Memory
from strata.checkpoint import sqlite_checkpointer
from strata.cli import main

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def memory(tmp_path_factory: pytest.TempPathFactory) -> Memory:
    """One small stored conversation the cases below must not disturb."""
    memory = Memory("ann", data_dir=str(tmp_path_factory.mktemp("api") / "mem"))
    memory.add([
        {"speaker": "Ann", "text": "I live in Boston.", "dia_id": "D1:1", "time": "2023-05-01T10:00:00"},
        {"speaker": "Bo", "text": "I adopted a puppy named Rex.", "dia_id": "D1:2", "time": "2023-05-01T10:01:00"},
    ])
    return memory


def snapshot(memory: Memory) -> tuple[Any, ...]:
    store = memory.store
    records = tuple(sorted((r.id, r.text, r.status.value) for k in ("raw", "fact") for r in store.all(k, True)))
    return records, len(memory.history(limit=1000)), memory.stats()["links"]


def one_line(error: pytest.ExceptionInfo[StrataError]) -> str:
    message = str(error.value)
    assert isinstance(error.value, StrataError)
    assert message and len(message.splitlines()) == 1, message
    return message


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (lambda m: m.add(None), "not NoneType"),
        (lambda m: m.add(123), "not int"),
        (lambda m: m.add([None]), "turn 1 is a NoneType"),
        (lambda m: m.add({1: "x"}), "turn 1"),
        (lambda m: m.add([{"speaker": "Ann"}]), "turn 1: text: missing: give each turn a 'text'"),
        (lambda m: m.add(b"\xff\xfe"), "not UTF-8"),
        (lambda m: m.add([{"speaker": "Ann", "text": b"\xff\xfe"}]), "turn 1: text is bytes that are not UTF-8"),
        (lambda m: m.add("hi", speaker=None), "speaker"),
        (lambda m: m.chat(None), "not NoneType"),
        (lambda m: m.chat(["a", "b"]), "not list"),
        (lambda m: m.ask(None), "must be text"),
        (lambda m: m.ask(42), "must be text"),
        (lambda m: m.retrieve(b"\x80"), "not UTF-8"),
        (lambda m: m.history(limit="many"), "limit: Input should be a valid integer (got 'many')"),
        (lambda m: m.history(limit=0), "limit: Input should be greater than or equal to 1 (got 0)"),
        (lambda m: m.history(record_id=5), "record_id"),
        (lambda m: m.undo("last"), "change_id"),
        (lambda m: m.undo(10**6), "change"),
        (lambda m: m.get("raw:D1:1"), "list of record ids"),
        (lambda m: m.get([1]), "ids"),
        (lambda m: m.erase({"raw:D1:1": False}), "takes a list of record ids, not dict"),  # not its keys
        (lambda m: m.ask("Where\ud800 does Ann live?"), "the question holds '\\ud800' at character 6"),
        (lambda m: m.retrieve("x\udcff"), "not text (undecodable bytes?)"),  # bytes of a command line
        (lambda m: m.history("\ud800"), "record_id holds"),
        (lambda m: m.history(""), "record_id: names no record: give a record's id (e.g. fact:D1:3:0), or None"),
        (lambda m: m.history(record_id=" "), "record_id: names no record"),  # an unset field: not every change
        (lambda m: m.history("%%%"), "'%%%' is not a memory id: ids start with raw:"),  # as erase says it
        (lambda m: m.history("fact:D9:9:0"), "no record 'fact:D9:9:0' in namespace 'ann' (never stored, or erased)"),
        (lambda m: m.history(limit=2**63), "less than or equal to 9223372036854775807"),
        (lambda m: m.undo(2**63), "less than or equal to 9223372036854775807"),
        (lambda m: m.graph(person=5), "the person must be text"),
        (lambda m: m.export(about=" "), "about: names nobody: give a participant's name"),
        (lambda m: m.erase(about=""), "about: names nobody"),
        (lambda m: m.add("hi", on_turn=5), "on_turn must be a function"),
        (lambda m: m.add("hi", end_session="x"), "end_session must be True or False"),
        (lambda m: m.ask("Where does Ann live?", refresh="yes"), "refresh must be True or False"),
        (lambda m: m.add({"speaker": "Ann", "text": "hi", "time": "0001-01-01T00:00:00+05:00"}), "time"),
        (lambda m: m.import_from("x" * 300), "cannot be a file's path"),
        (lambda m: m.import_from(" "), "the path of the memory file is empty"),
        (lambda m: m.import_from(b"{not json"), "the export is not JSON"),
        (lambda m: m.import_from(b"\xff{}"), "the export is bytes that are not UTF-8"),
        (lambda m: m.add({"speaker": "Ann", "text": "\u200b\u200b"}), "turn 1: text: text is empty"),
        # found by audit: no character a reader can see is no words, and no question (it retrieved everything)
        (lambda m: m.add({"speaker": "Ann", "text": "\u034f"}), "turn 1: text: text is empty"),
        (lambda m: m.add({"speaker": "Ann", "text": "\u200b\u2060\ufeff\u00ad\u034f\u3164\ufe0f"}), "text is empty"),
        (lambda m: m.chat(" \u034f\u0301 ", speaker="Ann"), "text is empty"),
        (lambda m: m.ask("\u200b"), "the question is empty"),
        (lambda m: m.retrieve("\u200b\u2060\ufeff\u00ad\u034f"), "the question is empty"),
        (lambda m: build_graph().invoke({"question": "\u200b "}, context=m.context("retrieve")),
         "retrieve needs a question"),
        # an id that holds other words: the stored turn is not replaced (no history could undo it)
        (lambda m: m.add({"speaker": "Ann", "text": "I live in Denver now.", "dia_id": "D1:1"}),
         "turn D1:1 is already stored with other words ('I live in Boston.')"),
        (lambda m: m.add([{"speaker": "Ann", "text": "A brand new turn.", "dia_id": "D9:1"},
                          {"speaker": "Bo", "text": "My puppy is called Max.", "dia_id": "D1:2"}]),
         "turn D1:2 is already stored"),  # refused whole: D9:1 is not stored either
    ],
)
def test_wrong_arguments_are_one_line_errors_and_change_nothing(memory: Memory, call: Any, words: str) -> None:
    before = snapshot(memory)
    with pytest.raises(StrataError) as error:
        call(memory)
    assert words in one_line(error)
    assert snapshot(memory) == before


def test_every_public_call_of_memory_says_what_it_does() -> None:
    """`help(Memory)` is where a Python user reads the API: __init__, get and stats had no docstring, so the
    settings a Memory takes and what stats returns were nowhere in it."""
    import inspect

    bare = [name for name, member in vars(Memory).items()
            if (name == "__init__" or not name.startswith("_"))
            and callable(target := member.fget if isinstance(member, property) else member)
            and not inspect.getdoc(target)]
    assert bare == []
    assert "Context" in (inspect.getdoc(Memory.__init__) or "")  # where every setting is described


def test_an_owner_holding_a_nul_is_refused_and_an_export_as_bytes_is_imported(memory: Memory, tmp_path: Path) -> None:
    """Audit (API, minor): `owner="a\\x00"` was accepted though every other name refuses a NUL, and the bytes of
    an export (a file read in binary mode) were "not a JSON object"."""
    with pytest.raises(ConfigError) as error:
        Memory("ann", data_dir=str(tmp_path / "mem"), owner="a\x00")
    assert one_line(error) == "setting owner holds a NUL character (\\x00) at character 2: remove it"
    copy = Memory("copy", data_dir=str(tmp_path / "mem"))
    copy.import_from(memory.export().model_dump_json().encode("utf-8"))
    assert copy.store.get_one("raw:D1:1").text == "I live in Boston."


def test_a_store_handle_kept_past_close_all_says_so_and_the_memory_reopens(tmp_path: Path) -> None:
    from strata.memory.registry import close_all

    memory = Memory("ann", data_dir=str(tmp_path / "mem"))
    memory.add("I live in Boston.", speaker="Ann")
    store = memory.store
    close_all()
    with pytest.raises(ConfigError) as error:
        store.stats()
    assert "close_all" in one_line(error)
    assert memory.stats()["raw"]["active"] == 1  # the Memory itself reopens


def test_switches_take_numpy_bools_and_0_or_1(tmp_path: Path) -> None:
    import numpy as np

    memory = Memory("ann", data_dir=str(tmp_path / "mem"))
    memory.add("I live in Boston.", speaker="Ann", end_session=np.True_)
    memory.add("I adopted a cat.", speaker="Ann", end_session=1)
    assert memory.ask("Where does Ann live?", refresh=np.False_).answer


def test_one_folder_named_two_ways_is_one_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A relative path, `..` or a link to the same folder must not open a second Chroma over its files."""
    (tmp_path / "data").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "data")
    monkeypatch.chdir(tmp_path / "data")
    names = [str(tmp_path / "data"), "../data", ".", str(tmp_path / "link")]
    for n, name in enumerate(names):
        Memory("alias", data_dir=name).add([{"speaker": "Ann", "text": f"Fact number {n} about Ann."}])
    memory = Memory("alias", data_dir=names[0])
    assert memory.stats()["raw"]["active"] == len(names)
    assert memory.retrieve("Fact number 2 about Ann?").evidence


def test_an_empty_chroma_host_is_embedded_chroma(tmp_path: Path) -> None:
    from strata.memory.settings import StoreSettings

    settings = StoreSettings(data_dir=str(tmp_path), chroma_host="", ledger_url="  ")
    assert settings.chroma_host is None and settings.ledger_url is None


def test_a_server_pins_where_the_memory_lives(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STRATA_PIN_STORAGE", "true")
    monkeypatch.setenv("STRATA_DATA_DIR", str(tmp_path / "server"))
    assert Context(namespace="ann", data_dir=str(tmp_path / "server") + "/").data_dir  # the same folder
    for setting in ({"data_dir": str(tmp_path / "elsewhere")}, {"ledger_url": "postgresql://me@db.example/x"},
                    {"chroma_host": "chroma.example"}):
        with pytest.raises(ConfigError) as error:
            Context(namespace="ann", **setting)
        assert "STRATA_PIN_STORAGE" in one_line(error)
    assert not (tmp_path / "elsewhere").exists()
    monkeypatch.setenv("STRATA_PIN_STORAGE", "maybe")
    with pytest.raises(ConfigError) as error:
        Context(namespace="ann")
    assert "STRATA_PIN_STORAGE='maybe': set it to true or false" in one_line(error)


def test_a_server_s_runs_name_their_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server drops a context key it does not know: {"namepsace": "ann"} arrives as no namespace, and
    with STRATA_REQUIRE_NAMESPACE (langgraph.json) it is refused rather than written to 'default'."""
    assert Context(mode="ingest").namespace == "default"  # a Python app's own graph: the default stands
    monkeypatch.setenv("STRATA_REQUIRE_NAMESPACE", "true")
    for unnamed in ({"mode": "ingest"}, {"namespace": "default", "mode": "chat"}):
        with pytest.raises(InputError) as error:
            Context(**unnamed)
        assert "this server's runs name their memory: set the context's namespace" in one_line(error)
    assert Context(namespace="ann").namespace == "ann"
    from strata.langgraph_store import StrataStore  # a store's settings name no memory: it opens as before

    StrataStore(data_dir=str(tmp_path)).put(("ann", "notes"), "k", {"text": "hi"})
    monkeypatch.setenv("STRATA_NAMESPACE", "team")  # a deployment of one memory names it once
    assert Context(mode="ask").namespace == "team"
    monkeypatch.setenv("STRATA_REQUIRE_NAMESPACE", "sure")
    with pytest.raises(ConfigError) as error:
        Context(namespace="ann")
    assert "STRATA_REQUIRE_NAMESPACE='sure': set it to true or false" in one_line(error)


@pytest.mark.parametrize(("payload", "mode", "says"), [
    ({"turns": 5}, "ingest", "turns must be a list of turns, not int"),
    ({"turns": True}, "chat", "turns must be a list of turns, not bool"),
    ({"question": 5}, "ask", "the question must be text, not int"),
    ({"question": None}, "retrieve", "the question must be text, not NoneType"),
])
def test_server_shaped_input_of_the_wrong_type_is_one_line(
    tmp_path: Path, payload: dict[str, Any], mode: str, says: str
) -> None:
    """The server hands the graph its JSON input unchecked against the state's types."""
    with pytest.raises(InputError) as error:
        build_graph().invoke(payload, context=Context(namespace="ann", mode=mode, data_dir=str(tmp_path)))
    assert says in one_line(error)


def test_a_read_given_turns_is_refused_in_one_line_not_dropped(tmp_path: Path) -> None:
    """Studio's default mode is ask: turns sent to a read (ask, retrieve), with a question or not, were dropped
    in silence, the last one answered as the question, and the caller thought them stored. A stopped run's
    turns left on the thread are not this run's: a question after it is answered."""
    memory = Memory("ann", data_dir=str(tmp_path))
    memory.add([{"speaker": "Ann", "text": "I keep a pet iguana named Iggy.", "dia_id": "D1:1"}])
    turn = {"speaker": "Zed", "text": "What is the name of Ann's iguana?"}
    for mode, payload in (("ask", {"turns": [turn]}), ("retrieve", {"turns": [turn]}), ("ask", {"turns": turn["text"]}),
                          ("ask", {"turns": [turn], "question": turn["text"]})):
        with pytest.raises(InputError) as error:
            build_graph().invoke(payload, context=Context(namespace="ann", mode=mode, data_dir=str(tmp_path)))
        assert f"mode '{mode}' answers a question and stores nothing" in one_line(error)
        assert "send the question alone" in one_line(error) and "mode 'ingest' or 'chat'" in one_line(error)
    assert memory.stats()["raw"]["active"] == 1
    out = build_graph().invoke({"question": turn["text"]}, context=Context(namespace="ann", data_dir=str(tmp_path)))
    assert "Iggy" in out["answer"]


def test_a_graph_run_with_a_context_or_question_it_cannot_use_is_one_line(tmp_path: Path) -> None:
    """The compiled graph in an app: a missing or wrong context, a misspelt setting in a context dict, a
    question that is not text (a lone surrogate from undecodable bytes) reached an AttributeError, a
    TypeError or the tokenizer's TypeError."""
    memory = Memory("ann", data_dir=str(tmp_path))
    memory.add([{"speaker": "Ann", "text": "I moved to Denver last week.", "dia_id": "D1:1"}])
    runs = [({"question": "Where?"}, None, "a run needs its context, a strata Context, not NoneType"),
            ({"question": "Where?"}, "ann", "not str"),
            ({"question": "Where?"}, {"namespace": "ann", "data_dir": str(tmp_path), "k_rr": 3},
             "unknown setting(s) 'k_rr'"),
            ({"question": "Where?"}, {"namespace": "ann", "data_dir": str(tmp_path), "_given": ["model"]},
             "unknown setting(s) '_given'"),
            ({"question": "Where does Ann live \ud800?"}, Context(namespace="ann", data_dir=str(tmp_path)),
             "the question holds '\\ud800' at character 21")]
    for payload, context, says in runs:
        with pytest.raises(InputError) as error:
            build_graph().invoke(payload, context=context)
        assert says in one_line(error)
    assert [r.text for r in memory.store.all("raw")] == ["I moved to Denver last week."]


@pytest.mark.parametrize(("payload", "config", "says"), [
    (None, None, "the graph got no input (None resumes a run stopped on a thread, and none was): give a dict: "
     "{'question': '...'} to ask or retrieve, {'turns': [{'speaker': 'Ann', 'text': '...'}]} to ingest or chat"),
    ("hello", None, "the graph's input is str, not a state: give a dict"),
    (["Where does Ann live?"], None, "the graph's input is list, not a state"),
    (5, None, "the graph's input is int, not a state"),
    ({"question": "Where?"}, {"configurable": {"namespace": "bob"}},
     "config['configurable'] sets namespace to 'bob' and the run's context to 'ann': a run reads its context only, "
     "so give namespace there and leave it out of configurable"),
    ({"question": "Where?"}, {"configurable": {"k_r": 5, "thread_id": "t"}}, "sets k_r to 5 and the run's context "
     "to 2"),
])
def test_graph_input_that_is_no_state_or_settings_given_twice_are_one_line(
    tmp_path: Path, payload: Any, config: Any, says: str
) -> None:
    """Found by audit: `invoke(None)` raised LangGraph's EmptyInputError and `invoke("hello")` its
    InvalidUpdateError with a docs link; a namespace given in configurable beside a context was dropped in
    silence (the run read 'ann', the caller meant 'bob'). Settings that agree pass, as a server mirrors them."""
    Memory("ann", data_dir=str(tmp_path)).add([{"speaker": "Ann", "text": "I moved to Denver.", "dia_id": "D1:1"}])
    context = {"namespace": "ann", "data_dir": str(tmp_path)}
    for run in (lambda: build_graph().invoke(payload, config, context=context),
                lambda: asyncio.run(build_graph().ainvoke(payload, config, context=Context(**context)))):
        with pytest.raises(InputError) as error:
            run()
        assert says in one_line(error)
    agreeing = {"configurable": {"namespace": "ann", "k_r": "2", "thread_id": "t"}}
    assert "Denver" in build_graph().invoke({"question": "Where does Ann live?"}, agreeing, context=context)["answer"]


def test_a_text_or_a_dict_as_turns_is_one_turn(tmp_path: Path) -> None:
    for turns in ("I moved to Denver last week.", {"speaker": "Ann", "text": "I adopted a cat called Miso."}):
        build_graph().invoke({"turns": turns}, context=Context(namespace="ann", mode="ingest", data_dir=str(tmp_path)))
    texts = sorted(r.text for r in Memory("ann", data_dir=str(tmp_path)).store.all("raw"))
    assert texts == ["I adopted a cat called Miso.", "I moved to Denver last week."]  # not "I", " ", "m", ...


def test_a_nul_in_a_turn_is_refused_before_anything_is_written(memory: Memory) -> None:
    """PostgreSQL cannot hold a NUL in text: on it a turn with one was stored raw and then failed with a
    traceback before its facts, history and working row, and never derived; SQLite took it. Both now refuse it."""
    from strata.tools import memory_tools

    before = memory.stats()
    for call, says in ((lambda: memory.add([{"speaker": "Ann", "text": "I live\x00 in Denver."}]),
                        "turn 1: text: holds a NUL character (\\x00) at character 7: remove it"),
                       (lambda: memory.add([{"speaker": "A\x00nn", "text": "hi"}]), "turn 1: speaker: holds a NUL"),
                       (lambda: memory.chat("I live\x00 in Denver.", speaker="Ann"), "holds a NUL character"),
                       (lambda: memory.ask("Where\x00 does Ann live?"), "the question holds a NUL character")):
        with pytest.raises(InputError) as error:
            call()
        assert says in one_line(error)
    remember = next(t for t in memory_tools(memory, speaker="Ann") if t.name == "remember")
    assert "holds a NUL character" in remember.invoke({"text": "my code is 47\x0011"})  # told to the model
    assert memory.stats() == before


def test_bytes_are_decoded_never_stored_as_their_repr(memory: Memory) -> None:
    report = memory.add(b"I bought a blue bicycle.", speaker="Ann")
    stored = memory.get([i for i in report.stored_ids if i.startswith("raw:")])[0]
    assert stored.text == "I bought a blue bicycle."
    report = memory.add({"speaker": "Ann", "text": b"I sold my old car."})
    assert memory.get([report.stored_ids[0]])[0].text == "I sold my old car."
    assert "b'" not in "".join(r.text for r in memory.store.all("raw"))


@pytest.mark.parametrize(
    ("settings", "error", "words"),
    [
        ({"namespace": 5}, InputError, "namespace must be text"),
        ({"k_r": "abc"}, ConfigError, "k_r must be a whole number"),
        ({"k_r": True}, ConfigError, "k_r must be a whole number"),
        ({"k_r": -1}, ConfigError, "k_r must be from 0 to 20"),
        ({"temperature": float("nan")}, InputError, "temperature must be from 0 to 2"),
        ({"temperature": -5}, InputError, "temperature must be from 0 to 2"),
        ({"chroma_auth_header": "nocolon"}, ConfigError, "chroma_auth_header must be 'Name: value'"),
        ({"base_url": "localhost:8000/v1"}, ConfigError, "base_url is not an http(s) URL"),
        ({"base_url": "not a url"}, ConfigError, "base_url is not an http(s) URL"),
        ({"k_r": 10**6}, ConfigError, "k_r must be from 0 to 20"),  # past LangGraph's step limit mid-question
        ({"token_budget": 10**20}, ConfigError, "token_budget must be at most 9223372036854775807"),
        ({"model_timeout": float("nan")}, InputError, "model_timeout must be a positive number"),
        ({"data_dir": "a\x00b"}, ConfigError, "NUL character"),
        ({"data_dir": "\ud800"}, ConfigError, "is not UTF-8 text"),
        ({"token_budget": None}, ConfigError, "token_budget must be a whole number"),
        ({"chroma_port": "abc"}, ConfigError, "chroma_port must be a whole number"),
        ({"chroma_port": 99999}, ConfigError, "chroma_port must be from 1 to 65535"),
        ({"data_dir": None}, ConfigError, "data_dir must be text"),
        ({"data_dir": ""}, ConfigError, "data_dir is empty"),
        ({"temperature": "hot"}, ConfigError, "temperature must be a number"),
        ({"refresher": "maybe"}, ConfigError, "refresher must be true or false"),
        ({"granularities": "raw,everything"}, InputError, "granularities"),
        ({"colour": "blue"}, InputError, "unknown setting"),
        # found by audit: settings given that nothing would read, which the memory dropped without a word
        ({"chroma_port": 1234}, ConfigError, "setting chroma_port is set but chroma_host is not, so it would go "
         "unused: name the Chroma server (chroma_host, --chroma-host or STRATA_CHROMA_HOST), or leave chroma_port out"),
        ({"chroma_ssl": True}, ConfigError, "setting chroma_ssl is set but chroma_host is not"),
        ({"chroma_auth_header": "X-Token: s"}, ConfigError, "setting chroma_auth_header is set but chroma_host is not"),
        ({"base_url": "http://127.0.0.1:9/v1"}, ConfigError, "setting base_url is set but no model is, so every "
         "answer would be offline: name the model the server serves (model='openai:NAME', --model or STRATA_MODEL)"),
        ({"embedder": ""}, ConfigError, "setting embedder is empty: give local:all-MiniLM-L6-v2 (the default)"),
        ({"owner": " "}, ConfigError, "setting owner is blank (spaces or invisible characters only): give the owner's"),
        ({"owner": "\u200b"}, ConfigError, "setting owner is blank"),
        ({"timezone": " "}, ConfigError, "setting timezone is blank (spaces or invisible characters only): give"),
        ({"ledger_url": "  "}, ConfigError, "setting ledger_url is blank"),
        ({"chroma_host": " ", "chroma_port": 1234}, ConfigError, "setting chroma_host is blank"),
    ],
)
def test_wrong_settings_are_one_line_errors(tmp_path: Path, settings: dict[str, Any], error: type, words: str) -> None:
    settings = {"data_dir": str(tmp_path), **settings}
    namespace = settings.pop("namespace", "ann")
    with pytest.raises(error) as caught:
        Memory(namespace, **settings)
    assert words in one_line(caught)


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("localhost:8000/v1?api_key=sk-live-abcdef123456", "does not start with http:// or https://"),
        ("htp://bob:hunter2@llm.internal:8000/v1", "another scheme"),
        ("bob:hunter2@llm.internal:8000/v1#sk-live-abcdef123456", "does not start with http://"),
        ("htp://bob:hunter#2@llm.internal:8000/v1", "another scheme"),  # found by review
        ("htp://bob:hunter?2@llm.internal:8000/v1", "another scheme"),
        ("sk-live-abcdef123456", "does not start with http://"),  # found by audit: a key given as the URL
        ("sk-proj:abcdef123456", "does not start with http://"),  # (a "scheme" to a URL parser)
        ("htp://sk-live-abcdef123456/v1", "another scheme"),  # a token as the host
        ("http:/sk-live-abcdef123456", "does not start with http://"),
        ("https://", "no host follows"),
    ],
)
def test_a_mistyped_base_url_is_named_without_what_it_holds(tmp_path: Path, url: str, why: str) -> None:
    """The error said the URL, less its user, password, query and fragment; a value that is no URL at all (an
    API key pasted as base_url) or whose host is a token was printed whole. It now says what is wrong with the
    value and what to give, quoting none of it."""
    with pytest.raises(ConfigError) as caught:
        Memory("ann", data_dir=str(tmp_path), model="openai:gpt-4o-mini", base_url=url)
    message = one_line(caught)
    assert message.startswith("base_url is not an http(s) URL") and why in message, message
    assert "give http(s)://host[:port]/path" in message, message
    assert not any(secret in message for secret in ("hunter", "sk-", "abcdef", "api_key", "bob", "llm.internal",
                                                    "8000/v1?", "htp")), message


def test_a_malformed_ledger_url_is_named_without_its_password(tmp_path: Path) -> None:
    """Found by audit: psycopg's reason quotes the part of the URL it could not read, the password included."""
    with pytest.raises(ConfigError) as caught:
        Memory("ann", data_dir=str(tmp_path), ledger_url="postgresql://ann:hunter%zz2@db.internal/strata").stats()
    message = one_line(caught)
    assert message.startswith("ledger_url is not a valid PostgreSQL URL") and "hunter" not in message, message


def test_settings_nothing_would_read_are_refused_and_an_empty_variable_is_unset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by audit: a Chroma port without a host opened the embedded folder, a base_url without a model
    answered offline, `embedder=""` and a blank owner or time zone meant the default; each is one line now.
    An empty STRATA_<NAME> (a .env file's `STRATA_OWNER=`) is unset, and a variable is named as the source."""
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

    fake = GenericFakeChatModel(messages=iter(["ok"]))
    with pytest.raises(ConfigError) as error:
        Memory("ann", data_dir=str(tmp_path), chat_model=fake, base_url="http://127.0.0.1:9/v1")
    assert "setting base_url is not used with a chat_model object, which keeps its own" in one_line(error)
    demo = Memory("ann", data_dir=str(tmp_path), model="offline", base_url="http://127.0.0.1:9/v1")  # offline, said
    assert demo.context("ask").offline()
    for variable in ("STRATA_OWNER", "STRATA_EMBEDDER", "STRATA_TIMEZONE", "STRATA_CHROMA_HOST", "STRATA_BASE_URL"):
        monkeypatch.setenv(variable, "")
    context = Context(namespace="ann", data_dir=str(tmp_path))
    assert (context.owner, context.embedder, context.timezone, context.chroma_host) == ("", Context.embedder, "", "")
    monkeypatch.setenv("STRATA_CHROMA_PORT", "8001")
    with pytest.raises(ConfigError) as error:
        Context(namespace="ann", data_dir=str(tmp_path))
    assert "STRATA_CHROMA_PORT is set but chroma_host is not" in one_line(error)
    assert "or unset STRATA_CHROMA_PORT for the embedded Chroma in data_dir" in one_line(error)
    monkeypatch.setenv("STRATA_CHROMA_HOST", "127.0.0.1")
    assert Context(namespace="ann", data_dir=str(tmp_path)).store_settings().chroma_port == 8001
    monkeypatch.delenv("STRATA_CHROMA_PORT")
    monkeypatch.delenv("STRATA_CHROMA_HOST")
    for argv, says in ((["--chroma-port", "1234"], "setting chroma_port is set but chroma_host is not"),
                       (["--base-url", "http://127.0.0.1:9/v1"], "setting base_url is set but no model is"),
                       (["--embedder", ""], "setting embedder is empty"), (["--owner", " "], "setting owner is blank")):
        assert main(["--data-dir", str(tmp_path / "cli"), *argv, "stats"]) == 2
        assert says in capsys.readouterr().err
    assert not (tmp_path / "cli").exists()


def test_settings_from_text_are_converted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    memory = Memory("ann", data_dir=tmp_path, k_r="3", refresher="false")  # a Path and strings, as a form sends
    context = memory.context("ask")
    assert (context.k_r, context.refresher, context.data_dir) == (3, False, str(tmp_path))
    monkeypatch.setenv("STRATA_K_M", "lots")
    with pytest.raises(ConfigError) as caught:
        Context(namespace="ann")
    assert "STRATA_K_M must be a whole number" in one_line(caught)
    monkeypatch.delenv("STRATA_K_M")
    monkeypatch.setenv("STRATA_K_R", "99")  # out of range: the message names the variable that said so
    with pytest.raises(ConfigError) as caught:
        Context(namespace="ann")
    assert "STRATA_K_R must be from 0 to 20, got 99" in one_line(caught)


@pytest.mark.parametrize(
    ("namespace", "words"),
    [
        ("../../etc", "'..' label"),
        ("a\x00b", "contains '\\x00'"),
        ("x" * 300, "300 characters"),
        ("", "namespace is empty"),
        ("ann smith", "contains ' '"),
        ("/ann", "empty"),
        ("a\\b", "contains"),
    ],
)
def test_namespaces_outside_the_rule_are_refused(tmp_path: Path, namespace: str, words: str) -> None:
    with pytest.raises(InputError) as caught:
        Memory(namespace, data_dir=str(tmp_path))
    assert words in one_line(caught)
    assert not (tmp_path / "ledger.sqlite3").exists()


@pytest.mark.parametrize("namespace", ["ann", "users/ann", "conv-26", "ann@example.com", "José", "a.b_c+d", "x" * 128])
def test_namespaces_inside_the_rule_are_kept_as_given(namespace: str) -> None:
    assert check_namespace(namespace) == namespace


def test_a_data_folder_that_is_a_file(tmp_path: Path) -> None:
    file = tmp_path / "memory.txt"
    file.write_text("not a folder")
    for folder in (file, file / "inside"):
        with pytest.raises(ConfigError) as caught:
            Memory("ann", data_dir=str(folder)).stats()
        assert "point data_dir" in one_line(caught)
    assert file.read_text() == "not a folder"


def test_a_data_folder_that_is_a_loop_of_links_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by audit: `ln -s loop loop` as the data folder raised RuntimeError("Symlink loop ...") from
    Path.resolve (Python 3.11) through Memory, Context and a graph run, and the command line printed a
    40-line traceback."""
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    calls = (lambda d: Memory("ann", data_dir=d), lambda d: Context(namespace="ann", data_dir=d),
             lambda d: build_graph().invoke({"question": "Where?"}, context={"namespace": "ann", "data_dir": d}))
    for folder in (tmp_path / "loop", tmp_path / "a" / "inside"):
        for call in calls:
            with pytest.raises(ConfigError) as error:
                call(str(folder))
            assert f"the memory folder {folder} cannot be found (a loop of symbolic links)" in one_line(error)
    assert main(["--data-dir", str(tmp_path / "loop"), "stats"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_cli_refuses_an_empty_namespace_and_a_bad_port(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for argv in (["--namespace", "", "stats"], ["--chroma-host", "127.0.0.1", "--chroma-port", "99999", "stats"],
                 ["--namespace", "../x", "stats"]):
        assert main(["--data-dir", str(tmp_path / "mem"), *argv]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("strata: error:"), err
    assert not (tmp_path / "mem").exists(), "a refused command must not create the memory folder"


def test_cli_counts_and_an_empty_out_are_refused_in_the_options_words(
    memory: Memory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Audit (API, minor): `history --limit 10**23` said `limit: Input should be ...` (the API's words), and
    `export --out ""` said `--out . is a folder`."""
    data_dir = memory.context("ask").data_dir
    for argv, words in ((["history", "--limit", "9" * 23], "argument --limit: must be a whole number from 1"),
                        (["consolidate", "--limit", "0"], "argument --limit: must be a whole number from 1"),
                        (["undo", "9" * 23], "argument CHANGE_ID: must be a whole number from 1"),
                        (["history", "--limit", "abc"], "argument --limit: invalid int value: 'abc'"),
                        (["export", "--out", " "], "--out is empty: name the file to write")):
        with contextlib.suppress(SystemExit):  # argparse's own errors exit (2) from inside main
            assert main(["--data-dir", data_dir, "--namespace", "ann", *argv]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and words in err[0], (argv, err)


# --- a read-only memory folder ----------------------------------------------------------------
READER = """
import json, sys
from strata import Memory, StrataError
memory = Memory("ann", data_dir=sys.argv[1])
out = {"stats": memory.stats()["raw"], "history": len(memory.history()),
       "ask": memory.ask("Where does Ann live?").answer, "retrieve": len(memory.retrieve("What is Rex?").evidence),
       "export": len(memory.export().records)}
writes = (("add", lambda: memory.add("I moved to Denver.", speaker="Ann")), ("undo", memory.undo),
          ("erase", lambda: memory.erase(about="Ann")))
for name, write in writes:
    try:
        write()
        out[name] = "stored"
    except StrataError as error:
        out[name] = str(error)
print(json.dumps(out))
"""


def read_only_run(folder: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run READER on `folder` made read-only: a read-only bind mount for root (whom permissions do not
    stop), the folder's write permissions removed for anyone else."""
    command = [sys.executable, "-c", READER, os.path.relpath(folder, REPO)]  # relative, as the default `.strata`
    if os.geteuid() != 0:
        for path in [folder, *folder.rglob("*")]:
            path.chmod(path.stat().st_mode & ~0o222)
        return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    if shutil.which("unshare") is None:
        pytest.skip("running as root without unshare: cannot make a folder read-only")
    script = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"'  # $0 is the folder
    wrapped = ["unshare", "-m", "--propagation", "private", "sh", "-c", script, str(folder), *command]
    result = subprocess.run(wrapped, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    if "mount:" in result.stderr or "unshare:" in result.stderr:
        pytest.skip(f"cannot make a read-only mount here: {result.stderr.strip()[:100]}")
    return result


def test_a_read_only_folder_is_read_and_refuses_writes_in_one_line(
    memory: Memory, tmp_path: Path, offline_env: dict[str, str]
) -> None:
    context = memory.context("ask")
    with sqlite_checkpointer(context.data_dir) as saver:  # a saved thread, which an erase would delete
        build_graph(checkpointer=saver).invoke({"question": "Where does Ann live?"},
                                               {"configurable": {"thread_id": "ann"}}, context=context)
    folder = tmp_path / "copy"
    shutil.copytree(context.data_dir, folder)
    before = sorted(p.name for p in folder.rglob("*"))
    result = read_only_run(folder, {**offline_env, "PYTHONPATH": str(REPO)})
    assert result.returncode == 0, result.stderr[-2000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["stats"]["active"] >= 2 and out["ask"] == "Boston" and out["retrieve"] >= 1 and out["export"] >= 2
    for name in ("add", "undo", "erase"):
        assert "read-only" in out[name] and "\n" not in out[name], out[name]
    assert sorted(p.name for p in folder.rglob("*")) == before


def test_a_folder_this_user_may_not_read_is_named_with_the_permission_it_needs(
    memory: Memory, tmp_path: Path, offline_env: dict[str, str]
) -> None:
    """Found by audit: a memory folder of another user (0700, as strata makes them) gave `[Errno 13] Permission
    denied: '.../ledger.sqlite3'` on the command line and a bare PermissionError from `Memory`, with no word on
    what to do. Root is stopped by permissions only without its DAC capabilities (setpriv)."""
    folder = tmp_path / "theirs"
    shutil.copytree(memory.context("ask").data_dir, folder)
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv: permissions do not stop this user")
        for path in [folder, *folder.rglob("*")]:
            os.chown(path, 65534, 65534, follow_symlinks=False)
        prefix = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
    else:
        prefix = []
    folder.chmod(0o700 if prefix else 0o000)
    try:
        code = f"from strata import Memory\nMemory('ann', data_dir={str(folder)!r}).stats()"
        runs = [[*prefix, sys.executable, "-m", "strata", "--data-dir", str(folder), "--namespace", "ann", "stats"],
                [*prefix, sys.executable, "-c", code]]
        for command in runs:
            result = subprocess.run(command, cwd=REPO, env=offline_env, capture_output=True, text=True, timeout=300)
            last = result.stderr.strip().splitlines()[-1]
            assert result.returncode != 0 and f"this user may not read the memory folder {folder} (owner " in last, \
                result.stderr[-1500:]
            assert "run strata as its owner, or give this user read and search (r-x) permission on it" in last
        assert result.stderr.strip().splitlines()[-1].startswith("strata.memory.errors.ConfigError: ")
    finally:
        folder.chmod(0o700)


def test_a_memory_folder_inside_another_memorys_chroma_folder_is_refused(tmp_path: Path) -> None:
    """A rebuild of a Chroma folder (after an erase) deletes every folder in it that no collection names: a
    memory kept in there would go with it."""
    outer = Memory("a", data_dir=str(tmp_path / "outer"))
    outer.add([{"speaker": "Ann", "text": "I play the cello.", "dia_id": "D1:1"}])
    index = next(p for p in (tmp_path / "outer" / "chroma").iterdir() if p.is_dir())
    for inside in (tmp_path / "outer" / "chroma", index, tmp_path / "outer" / "chroma" / "new" / "deeper"):
        with pytest.raises(ConfigError, match="inside the Chroma folder") as error:
            Memory("b", data_dir=str(inside)).stats()
        assert "\n" not in str(error.value)
    assert not (tmp_path / "outer" / "chroma" / "new").exists()  # refused before anything was made there
    assert [r.text for r in outer.store.all("raw")] == ["I play the cello."]
    assert Memory("b", data_dir=str(tmp_path / "outer" / "beside")).stats()["raw"]["active"] == 0
    import chromadb  # an app's own Chroma folder, which no rebuild of ours touches: a memory may live in it

    chromadb.PersistentClient(path=str(tmp_path / "app")).get_or_create_collection("notes")
    assert Memory("c", data_dir=str(tmp_path / "app" / ".strata")).stats()["raw"]["active"] == 0


def test_a_date_past_the_calendar_resolves_to_nothing(tmp_path: Path) -> None:
    """"tomorrow" said on 31 December 9999 has no date: the turn is stored, and asked about, all the same."""
    memory = Memory("end", data_dir=str(tmp_path / "mem"))
    memory.add([{"speaker": "Ann", "text": "See you tomorrow at the lake.", "time": "9999-12-31T10:00",
                 "dia_id": "D1:1"}])
    assert memory.get(["raw:D1:1"]) and "D1:1" in memory.retrieve("When will Ann be at the lake?").evidence_ids()


def test_a_setting_given_to_memory_is_kept_even_when_it_is_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """STRATA_<FIELD> fills in what the Python API was not given; `data_dir='.strata'` given is that folder,
    and `owner=''` given clears the owner. A run's context from a form (every field sent) keeps the rule by
    value: a default there counts as not given."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("STRATA_DATA_DIR", str(tmp_path / "env-folder"))
    monkeypatch.setenv("STRATA_K_R", "5")
    monkeypatch.setenv("STRATA_OWNER", "Mallory")
    given = Memory("ann", data_dir=".strata", k_r=2, owner="")
    for context in (given.context("ask"), given.context("chat", token_budget=900)):
        assert (Path(context.data_dir).resolve(), context.k_r, context.owner) == ((tmp_path / ".strata"), 2, "")
    given.add([{"speaker": "Ann", "text": "I play the cello.", "dia_id": "D1:1"}])
    assert (tmp_path / ".strata").is_dir() and not (tmp_path / "env-folder").exists()
    unset = Memory("ann").context("ask")
    assert (unset.data_dir, unset.k_r, unset.owner) == (str(tmp_path / "env-folder"), 5, "Mallory")
    form = Context(namespace="ann", data_dir=".strata", k_r=2, owner="")
    assert (form.data_dir, form.k_r, form.owner) == (str(tmp_path / "env-folder"), 5, "Mallory")


def test_a_long_or_multiline_value_is_shown_short_in_one_line(tmp_path: Path) -> None:
    """An error quotes what it was given: a 100,000-character name came back whole (100 KB bodies from the
    admin routes), and a newline in a folder's name split the message."""
    memory = Memory("ann", data_dir=str(tmp_path / "mem"))
    memory.add([{"speaker": "Ann", "text": "I moved to Denver last week.", "dia_id": "D1:1"}])
    long = "Q" * 100_000
    (tmp_path / "file").write_text("not a folder")
    calls = [lambda: memory.erase(about=long), lambda: memory.export(about=long), lambda: memory.graph(person=long),
             lambda: Memory("ann", data_dir=str(tmp_path / "mem"), model="x" * 100_000).ask("Where?"),
             lambda: Memory("ann", data_dir=str(tmp_path / "file" / "a\nb")).stats()]
    for call in calls:
        with pytest.raises(StrataError) as error:
            call()
        assert len(one_line(error)) < 400 and "\n" not in str(error.value)
    assert [r.text for r in memory.store.all("raw")] == ["I moved to Denver last week."]


def test_the_checkpoint_helpers_say_what_is_wrong_in_one_line(tmp_path: Path) -> None:
    """A threads file that is not a database, a folder's name that is not one, or no Memory at all came
    back as sqlite3, TypeError or AttributeError tracebacks."""
    import asyncio

    from strata.checkpoint import async_sqlite_checkpointer, checkpoint_path, checkpointer_for, open_checkpointer

    (tmp_path / "garbage").mkdir()
    (tmp_path / "garbage" / "threads.sqlite3").write_bytes(b"not a database at all" * 100)

    async def opened() -> None:
        async with async_sqlite_checkpointer(tmp_path / "garbage"):
            pass

    for call, says in ((lambda: open_checkpointer(tmp_path / "garbage"), "is not a SQLite database"),
                       (lambda: asyncio.run(opened()), "is not a SQLite database"),
                       (lambda: checkpoint_path(None), "must be a folder's path, not NoneType"),
                       (lambda: open_checkpointer("a\x00b"), "holds a NUL character"),
                       (lambda: checkpointer_for("ann"), "takes a strata.Memory, not str")):
        with pytest.raises(ConfigError) as error:
            call()
        assert says in one_line(error)
    assert (tmp_path / "garbage" / "threads.sqlite3").read_bytes().startswith(b"not a database")  # left as it was


def test_an_ingest_longer_than_langgraphs_step_limit_is_derived_whole(
    tmp_path: Path, offline_env: dict[str, str],
) -> None:
    """LangGraph stops a run after a set number of steps (10,000 unless told): an ingest of 2,600 turns
    stopped with 99 turns never derived. `Memory` sets the run's limit from its turns; here LangGraph's
    default is lowered to 200 so that 60 turns (about 300 steps) show it."""
    script = (
        "from strata.api import Memory\n"
        "from strata.memory.journal import PENDING\n"
        f"memory = Memory('long', data_dir={str(tmp_path)!r})\n"
        "memory.add([{'speaker': 'Ann' if i % 2 else 'Bob', 'text': f'I bought {i} red apples at the market today.'}"
        " for i in range(60)])\n"
        "store = memory.store\n"
        "print(len(store.all('raw')), len({f.dialogue_id for f in store.all('fact')}),"
        " store.ledger.get_state(store.namespace, PENDING, []))\n"
    )
    env = {**offline_env, "LANGGRAPH_DEFAULT_RECURSION_LIMIT": "200"}
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["60", "60", "[]"]


@pytest.mark.parametrize("streamed", ["invoke", "astream"])
def test_a_run_stopped_by_the_step_limit_says_so_in_one_line(tmp_path: Path, streamed: str) -> None:
    """A served ingest of a few thousand turns passed LangGraph's step limit: the run's error was LangGraph's
    two lines and a link, silent on the turns already stored (found through `langgraph dev`). It is one line
    now, with the steps the turns take; the stored turns stay, and the same turns sent again are derived."""
    from langgraph.errors import GraphRecursionError
    from strata.graph.graph import graph
    from strata.memory.journal import PENDING

    turns = [{"speaker": "Ann", "text": f"I planted {n} tulips in the garden.", "dia_id": f"D1:{n}"} for n in (1, 2, 3)]
    ann = Context(namespace="ann", mode="ingest", data_dir=str(tmp_path))

    async def streamed_run() -> None:
        async for _ in graph.astream({"turns": turns}, {"recursion_limit": 6}, context=ann):
            pass

    with pytest.raises(InputError) as error:
        if streamed == "astream":
            asyncio.run(streamed_run())
        else:
            graph.invoke({"turns": turns}, {"recursion_limit": 6}, context=ann)
    assert isinstance(error.value, GraphRecursionError)  # what an app catching LangGraph's own still catches
    assert one_line(error).startswith("the run stopped at LangGraph's step limit (recursion_limit 6) before it "
                                      "finished: 3 turns take up to 25 steps (five a turn): set the run's config "
                                      "recursion_limit to 25, or send the turns in smaller batches. What it stored")
    store = Memory("ann", data_dir=str(tmp_path)).store
    assert len(store.all("raw")) == 3 and store.ledger.get_state("ann", PENDING, [])  # written ahead, kept
    graph.invoke({"turns": turns}, context=ann)
    store = Memory("ann", data_dir=str(tmp_path)).store
    assert {f.dialogue_id for f in store.all("fact")} == {"D1:1", "D1:2", "D1:3"}
    assert store.ledger.get_state("ann", PENDING, []) == []


def test_a_stopped_run_resumes_only_under_its_own_namespace(tmp_path: Path) -> None:
    """A run resumed from its checkpoint (input None) does not pass start_run: resumed as another namespace,
    it researched the stopped run's turn against that memory and skipped the rest, deriving nothing."""
    from langgraph.checkpoint.memory import InMemorySaver

    app = build_graph(checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "t1"}}
    turns = [{"speaker": "Ann", "text": f"I planted {n} tulips in the garden.", "dia_id": f"D1:{n}"} for n in (1, 2)]
    as_ann = Context(namespace="ann", mode="ingest", data_dir=str(tmp_path))
    app.invoke({"turns": turns}, thread, context=as_ann, interrupt_before=["judge"])  # stopped mid-turn
    with pytest.raises(InputError) as error:
        app.invoke(None, thread, context=Context(namespace="bob", mode="ingest", data_dir=str(tmp_path)))
    assert "this thread's stopped run belongs to namespace 'ann': resume it with that namespace" in one_line(error)
    app.invoke(None, thread, context=as_ann)  # its own namespace finishes it
    facts = Memory("ann", data_dir=str(tmp_path)).store.all("fact")
    assert {f.dialogue_id for f in facts} == {"D1:1", "D1:2"}
    assert Memory("bob", data_dir=str(tmp_path)).stats()["fact"]["active"] == 0


@pytest.mark.parametrize("empty", ["", "   ", {}])
def test_an_empty_chat_model_field_of_a_form_is_not_given(empty: object, tmp_path: Path) -> None:
    """A run's context from a form sends `chat_model` empty: offline, as every other empty field is not given."""
    context = Context(namespace="ann", data_dir=str(tmp_path), chat_model=empty)
    assert context.chat_model is None


def _chroma_full() -> Exception:
    from chromadb.errors import InternalError

    return InternalError("Query error: Database error: error returned from database: (code: 13) database or disk "
                         "is full")  # as Chroma 1.x said it when a tmpfs filled up


def _postgres_full() -> Exception:
    from psycopg.errors import DiskFull

    # SQLSTATE 53100, as a PostgreSQL ledger speaking German says it (no English words to match)
    return DiskFull('konnte Datei »base/16384/16385« nicht erweitern: Auf dem Gerät ist kein Speicherplatz mehr')


@pytest.mark.parametrize("full", [_chroma_full, lambda: sqlite3.OperationalError("database or disk is full"),
                                  _postgres_full])
def test_a_full_disk_mid_write_is_one_line_and_keeps_what_is_stored(
    full: Any, memory: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write the disk has no room for (Chroma's error, or the SQLite ledger's) rose out of `add` as it was,
    with the graph's traceback; a caller is told in one line to free space (a real full disk: test_cli_edges)."""
    before = snapshot(memory)

    def no_room(*args: Any, **kwargs: Any) -> None:
        raise full()

    monkeypatch.setattr(MemoryStore, "_write", no_room)
    with pytest.raises(ConfigError) as error:
        memory.add({"speaker": "Ann", "text": "I moved to Denver.", "dia_id": "D9:1"})
    assert one_line(error).startswith(f"the disk holding {memory.context('ask').data_dir} is full: free space")
    monkeypatch.undo()
    assert snapshot(memory) == before


def test_a_relative_folder_is_found_once_when_the_memory_is_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, embedder: Any
) -> None:
    """Found by review: a relative data_dir was resolved again at every call, against the working directory
    then (or, on an event loop, the one at import), so an app that changed directory, or called on its loop
    and in worker threads, split one memory over two folders."""
    (tmp_path / "app").mkdir()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "app")
    memory = Memory("ann", data_dir="mem")
    memory.add([{"speaker": "Ann", "text": "I live in Boston.", "dia_id": "D1:1", "time": "2023-05-08T10:00"}])
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert memory.stats()["raw"]["active"] == 1
    assert memory.context("ask").data_dir == str(tmp_path / "app" / "mem")
    assert not (tmp_path / "elsewhere" / "mem").exists()
