"""Big turns and long questions: handled up to the configured limits, refused above them in one line.

The limits are `max_turn_chars` and `max_question_chars` in the runtime context
(`STRATA_MAX_TURN_CHARS`, `STRATA_MAX_QUESTION_CHARS`). A turn over the limit is
refused before anything is written, even when it comes after acceptable turns
of the same input. The tests lower the limits so the big turn stays quick; the
cost by size is measured by benchmarks/big_turns.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from strata.graph.context import Context
from strata.graph.state import MAX_NAME_CHARS
from strata.memory.errors import InputError

from strata.api import Memory
from strata.cli import main

LIMIT = 6_000
SENTENCES = [
    "I went hiking near Boulder last Saturday with my sister.",
    "We saw a family of deer by the river.",
    "My new job at the library starts in June.",
    "I painted a sunrise over the lake yesterday.",
    "Next month I will run my first half marathon.",
]


def text_of(size: int) -> str:
    text = " ".join(SENTENCES * (size // 200 + 1))
    return text[: text.rfind(".", 0, size) + 1]


@pytest.fixture(scope="module")
def memory(tmp_path_factory: pytest.TempPathFactory) -> Memory:
    folder = tmp_path_factory.mktemp("big") / "mem"
    memory = Memory("ann", data_dir=str(folder), max_turn_chars=LIMIT, max_question_chars=500)
    memory.add([{"speaker": "Ann", "text": "I live in Boston.", "time": "2023-05-01T10:00:00Z"}])
    return memory


def fingerprint(memory: Memory) -> Any:
    store = memory.store
    return (sorted((r.id, r.text) for k in ("raw", "fact", "episode", "persona") for r in store.all(k, True)),
            memory.stats(), store.ledger.get_state(store.namespace, "turn_counter", 0))


def test_the_defaults_are_tens_of_kilobytes() -> None:
    context = Context()
    assert context.max_turn_chars == 40_000 and context.max_question_chars == 8_000


def test_a_big_turn_under_the_limit_is_stored_and_found(memory: Memory) -> None:
    text = text_of(LIMIT - 100)
    assert LIMIT - 300 < len(text) <= LIMIT
    report = memory.add([{"speaker": "Ann", "text": text, "time": "2023-05-08T10:00:00Z"}])
    raw = [i for i in report.stored_ids if i.startswith("raw:")]
    assert len(raw) == 1 and memory.get(raw)[0].text == text
    facts = [i for i in report.stored_ids if i.startswith("fact:")]
    assert 0 < len(facts) <= len(SENTENCES) * 2, "repeated sentences give each fact once"
    assert raw[0].removeprefix("raw:") in memory.ask("What does Ann paint?").evidence_ids()


def test_a_turn_over_the_limit_is_one_line_and_stores_nothing(memory: Memory) -> None:
    before = fingerprint(memory)
    ok = {"speaker": "Ann", "text": "I adopted a cat.", "time": "2023-05-09T10:00:00Z"}
    too_long = {"speaker": "Ann", "text": "x" * (LIMIT + 1)}
    for turns in ([{"speaker": "Ann", "text": text_of(LIMIT + 500)}], [ok, too_long]):
        with pytest.raises(InputError) as error:
            memory.add(turns)
        message = str(error.value)
        assert "\n" not in message and "max_turn_chars=6,000" in message and "split it" in message, message
        assert fingerprint(memory) == before
    with pytest.raises(InputError, match="max_turn_chars"):
        memory.chat("y" * (LIMIT + 1), speaker="Ann")
    assert fingerprint(memory) == before


def test_an_id_or_a_name_that_is_text_is_one_line_and_stores_nothing(memory: Memory) -> None:
    before = fingerprint(memory)
    ok = {"speaker": "Ann", "text": "I adopted a cat.", "dia_id": "D9:1"}
    for field in ("dia_id", "speaker", "listener", "session"):
        with pytest.raises(InputError) as error:
            memory.add([ok, {**ok, "dia_id": "D9:2", field: "D" * (MAX_NAME_CHARS + 1)}])
        message = str(error.value)
        assert "\n" not in message and len(message) < 200 and f"turn 2: {field} has 201 characters" in message
        assert fingerprint(memory) == before
    report = memory.add([{**ok, "dia_id": "D" * MAX_NAME_CHARS, "speaker": "S" * MAX_NAME_CHARS}])
    assert f"raw:{'D' * MAX_NAME_CHARS}" in report.stored_ids


def test_a_question_over_the_limit_is_one_line(memory: Memory) -> None:
    before = fingerprint(memory)
    for ask in (memory.ask, memory.retrieve):
        with pytest.raises(InputError) as error:
            ask("Where does Ann live? " * 40)
        assert "\n" not in str(error.value) and "max_question_chars=500" in str(error.value)
    assert memory.ask("Where does Ann live? " * 20).answer  # 420 characters: under the limit
    assert fingerprint(memory) == before


def test_the_cli_refuses_a_file_with_a_turn_over_the_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STRATA_MAX_TURN_CHARS", "1000")
    file = tmp_path / "turns.json"
    file.write_text(json.dumps([{"speaker": "Ann", "text": "Hello there."}, {"speaker": "Bo", "text": "z" * 1001}]))
    assert main(["--data-dir", str(tmp_path / "mem"), "ingest", str(file)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "max_turn_chars=1,000" in err[0], err
    assert Memory("default", data_dir=str(tmp_path / "mem")).stats()["raw"]["active"] == 0
