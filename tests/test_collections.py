"""Each namespace's Chroma collections are its own, whatever its name, and folders written before keep theirs.

Earlier versions named a collection by 8 hex digits of SHA-1 after a slug that keeps only ASCII
letters and digits, so two names could share every collection: one user read, answered from and
erased another's memory. The pair below shares that old name (found by search, as an attacker
would); the current names differ, a collection's metadata must name the namespace that opens it,
and a collection under its old name is renamed by its own namespace only.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from strata.memory.chroma import collection_name, get_collection, legacy_collection_name, open_client
from strata.memory.errors import ConfigError, InputError, NotFoundError
from strata.memory.records import KINDS
from strata.memory.registry import close_all

from strata.api import Memory

ANN, MALLORY = "users/фзе", "users/аобм"  # one slug ("users"), one SHA-1 prefix
SECRET = {"speaker": "Ann", "text": "My bank PIN is 4417 and I live at 12 Elm Street.", "dia_id": "D1:1",
          "time": "2023-05-08T13:56:00"}


def test_the_pair_shared_its_old_names_and_not_its_new_ones() -> None:
    assert legacy_collection_name(ANN, "raw") == legacy_collection_name(MALLORY, "raw")
    assert collection_name(ANN, "raw") != collection_name(MALLORY, "raw")


def test_a_namespace_whose_old_name_collides_sees_nothing_of_the_other(tmp_path: Path) -> None:
    ann = Memory(ANN, data_dir=str(tmp_path))
    ann.add([SECRET])
    mallory = Memory(MALLORY, data_dir=str(tmp_path))
    assert mallory.stats()["raw"]["active"] == 0
    assert mallory.get(["raw:D1:1"]) == []
    assert "4417" not in mallory.ask("What is Ann's bank PIN?").answer
    with pytest.raises(InputError, match="nothing in this memory was said by or about 'Ann'"):
        mallory.erase(about="Ann")
    assert [r.text for r in ann.get(["raw:D1:1"])] == [SECRET["text"]]


def rename_to_legacy(folder: Path, namespace: str) -> None:
    """Make the namespace's collections look as an earlier version named them."""
    memory = Memory(namespace, data_dir=str(folder))
    client = open_client(memory.context("ask").store_settings())
    for kind in KINDS:
        get_collection(client, namespace, kind, embedded=True).modify(name=legacy_collection_name(namespace, kind))
    close_all()


def test_a_folder_of_an_earlier_version_is_read_and_its_collections_renamed_by_their_own_namespace(
    tmp_path: Path,
) -> None:
    Memory(ANN, data_dir=str(tmp_path)).add([SECRET])
    rename_to_legacy(tmp_path, ANN)
    mallory = Memory(MALLORY, data_dir=str(tmp_path))  # opens first: the old collections are not its own
    assert mallory.stats()["raw"]["active"] == 0 and "4417" not in mallory.ask("What is the bank PIN?").answer
    ann = Memory(ANN, data_dir=str(tmp_path))
    assert "4417" in ann.ask("What is Ann's bank PIN?").answer
    names = {c.name for c in open_client(ann.context("ask").store_settings()).list_collections()}
    assert collection_name(ANN, "raw") in names and legacy_collection_name(ANN, "raw") not in names
    ann.drop()  # what a drop deletes is its own, under either name
    assert mallory.stats()["raw"]["active"] == 0
    names = {c.name for c in open_client(ann.context("ask").store_settings()).list_collections()}
    assert not {collection_name(ANN, k) for k in KINDS} & names


def test_a_collection_whose_metadata_names_another_namespace_is_refused_in_one_line(tmp_path: Path) -> None:
    ann = Memory("ann", data_dir=str(tmp_path))
    ann.add([SECRET])
    client = open_client(ann.context("ask").store_settings())
    client.get_collection(collection_name("ann", "raw")).modify(name=collection_name("bob", "raw"))
    close_all()
    with pytest.raises(ConfigError) as caught:
        Memory("bob", data_dir=str(tmp_path)).ask("What is the bank PIN?")
    message = str(caught.value)
    assert "\n" not in message and "holds the namespace 'ann', not 'bob'" in message


def chroma_names(folder: Path) -> set[str]:
    memory = Memory("any", data_dir=str(folder))
    return {c.name for c in open_client(memory.context("ask").store_settings()).list_collections()}


def test_reads_of_a_namespace_never_written_create_nothing_and_a_later_write_is_read(tmp_path: Path) -> None:
    Memory(ANN, data_dir=str(tmp_path)).add([SECRET])
    before = chroma_names(tmp_path)
    assert collection_name(ANN, "raw") in before
    stranger = Memory("users/made-up", data_dir=str(tmp_path))
    assert "4417" not in stranger.ask("What is Ann's bank PIN?").answer
    assert stranger.retrieve("Where does Ann live?").evidence_ids() == []
    assert stranger.stats()["raw"]["active"] == 0 and stranger.get(["raw:D1:1"]) == []
    assert stranger.graph(question="Where does Ann live?").nodes == []
    with pytest.raises(NotFoundError):  # an empty export of a made-up name is no backup (memory/catalog.py)
        stranger.export()
    assert chroma_names(tmp_path) == before  # no empty collections named after a made-up namespace
    stranger.add([{**SECRET, "speaker": "Sam", "text": "My locker code is 3312."}])  # the write creates them
    assert collection_name("users/made-up", "raw") in chroma_names(tmp_path)
    assert "D1:1" in stranger.retrieve("What is Sam's locker code?").evidence_ids()
