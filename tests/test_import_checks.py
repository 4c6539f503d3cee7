"""An import takes exactly what ingest and the store's writes could have produced, checked before anything is
written (memory/portability.py): a file, parsed JSON or a `MemoryDocument` object edited after loading alike.
Each wrong document is refused in one line naming the first bad place, and the namespace stays empty."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import offline_environment
from strata.memory.errors import InputError
from strata.memory.portability import MemoryDocument
from strata.memory.registry import close_all

from strata import Memory
from strata.conversations import load_turns
from strata.ingestion import ingest_conversation
from strata.langgraph_store import StrataStore

SAMPLE = Path(__file__).resolve().parents[1] / "strata" / "data" / "sample_conversation.json"


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> dict[str, Any]:
    """The sample conversation ingested and consolidated, with a store item, exported once as parsed JSON."""
    folder = tmp_path_factory.mktemp("import_checks")
    with offline_environment():
        memory = Memory("src", data_dir=str(folder))
        ingest_conversation(memory, load_turns(SAMPLE))
        memory.consolidate()
        StrataStore(data_dir=str(folder)).put(("src",), "note", {"text": "the door code is 1234"})
        document = json.loads(memory.export().model_dump_json())
        close_all()
    return document


def _edited(document: dict[str, Any], edit: Any) -> dict[str, Any]:
    changed = copy.deepcopy(document)
    edit(changed)
    return changed


def _first(document: dict[str, Any], kind: str = "raw") -> dict[str, Any]:
    return next(r for r in document["records"] if r["kind"] == kind and not r["id"].startswith("raw:item:"))


def _refused(memory: Memory, document: Any, says: str) -> None:
    with pytest.raises(InputError, match=says) as error:
        memory.import_from(document)
    assert "\n" not in str(error.value) and "nothing was imported" in str(error.value)
    assert memory.stats()["raw"]["active"] == 0 and memory.stats()["history"] == 0


def test_numbers_are_bounded_as_a_turn_bounds_them(exported: dict[str, Any], tmp_path: Path) -> None:
    """An offset or version of 2**70 imported, and every later command on the namespace was a traceback
    (Chroma kept it as a float no load read back); an offset past a day broke `strata graph`."""
    target = Memory("target", data_dir=str(tmp_path))
    for field, value in (("utc_offset", 2**70), ("version", 2**70), ("utc_offset", 10**9), ("version", 0)):
        _refused(target, _edited(exported, lambda d, f=field, v=value: _first(d).update({f: v})), field)
    _refused(target, _edited(exported, lambda d: d["state"].update(turn_counter=-1)), "turn_counter")
    assert target.import_from(exported).records == len(exported["records"])


def test_state_values_have_the_shape_the_code_reads(exported: dict[str, Any], tmp_path: Path) -> None:
    """A catalogue entry of the wrong length made every later add and consolidate an IndexError; an item's time
    without an offset made the store's search a TypeError."""
    target = Memory("target", data_dir=str(tmp_path))
    for entry in ([], ["Porto"], ["Porto", "name", "x"]):
        bad = _edited(exported, lambda d, e=entry: d["state"]["entity_catalogue"].update(porto=e))
        _refused(target, bad, "entity_catalogue")
    naive = _edited(exported, lambda d: [i.update(created_at="2024-01-01T00:00:00", updated_at="2024-01-01T00:00:00")
                                         for i in d["items"]])
    target.import_from(naive)
    found = StrataStore(data_dir=str(tmp_path)).search(("target",))  # sorted beside aware times
    assert [item.updated_at.tzinfo for item in found if item.key == "note"] != [None]


def test_state_names_only_records_it_holds(exported: dict[str, Any], tmp_path: Path) -> None:
    """An open episode naming an absent turn was imported; the next closed session derived an episode from it,
    and every later export of the memory was refused by import."""
    target = Memory("target", data_dir=str(tmp_path))
    fact = _first(exported, "fact")["id"]
    for edit, says in (
        (lambda d: d["state"]["open_episode"]["turn_ids"].append("D9:1"), "D9:1"),
        (lambda d: d["state"].update(last_raw=fact), "last_raw"),
        (lambda d: d["state"].update(last_raw="raw:D9:9"), "last_raw"),
        (lambda d: d["state"].update(pending_derive=["raw:D9:9"]), "raw:D9:9"),
        (lambda d: d["state"]["consolidated_turns"].append("raw:D9:9"), "raw:D9:9"),
    ):
        _refused(target, _edited(exported, edit), says)


def test_an_edited_document_object_is_checked_again(exported: dict[str, Any], tmp_path: Path) -> None:
    """`import_from(document)` trusted a MemoryDocument edited after loading: a record twice was Chroma's
    DuplicateIDError, a state of another shape broke the next add, a NUL went in, a model_construct was an
    AttributeError."""
    target = Memory("target", data_dir=str(tmp_path))
    twice = MemoryDocument.model_validate(exported)
    twice.records.append(twice.records[0])
    _refused(target, twice, "twice")
    shape = MemoryDocument.model_validate(exported)
    shape.state["entity_catalogue"] = "oops"
    _refused(target, shape, "entity_catalogue")
    nul = MemoryDocument.model_validate(exported)
    nul.records[0].text = "my code \x00 4711"
    _refused(target, nul, "damaged")
    _refused(target, MemoryDocument.model_construct(), "namespace")


def test_turns_are_checked_as_ingest_checks_them(exported: dict[str, Any], tmp_path: Path) -> None:
    """Blank turns, turns past max_turn_chars, two turns of one dia_id and unknown record fields went in."""
    target = Memory("target", data_dir=str(tmp_path))
    raw = _first(exported)
    for edit, says in (
        (lambda d: _first(d).update(text="   "), raw["id"]),
        (lambda d: _first(d).update(text="\u200b"), "text is empty"),
        (lambda d: _first(d).update(text="x" * 1_000_001), "max_turn_chars"),
        (lambda d: _first(d).update(speaker=""), "speaker"),
        (lambda d: d["records"].append({**_first(d), "id": "raw:other"}), "twice"),
        (lambda d: _first(d).update(mood="happy"), "mood"),
    ):
        _refused(target, _edited(exported, edit), says)


def test_store_values_an_export_cannot_carry_are_refused(exported: dict[str, Any], tmp_path: Path) -> None:
    """A value nested past what the export writes, or holding NaN (written as null), is refused at the put and
    at the import, in one line."""
    deep: dict[str, Any] = {"text": "x"}
    for _ in range(300):
        deep = {"d": deep}
    store = StrataStore(data_dir=str(tmp_path))
    for value in (deep, {"x": float("nan")}, {"y": [float("inf")]}):
        with pytest.raises(InputError, match=r"nested|NaN") as error:
            store.put(("src",), "bad", value)
        assert "\n" not in str(error.value)
    target = Memory("target", data_dir=str(tmp_path))
    for value in (deep, {"x": float("nan")}):
        _refused(target, _edited(exported, lambda d, v=value: d["items"][0].update(value=v)), "store item")


def test_a_conversation_given_to_import_is_pointed_to_ingest(tmp_path: Path) -> None:
    """`strata import conversation.json` said only "not a memory export ... export one with `strata export`"."""
    target = Memory("target", data_dir=str(tmp_path))
    for conversation in (json.loads(SAMPLE.read_text()), [{"speaker": "Ann", "text": "hi"}],
                         [{"sample_id": "x", "conversation": {}}]):
        _refused_as = pytest.raises(InputError, match="this is a conversation, not a memory export: store it with "
                                                      "`strata ingest FILE`")
        with _refused_as:
            target.import_from(conversation)


def test_a_turn_whose_id_is_not_its_dialogue_id_is_refused(exported: dict[str, Any], tmp_path: Path) -> None:
    """Found by review: a turn `raw:D1:1` told as dialogue "Q9" (or "") was imported; the next writes linked a
    summary to `raw:Q9`, which no record is, and every later export of the memory was refused by import."""
    target = Memory("target", data_dir=str(tmp_path))
    for told in ("Q9", ""):
        _refused(target, _edited(exported, lambda d, told=told: _first(d).update(dialogue_id=told)),
                 "has the dialogue id .*: a turn's id is 'raw:' and its dialogue id")
