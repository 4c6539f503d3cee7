"""Namespace names: canonically equal spellings are one memory (memory/namespaces.py), and a memory an earlier
version stored under a spelling that is not composed still opens (memory/registry.py `stored_name`)."""

from __future__ import annotations

import logging
import unicodedata
from pathlib import Path
from typing import Any

import pytest
from strata.memory.namespaces import check_namespace
from strata.memory.registry import close_all

from strata import Memory

# (composed, another spelling of it) that earlier versions kept apart: no combining mark in the second
EQUAL = [
    ("\uac00", "\u1100\u1161"),  # Hangul 가 as a syllable / as conjoining jamo (macOS file names, some IMEs)
    ("\ud55c\uad6d", "\u1112\u1161\u11ab\u1100\u116e\u11a8"),  # 한국
    ("\u00c5ngstr\u00f6m", "\u212bngstr\u00f6m"),  # Å / the Angstrom sign
    ("\u0915\u093c", "\u0958"),  # क़ : क + nukta / U+0958, excluded from composition
    ("Kate", "\u212aate"),  # the Kelvin sign is a K
]


def said(text: str) -> list[dict[str, str]]:
    return [{"speaker": "Ann", "text": text}]


@pytest.mark.parametrize(("composed", "other"), EQUAL)
def test_canonically_equal_names_are_one_namespace(composed: str, other: str) -> None:
    """Found by audit: each pair opened two memories, the second empty."""
    assert unicodedata.normalize("NFC", other) == composed
    assert check_namespace(other) == check_namespace(composed) == composed
    assert check_namespace(f"users/{other}") == f"users/{composed}"


def test_both_spellings_open_one_memory(data_dir: Path, embedder: Any) -> None:
    for composed, other in EQUAL[:3]:
        Memory(other, data_dir=str(data_dir)).add(said(f"My notes live under {composed}."))
        assert Memory(composed, data_dir=str(data_dir)).stats()["raw"]["active"] == 1
        assert Memory(composed, data_dir=str(data_dir)).store.namespace == composed


def _as_an_earlier_version(monkeypatch: pytest.MonkeyPatch) -> None:
    """Names checked but kept as typed, as earlier versions kept a name of letters and digits."""
    def as_typed(value: object) -> str:
        check_namespace(value)
        return str(value)

    for module in ("strata.graph.context", "strata.memory.registry"):
        monkeypatch.setattr(f"{module}.check_namespace", as_typed)
    monkeypatch.setattr("strata.memory.registry.stored_name", lambda settings, namespace: namespace)


def test_a_memory_stored_under_a_spelling_not_composed_still_opens(
    data_dir: Path, embedder: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """An earlier version stored "\u212bsa" as typed: typed either way, the name opens that memory (never an
    empty one beside it), a write goes into it, and the LangGraph store finds it too."""
    from strata.langgraph_store import StrataStore

    folder = str(data_dir)
    composed, other = "\u00c5sa", "\u212bsa"
    with pytest.MonkeyPatch.context() as patch:
        _as_an_earlier_version(patch)
        Memory(other, data_dir=folder).add(said("I moved to Denver last week."))
        assert Memory(other, data_dir=folder).store.namespace == other
    close_all()
    for spelling in (composed, other):
        memory = Memory(spelling, data_dir=folder)
        assert memory.namespace == composed and memory.store.namespace == other
        assert memory.stats()["raw"]["active"] == 1
    Memory(composed, data_dir=folder).add(said("My dog is called Rex."))
    assert Memory(other, data_dir=folder).stats()["raw"]["active"] == 2
    assert Memory(composed, data_dir=folder).store.ledger.live_namespaces() == [other]  # no second memory
    store = StrataStore(data_dir=folder)
    found = store.search((composed,), query="Where does Ann live?")
    assert found and {item.namespace for item in found} == {(composed,)}
    assert store.list_namespaces() == [(composed,)]
    # an earlier version's two spellings of one name: the composed one opens, and the log says so
    close_all()
    with pytest.MonkeyPatch.context() as patch:
        _as_an_earlier_version(patch)
        Memory(composed, data_dir=folder).add(said("A memory of its own."))
    close_all()
    with caplog.at_level(logging.WARNING):
        assert Memory(other, data_dir=folder).store.namespace == composed
    assert ascii(other) in caplog.text and "stored under other spellings too" in caplog.text
    assert Memory(composed, data_dir=folder).stats()["raw"]["active"] == 1
    # the composed one dropped, the earlier spelling opens again; dropped too, neither is opened in its place
    Memory(composed, data_dir=folder).drop()
    close_all()
    assert Memory(composed, data_dir=folder).store.namespace == other
    Memory(composed, data_dir=folder).drop()
    close_all()
    assert Memory(other, data_dir=folder).store.namespace == composed and not Memory(
        composed, data_dir=folder).store.ledger.live_namespaces()


def test_names_of_people_already_compare_canonically() -> None:
    """Owners, speakers and `about=` are compared by their canonical form (memory/names.py): the spellings
    that opened two namespaces are one person."""
    from strata.memory.forgetting import same_person

    for composed, other in EQUAL:
        assert same_person(composed, other)
